"""Model prices: Sonnet 5.5's cache reads, Haiku 5.5's two tiers by prompt size, a run priced call by call."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agents.events import StepEvent, append_event
from agents.pricing import DEFAULT_PRICES, Price, Rates, Tokens, price_for
from agents.settings_layers import scenario_prices
from scenarios.run import RunRecord, save_run
from scenarios.store import Layout
from tests.agent_run import copy_example
from workers.spend import read_spend

HAIKU = DEFAULT_PRICES["claude-haiku-5-5"]


def test_sonnet_5_5_reads_its_cache_at_ten_cents():
    sonnet = price_for("claude-sonnet-5-5")
    assert sonnet is not None and sonnet.cache_read == pytest.approx(0.10)
    # 700K read from the cache, as one Execute summary at the threshold: $0.07, not $0.14.
    assert Tokens(cache_read=700_000).cost(sonnet) == pytest.approx(0.07)
    assert price_for("claude-sonnet-5").cache_read == pytest.approx(0.20)  # Sonnet 5 kept 0.1x


def test_haiku_5_5_short_prompt_rates():
    call = Tokens(input=10_000, cache_write=20_000, cache_read=50_000, output=2_000)
    expected = (10_000 * 0.10 + 20_000 * 0.125 + 50_000 * 0.01 + 2_000 * 0.50) / 1e6
    assert call.cost(HAIKU) == pytest.approx(expected)


def test_a_prompt_of_exactly_100k_is_still_short_and_one_more_token_is_long():
    at = Tokens(input=100_000, output=1_000)
    over = Tokens(input=100_001, output=1_000)
    assert at.cost(HAIKU) == pytest.approx((100_000 * 0.10 + 1_000 * 0.50) / 1e6)
    # Over the line every token of the call is at the long rates, output included.
    assert over.cost(HAIKU) == pytest.approx((100_001 * 0.50 + 1_000 * 2.50) / 1e6)


def test_cache_reads_and_writes_count_toward_the_prompt_size():
    # 1K fresh input alone would be short; with 99,001 read and written around it the prompt is 100,001.
    call = Tokens(input=1_000, cache_write=9_001, cache_read=90_000, output=500)
    expected = (1_000 * 0.50 + 9_001 * 0.625 + 90_000 * 0.05 + 500 * 2.50) / 1e6
    assert call.prompt == 100_001 and call.cost(HAIKU) == pytest.approx(expected)
    assert call.uncached_cost(HAIKU) == pytest.approx((100_001 * 0.50 + 500 * 2.50) / 1e6)


def test_a_tier_needs_both_its_size_and_its_rates():
    with pytest.raises(ValidationError, match="long_above and long go together"):
        Price(input=1, output=1, cache_write=1, cache_read=1, long_above=10)
    flat = Price(input=1, output=2, cache_write=3, cache_read=4)
    assert flat.for_prompt(10**9) is flat  # no tier: one set of rates whatever the prompt


@pytest.fixture
def haiku_run(tmp_path: Path) -> Path:
    root = copy_example(tmp_path)
    pin = {"asked": "haiku", "id": "claude-haiku-5-5", "line": "haiku", "max_input_tokens": 1_000_000}
    save_run(root, RunRecord(scenario=root.name, models={"init": pin}))
    return root


def _step(step: int, input_tokens: int, output_tokens: int) -> StepEvent:
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    return StepEvent(step=step, iteration=1, model="anthropic", request="r", usage=usage, estimated_input=1,
                     threshold=2, duration_s=0.1)


def test_a_run_is_priced_call_by_call_each_at_its_own_tier(haiku_run):
    events = Layout(haiku_run).events("init")
    append_event(events, _step(1, 60_000, 1_000))  # short
    append_event(events, _step(2, 150_000, 1_000))  # long
    init = read_spend(haiku_run).agents["init"]
    short = (60_000 * 0.10 + 1_000 * 0.50) / 1e6
    long = (150_000 * 0.50 + 1_000 * 2.50) / 1e6
    assert init.total.cost_usd == pytest.approx(short + long)
    assert init.by_iteration[1].cost_usd == pytest.approx(short + long)
    # Summing the tokens first would have priced both calls as one long one.
    assert init.total.cost_usd != pytest.approx(init.total.tokens.cost(HAIKU))


def test_a_scenario_gives_a_tiered_price_in_its_toml(haiku_run):
    toml = haiku_run / "scenario.toml"
    tier = "long = {input = 2, output = 2, cache_write = 2, cache_read = 2}"
    toml.write_text(toml.read_text() + '\n[prices.claude-haiku-5-5]\ninput = 1\noutput = 1\ncache_write = 1\n'
                    f'cache_read = 1\nlong_above = 10\n{tier}\n')
    price = scenario_prices(haiku_run)["claude-haiku-5-5"]
    assert price.long_above == 10 and price.long == Rates(input=2, output=2, cache_write=2, cache_read=2)
    assert Tokens(input=11, output=1).cost(price) == pytest.approx(24 / 1e6)

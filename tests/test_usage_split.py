"""Issue 32, item 3: the API's usage with its cache writes split by lifetime and its compaction iterations,
read into ``Usage`` and priced by ``Tokens``: a 1-hour write at its own price, a compaction's tokens counted."""

from __future__ import annotations

import pytest

from agents.pricing import DEFAULT_PRICES, Price, Rates, Tokens
from context.messages import Usage

SONNET = DEFAULT_PRICES["claude-sonnet-5-5"]  # $/MTok: input 2, 5m write 2.50, 1h write 4, read 0.10, output 10
OLD = {"input_tokens": 1_000, "cache_creation_input_tokens": 2_000, "cache_read_input_tokens": 10_000,
       "output_tokens": 500}
SPLIT = {
    "input_tokens": 1_000, "cache_creation_input_tokens": 30_000, "cache_read_input_tokens": 100_000,
    "output_tokens": 2_000,
    "cache_creation": {"ephemeral_5m_input_tokens": 10_000, "ephemeral_1h_input_tokens": 20_000},
    "iterations": [
        # The API's summary request: billed, yet not in the top-level counts (the SDK's BetaIterationsUsage).
        {"type": "compaction", "input_tokens": 50_000, "cache_creation_input_tokens": 8_000,
         "cache_read_input_tokens": 40_000, "output_tokens": 3_000,
         "cache_creation": {"ephemeral_5m_input_tokens": 2_000, "ephemeral_1h_input_tokens": 6_000}},
        # The sampling that answered: its tokens are the top level's, so counting it again would pay twice.
        {"type": "message", "input_tokens": 1_000, "cache_creation_input_tokens": 30_000,
         "cache_read_input_tokens": 100_000, "output_tokens": 2_000, "model": "claude-sonnet-5-5"},
    ],
    "service_tier": "standard",  # a field baton does not keep
}


def test_the_sonnet_5_5_price_has_the_1_hour_write_at_twice_input():
    assert SONNET.cache_write_1h == pytest.approx(4.0) and SONNET.cache_write == pytest.approx(2.5)
    haiku = DEFAULT_PRICES["claude-haiku-5-5"]
    assert haiku.cache_write_1h == pytest.approx(0.20) and haiku.long.cache_write_1h == pytest.approx(1.0)
    assert Rates(input=3, output=1, cache_write=1, cache_read=1).cache_write_1h == 6
    assert Price(input=3, output=1, cache_write=1, cache_read=1, cache_write_1h=5).cache_write_1h == 5


def test_a_split_usage_with_a_compaction_iteration_is_priced_by_hand():
    usage = Usage.model_validate(SPLIT)
    assert (usage.cache_write_5m, usage.cache_write_1h) == (10_000, 20_000)
    assert usage.total_input == 131_000  # the top level only: what the answering call read
    assert [c.input_tokens for c in usage.compactions] == [50_000]
    tokens = Tokens.of(usage)
    assert tokens == Tokens(input=51_000, cache_write=12_000, cache_write_1h=26_000, cache_read=140_000,
                            output=5_000)
    top = 1_000 * 2 + 10_000 * 2.5 + 20_000 * 4 + 100_000 * 0.1 + 2_000 * 10  # 137,000 micro-dollars
    compaction = 50_000 * 2 + 2_000 * 2.5 + 6_000 * 4 + 40_000 * 0.1 + 3_000 * 10  # 163,000
    assert tokens.cost(SONNET) == pytest.approx((top + compaction) / 1e6) == pytest.approx(0.300)
    assert Tokens.of(SPLIT) == tokens  # the dict stored in a step event reads the same
    assert tokens.uncached_cost(SONNET) == pytest.approx((tokens.prompt * 2 + 5_000 * 10) / 1e6)


def test_old_four_field_usage_loads_dumps_and_prices_as_before():
    usage = Usage.model_validate(OLD)
    assert usage.model_dump() == OLD  # stored in every event: no new keys where there is nothing to say
    assert (usage.cache_write_5m, usage.cache_write_1h, usage.compactions) == (2_000, 0, [])
    tokens = Tokens.of(OLD)
    assert tokens == Tokens(input=1_000, cache_write=2_000, cache_read=10_000, output=500)
    opus = DEFAULT_PRICES["claude-opus-5-5"]
    assert tokens.cost(opus) == pytest.approx((1_000 * 4 + 2_000 * 5 + 10_000 * 0.2 + 500 * 20) / 1e6)
    nulls = {"input_tokens": 7, "output_tokens": None, "cache_creation_input_tokens": None,
             "cache_read_input_tokens": None, "cache_creation": None, "iterations": None}
    assert Usage.model_validate(nulls).model_dump() == {"input_tokens": 7, "output_tokens": 0,
                                                        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def test_a_split_usage_round_trips_and_keeps_its_dump_compact():
    usage = Usage.model_validate(SPLIT)
    dumped = usage.model_dump()
    assert Usage.model_validate(dumped) == usage
    assert "service_tier" not in dumped and "model" not in dumped["iterations"][0]  # absent, so not written
    assert dumped["iterations"][1]["model"] == "claude-sonnet-5-5"
    assert "iterations" not in Usage.model_validate({**OLD, "iterations": []}).model_dump()


def test_cache_writes_over_the_split_are_5_minute_and_a_1_hour_part_never_exceeds_the_total():
    # The top-level count is what was billed; the split only says how much of it lives an hour.
    odd = Usage.model_validate({**OLD, "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                                          "ephemeral_1h_input_tokens": 5_000}})
    assert (odd.cache_write_5m, odd.cache_write_1h) == (0, 2_000)

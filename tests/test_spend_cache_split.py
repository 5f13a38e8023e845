"""Issue 32: ``baton status`` shows spend including the API's compaction iterations and the cache writes split
into 5-minute and 1-hour ones, readable at 80 and 120 columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents.events import CompactionRecord, StepEvent, append_event
from agents.pricing import DEFAULT_PRICES, Tokens
from scenarios.run import RunRecord, save_run
from scenarios.store import Layout
from tests.agent_run import copy_example
from workers.cli import cli
from workers.spend import Spend, read_spend

SONNET = DEFAULT_PRICES["claude-sonnet-5-5"]
STEP = {"input_tokens": 3_456, "cache_creation_input_tokens": 123_456, "cache_read_input_tokens": 1_234_567,
        "output_tokens": 45_678,
        "cache_creation": {"ephemeral_5m_input_tokens": 23_456, "ephemeral_1h_input_tokens": 100_000}}
# What an on-demand compaction reports: nothing at the top level, its request in a compaction iteration.
API_COMPACTION = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0,
                  "iterations": [{"type": "compaction", "input_tokens": 180_000, "output_tokens": 4_000,
                                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 20_000}]}


def _step(step: int, iteration: int) -> StepEvent:
    return StepEvent(step=step, iteration=iteration, model="anthropic", request="r", usage=STEP,
                     estimated_input=150_000, threshold=200_000, duration_s=0.1)


def _compaction(id: int, after_step: int, strategy: str) -> CompactionRecord:
    return CompactionRecord(id=id, after_step=after_step, kept_from_seq=2, kept_until_seq=3, prompt="P",
                            summary={}, usage=API_COMPACTION, strategy=strategy)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    root = copy_example(tmp_path)
    pin = {"asked": "sonnet", "id": "claude-sonnet-5-5", "line": "sonnet", "max_input_tokens": 1_000_000}
    save_run(root, RunRecord(scenario=root.name, models={"init": pin, "execute": pin}))
    for role in ("init", "execute"):
        events = Layout(root).events(role)
        for step in range(1, 31):
            append_event(events, _step(step, 1 + step // 16))
        for n, strategy in ((1, "api"), (2, "api"), (3, "summary")):
            append_event(events, _compaction(n, n * 10, strategy))
    return root


def test_a_compaction_with_only_a_compaction_iteration_is_not_free(run):
    init = read_spend(run).agents["init"]
    compaction = (180_000 * 2 + 20_000 * 0.10 + 4_000 * 10) / 1e6  # $0.402 each, by hand
    assert [c.spend.cost_usd for c in init.per_compaction] == pytest.approx([compaction] * 3)
    assert init.compactions.tokens == Tokens(input=540_000, cache_read=60_000, output=12_000)
    assert init.compactions.cost_usd == pytest.approx(3 * compaction)


def test_steps_pay_the_1_hour_writes_at_their_own_price(run):
    init = read_spend(run).agents["init"]
    assert init.steps.tokens.cache_write == 30 * 23_456 and init.steps.tokens.cache_write_1h == 30 * 100_000
    step = (3_456 * 2 + 23_456 * 2.5 + 100_000 * 4 + 1_234_567 * 0.10 + 45_678 * 10) / 1e6
    assert init.steps.cost_usd == pytest.approx(30 * step)


def test_a_compaction_iteration_is_priced_at_its_own_prompts_tier():
    # Haiku 5.5 bills a prompt over 100,000 tokens at its long rates: the answer (60K) and the compaction
    # request (60K) are two requests of 60K, both short, not one of 120K.
    haiku = DEFAULT_PRICES["claude-haiku-5-5"]
    usage = {"input_tokens": 60_000, "output_tokens": 1_000,
             "iterations": [{"type": "compaction", "input_tokens": 60_000, "output_tokens": 2_000,
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}]}
    spent = Spend.of_usage(usage, haiku)
    assert spent.cost_usd == pytest.approx((120_000 * 0.10 + 3_000 * 0.50) / 1e6)
    assert spent.tokens == Tokens(input=120_000, output=3_000)


def test_a_scenario_prices_the_1_hour_write_itself(run):
    toml = run / "scenario.toml"
    toml.write_text(toml.read_text() + '\n[prices.claude-sonnet-5-5]\ninput = 1\noutput = 1\ncache_write = 1\n'
                    'cache_write_1h = 3\ncache_read = 1\n')
    init = read_spend(run).agents["init"]
    t = init.total.tokens
    assert init.total.cost_usd == pytest.approx((t.input + t.cache_write + 3 * t.cache_write_1h + t.cache_read
                                                 + t.output) / 1e6)


def _spend_lines(output: str) -> list[str]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("what the run spent"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    return lines[start + 1:end + 1]


@pytest.mark.parametrize("columns, header", [(80, "w 1h"), (120, "cache write 1h")])
def test_status_shows_the_1_hour_writes_at_80_and_120_columns(run, columns, header):
    shown = CliRunner().invoke(cli, ["--scenarios-dir", str(run.parent), "status", run.name],
                               env={"COLUMNS": str(columns)})
    assert shown.exit_code == 0, shown.output
    table = _spend_lines(shown.output)
    assert max(len(line) for line in table) <= columns and "…" not in "\n".join(table), shown.output
    heads = [cell.strip() for cell in table[1].split("┃")[1:-1]]
    assert heads.index(header) == heads.index("w 5m" if columns == 80 else "cache write 5m") + 1, heads
    (total,) = [line for line in table if line.startswith("│ total ")]
    cells = [cell.strip() for cell in total.split("│")[1:-1]]
    assert cells[heads.index(header)] == ("6.0M" if columns == 80 else "6,000,000"), total
    assert "3 (2 api)" in shown.output  # the agents' table names who wrote the summaries


def test_status_json_counts_the_apis_compactions(run):
    shown = CliRunner().invoke(cli, ["--scenarios-dir", str(run.parent), "status", run.name, "--json"])
    data = json.loads(shown.output)
    assert data["agents"]["init"]["compactions"] == 3 and data["agents"]["init"]["api_compactions"] == 2
    assert data["spend"]["agents"]["init"]["total"]["tokens"]["cache_write_1h"] == 30 * 100_000

"""What a run spends: tokens by kind per agent, iteration and compaction, priced at the pinned model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents.events import CompactionRecord, ErrorEvent, OutputCutEvent, StepEvent, append_event
from agents.pricing import DEFAULT_PRICES, Price, Tokens, price_for
from scenarios.run import RunRecord, save_run
from scenarios.store import Layout
from tests.agent_run import copy_example
from workers.cli import cli
from workers.spend import read_spend

OPUS = DEFAULT_PRICES["claude-opus-5-5"]
USAGE = {"input_tokens": 1_000, "cache_creation_input_tokens": 2_000, "cache_read_input_tokens": 10_000,
         "output_tokens": 500}


def test_prices_by_id_dated_id_and_override():
    assert price_for("claude-opus-5-5") == OPUS
    assert price_for("claude-opus-4-5-20251101") == DEFAULT_PRICES["claude-opus-4-5"]
    mine = Price(input=1, output=2, cache_write=3, cache_read=4)
    assert price_for("claude-opus-5-5", {"claude-opus-5-5": mine}) == mine
    assert price_for("claude-unknown-9") is None and price_for(None) is None


def test_cost_by_kind_and_what_the_cache_saved():
    tokens = Tokens.of(USAGE)
    assert tokens == Tokens(input=1_000, cache_write=2_000, cache_read=10_000, output=500)
    cost = (1_000 * 4 + 2_000 * 5 + 10_000 * 0.2 + 500 * 20) / 1e6
    assert tokens.cost(OPUS) == pytest.approx(cost)
    assert tokens.uncached_cost(OPUS) == pytest.approx((13_000 * 4 + 500 * 20) / 1e6)
    assert tokens.cost(None) is None


def _step(step: int, iteration: int) -> StepEvent:
    return StepEvent(step=step, iteration=iteration, model="anthropic", request="r", usage=USAGE, estimated_input=1,
                     threshold=2, duration_s=0.1)


def _compaction(id: int, after_step: int) -> CompactionRecord:
    return CompactionRecord(id=id, after_step=after_step, kept_from_seq=2, kept_until_seq=3, prompt="P", summary={},
                            usage={"input_tokens": 100, "cache_read_input_tokens": 9_000, "output_tokens": 300})


@pytest.fixture
def run(tmp_path: Path) -> Path:
    root = copy_example(tmp_path)
    pin = {"asked": "opus", "id": "claude-opus-5-5", "line": "opus", "max_input_tokens": 1_000_000}
    save_run(root, RunRecord(scenario=root.name, models={"init": pin}))
    events = Layout(root).events("init")
    for event in (_step(1, 1), _step(2, 1), _compaction(1, 2), _step(3, 2)):
        append_event(events, event)
    append_event(Layout(root).events("execute"), _step(1, 1))  # execute: no pin, as offline
    return root


def test_spend_per_agent_iteration_and_compaction(run):
    spend = read_spend(run)
    init = spend.agents["init"]
    step = Tokens.of(USAGE)
    summary = Tokens(input=100, cache_read=9_000, output=300)
    assert init.model == "claude-opus-5-5" and init.priced
    assert init.steps.tokens == step + step + step and init.compactions.tokens == summary
    assert init.by_iteration[1].tokens == step + step + summary  # the compaction after step 2 belongs to iteration 1
    assert init.by_iteration[2].tokens == step
    assert [(c.id, c.iteration) for c in init.per_compaction] == [(1, 1)]
    assert init.total.cost_usd == pytest.approx((step + step + step + summary).cost(OPUS))
    assert init.total.saved_by_cache_usd > 0
    execute = spend.agents["execute"]
    assert execute.model is None and not execute.priced and execute.total.cost_usd is None
    assert spend.total.cost_usd is None  # one agent is not priced: no total that leaves it out


def test_replies_paid_for_but_not_kept_are_counted(run):
    before = read_spend(run).agents["init"].steps.tokens
    events = Layout(run).events("init")
    cut = {"input_tokens": 10, "output_tokens": 7}
    append_event(events, OutputCutEvent(step=4, max_tokens=100, usage=cut, retry_max_tokens=200))  # dropped
    append_event(events, OutputCutEvent(step=4, max_tokens=200, usage=cut))  # kept: its step event counts it
    append_event(events, ErrorEvent(step=4, reason="refused", stop_reason="refusal", usage=cut))
    after = read_spend(run).agents["init"].steps.tokens
    assert after == before + Tokens(input=20, output=14)


def test_status_shows_the_spend_and_its_json(run):
    runner = CliRunner()
    shown = runner.invoke(cli, ["--scenarios-dir", str(run.parent), "status", run.name], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "what the run spent" in shown.output and "claude-opus-5-5" in shown.output
    as_json = runner.invoke(cli, ["--scenarios-dir", str(run.parent), "status", run.name, "--json"])
    data = json.loads(as_json.output)
    assert data["models"]["init"]["id"] == "claude-opus-5-5"
    assert data["spend"]["agents"]["init"]["total"]["tokens"]["cache_read"] == 3 * 10_000 + 9_000


def test_a_scenario_prices_a_model_itself(run):
    toml = run / "scenario.toml"
    toml.write_text(toml.read_text() + '\n[prices.claude-opus-5-5]\ninput = 1\noutput = 1\ncache_write = 1\n'
                    'cache_read = 1\n')
    init = read_spend(run).agents["init"]
    assert init.total.cost_usd == pytest.approx(sum(init.total.tokens.model_dump().values()) / 1e6)


def _solver_record(root: Path, iteration: int, model: str, usage: dict[str, int], requests: int,
                   simulated: bool = False) -> None:
    """What the solver gate writes (proving/evaluation/solver.py, proving_logs/solver.json)."""
    logs = Layout(root).outputs(iteration) / "proving_logs"
    logs.mkdir(parents=True, exist_ok=True)
    spend = {"model": model, "simulated": simulated, "requests": requests, "tokens": {model: usage},
             "duration_s": 1.0, "pass_rate": 1.0, "per_sample": {}, "log": "x.eval"}
    (logs / "solver.json").write_text(json.dumps({"iteration": iteration, "k": 3, "solver": spend, "panel": []}))


def test_the_blind_solvers_spend_is_shown_beside_the_agents(run):
    """Issue 31, item 3: the solver's requests and spend are recorded and shown like the agents'."""
    usage = {"input_tokens": 2_000_000, "output_tokens": 100_000, "input_tokens_cache_read": 1_000_000,
             "input_tokens_cache_write": 0}
    _solver_record(run, 1, "anthropic/claude-haiku-5-5", usage, requests=99)
    _solver_record(run, 2, "anthropic/claude-haiku-5-5", usage, requests=105)
    spend = read_spend(run)
    (solver,) = spend.proving.values()
    assert solver.model == "anthropic/claude-haiku-5-5" and solver.requests == 204
    assert solver.total.tokens == Tokens(input=4_000_000, cache_read=2_000_000, output=200_000)
    haiku = DEFAULT_PRICES["claude-haiku-5-5"]
    per_call_mean = Tokens(input=2_000_000, cache_read=1_000_000, output=100_000)
    # Inspect sums a gate's calls; priced as one call of that prompt it would reach the long tier, so the
    # solver's spend is priced at the short tier's rates and says it is an estimate.
    assert solver.total.cost_usd == pytest.approx(2 * (per_call_mean.input * haiku.input
                                                       + per_call_mean.cache_read * haiku.cache_read
                                                       + per_call_mean.output * haiku.output) / 1e6)
    assert set(solver.by_iteration) == {1, 2}
    assert spend.total.tokens == sum((a.total.tokens for a in spend.agents.values()), Tokens()) + solver.total.tokens
    shown = CliRunner().invoke(cli, ["--scenarios-dir", str(run.parent), "status", run.name],
                               env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "solver" in shown.output and "anthropic/claude-haiku-5-5" in shown.output and "204" in shown.output


def test_a_simulated_solver_is_counted_and_not_billed(run):
    _solver_record(run, 1, "baton/simulated", {"input_tokens": 500, "output_tokens": 50}, requests=10,
                   simulated=True)
    (solver,) = read_spend(run).proving.values()
    assert solver.simulated and not solver.priced and solver.total.cost_usd is None
    assert solver.total.tokens == Tokens(input=500, output=50)

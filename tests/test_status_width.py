"""Issue 38, item 3: ``baton status`` fits the terminal once real model names and costs appear.

A run on Claude (model ids like claude-opus-5-5, costs in dollars, millions of tokens) with a simulated blind
solver: every table fits 80 and 100 columns without a cell cut ("$0.9…", "11,…") or a border lost (columns are
dropped or shortened instead), and the footnote about the simulated model says what the table shows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.events import StepEvent, append_event
from scenarios.store import Layout
from tests.export_support import baton as invoke
from tests.shared_runs import SharedRun

OPUS = {"asked": "opus", "id": "claude-opus-5-5", "line": "opus", "max_input_tokens": 1_000_000}
USAGE = {"input_tokens": 12_345, "cache_creation_input_tokens": 234_567, "cache_read_input_tokens": 11_234_567,
         "output_tokens": 98_765,
         "cache_creation": {"ephemeral_5m_input_tokens": 134_567, "ephemeral_1h_input_tokens": 100_000}}
TABLE = ("┏", "┃", "┡", "│", "└", "╭", "╰")


@pytest.fixture(scope="module")
def on_claude(finished_run: SharedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The finished example, as if its agents had run on Claude Opus (pinned, with real usage)."""
    root = finished_run.copy_to(tmp_path_factory.mktemp("width"))
    record = json.loads((root / "run.json").read_text())
    (root / "run.json").write_text(json.dumps(record | {"models": {"init": OPUS, "execute": OPUS}}))
    for role in ("init", "execute"):
        events = Layout(root).events(role)
        for step, iteration in ((901, 1), (902, 2)):
            append_event(events, StepEvent(step=step, iteration=iteration, model="claude-opus-5-5", request="r",
                                           usage=USAGE, estimated_input=150_000, threshold=180_000,
                                           duration_s=1.0))
    logs = root / "execution_outputs" / "iteration_2" / "proving_logs"
    logs.mkdir(exist_ok=True)
    solver = {"model": "baton/simulated", "simulated": True, "requests": 38, "duration_s": 7.5, "pass_rate": 1.0,
              "log": str(logs / "x.eval"), "tokens": {"baton/simulated": {"input_tokens": 20_262,
                                                                          "output_tokens": 1_247}}}
    (logs / "solver.json").write_text(json.dumps({"iteration": 2, "k": 1, "solver": solver}))
    return root


def tables(output: str) -> list[str]:
    return [line for line in output.splitlines() if line[:1] in TABLE]


@pytest.mark.parametrize("columns", [80, 100])
def test_status_tables_fit_with_real_models_and_costs(on_claude: Path, columns: int) -> None:
    shown = invoke(on_claude.parent, "status", on_claude.name, COLUMNS=str(columns))
    assert shown.exit_code == 0, shown.output
    drawn = tables(shown.output)
    assert max(len(line) for line in drawn) <= columns, shown.output
    assert not [line for line in drawn if "…" in line], shown.output  # nothing cut
    assert all(line.rstrip()[-1] in "┓┃┩│┘╮╯" for line in drawn), shown.output  # every right border there
    assert "claude-opus-5-5" in shown.output
    spent = shown.output[shown.output.index("what the run spent"):]
    total = next(line for line in spent.splitlines() if line.startswith("│ total "))
    assert "$" in total, total  # the run's cost, in dollars: the simulated model costs nothing, it is not unknown


def test_the_not_billed_note_only_when_no_cost_is_shown(on_claude: Path, finished_run: SharedRun) -> None:
    billed = invoke(on_claude.parent, "status", on_claude.name, COLUMNS="200").output
    assert "costs are not" not in billed, billed  # costs are shown: the note may not say otherwise
    simulated = invoke(finished_run.root.parent, "status", finished_run.root.name, COLUMNS="200").output
    assert "the simulated model is not billed: tokens are shown, costs are not" in simulated, simulated

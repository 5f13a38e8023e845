"""Issue 38, item 2: a sentence said again and again is said once, with a count.

An agent that stays over its compaction threshold after compaction after compaction (the same warning with other
numbers each time), and a gate that cannot run (Inspect missing) in every iteration: ``status`` and the run's
own output say each once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents.events import WarningEvent, append_event
from proving.evaluation.quality import Quality
from scenarios.run import RunRecord
from scenarios.store import Layout
from tests.export_support import baton as invoke
from tests.shared_runs import SharedRun
from workers.readmodel import read_agent
from workers.render import Progress, summary
from workers.targets import figure_summary, unmet_targets

OVER = "over the threshold of"
NO_INSPECT = "Inspect AI is not installed: it comes with baton (pip install baton; in a checkout: pip install -e .)"


@pytest.fixture(scope="module")
def finished(finished_run: SharedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_run.copy_to(tmp_path_factory.mktemp("repeats"))


def over(step: int, compaction: int, tokens: int) -> WarningEvent:
    """The warning a compaction that left the context over the threshold wrote (agents/compaction_task.py) in
    runs made before it was said once per condition: the same sentence, other numbers."""
    return WarningEvent(after_step=step, reason=(
        f"after compaction {compaction} the context is still ~{tokens} tokens, {OVER} 11000: the last 3 steps "
        "alone are that large; raise the window and threshold or lower keep_last_steps"))


@pytest.fixture
def repeating(finished: Path, tmp_path: Path) -> Path:
    root = tmp_path / finished.name
    shutil.copytree(finished, root)
    for n in range(8):
        append_event(Layout(root).events("init"), over(30 + n, 20 + n, 11_100 + 37 * n))
    return root


def test_status_says_a_repeated_warning_once_with_its_count(repeating: Path) -> None:
    times = sum(OVER in w for w in read_agent(repeating, "init").warnings)
    assert times >= 8
    shown = invoke(repeating.parent, "status", repeating.name).output
    assert shown.count(OVER) == 1, shown
    assert f"{times} times" in shown, shown


def test_a_run_says_a_repeated_warning_once(finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / finished.name
    shutil.copytree(finished, root)
    progress = Progress(root, simulated=False)
    with progress:
        for n in range(8):
            append_event(Layout(root).events("init"), over(30 + n, 20 + n, 11_100 + 37 * n))
            progress.refresh()
    summary(root)
    said = capsys.readouterr().out
    assert said.count(OVER) == 1, said
    assert "init: that warning came 8 times in all" in said, said


def test_a_gate_that_cannot_run_is_explained_once(finished: Path, tmp_path: Path) -> None:
    root = tmp_path / finished.name
    shutil.copytree(finished, root)
    record = RunRecord.model_validate_json((root / "run.json").read_text())
    gates = ["coverage", "duplicate", "floor", "mutation", "solver"]
    quality = Quality(ran=["coverage", "duplicate"], skipped={g: NO_INSPECT for g in ("floor", "mutation", "solver")})
    results = [r.model_copy(update={"figures": figure_summary(quality),
                                    "unmet": unmet_targets(record, r.success_rate, quality, gates)})
               for r in record.results]
    assert sum(NO_INSPECT in u for r in results for u in r.unmet) >= 4  # what run.json holds, each time in full
    (root / "run.json").write_text(json.dumps(record.model_copy(update={"results": results}).model_dump(mode="json")))
    shown = invoke(tmp_path, "status", root.name).output
    assert shown.count("Inspect AI is not installed") == 1, shown
    assert "floor, mutation and solver gates did not run in iterations 1 and 2" in shown, shown
    for r in results:  # each iteration still says what it missed
        assert f"iteration {r.iteration} missed: " in shown and "floor not measured" in shown, shown

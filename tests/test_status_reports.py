"""Issue 38, items 1 and 7: what ``status``, ``export`` and ``evaluate`` say of an iteration's report.json.

``baton evaluate`` rewrites report.json; the run's record (run.json) is judged again on it, and ``status``
shows what it wrote. A torn report.json is called damaged by all three, the same way; ``evaluate`` never
replaces one silently (its evaluation-run count and the gates' figures would go with it), and ``--no-gates``
keeps the gates' figures of the report it replaces.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scenarios.run import copy_scenario, load_run
from tests.export_support import EXAMPLE, UNSET
from tests.export_support import baton as invoke
from tests.shared_runs import SharedRun
from tests.test_sandbox_escapes import NO_BWRAP

pytestmark = pytest.mark.skipif(bool(NO_BWRAP), reason=f"needs a working bubblewrap: {NO_BWRAP}")

REJECTS_TWO = '''
def check_hand_fixed(sample, outcome):
    """Added by hand: this checker rejects the first two samples."""
    if sample["id"].startswith(("s01", "s02")):
        return {"passed": False, "reason": "rejected by the hand-written checker"}
    return {"passed": True, "reason": "ok"}
'''


@pytest.fixture(scope="module")
def finished(finished_run: SharedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_run.copy_to(tmp_path_factory.mktemp("reports"))


@pytest.fixture
def scenario(finished: Path, tmp_path: Path) -> Path:
    target = tmp_path / "refund_desk"
    shutil.copytree(finished, target)
    return target


def report_path(root: Path, n: int) -> Path:
    return root / "execution_outputs" / f"iteration_{n}" / "report.json"


def row(output: str, n: int) -> list[str]:
    (line,) = [line for line in output.splitlines() if line.startswith(f"│ {n} ")]
    return [cell.strip() for cell in line.split("│")[1:-1]]


def heads(output: str) -> list[str]:
    line = next(line for line in output.splitlines() if line.startswith("┃ iteration "))
    return [cell.strip() for cell in line.split("┃")[1:-1]]


# ---- item 1: status shows what evaluate wrote ---------------------------------------------------


def test_status_shows_what_evaluate_wrote_and_the_run_is_judged_again(scenario: Path) -> None:
    gates = {"BATON_PROVING_GATES": "coverage,duplicate,mutation"}
    checker = scenario / "execution_outputs" / "iteration_2" / "checkers" / "hand_fixed.py"
    checker.write_text(REJECTS_TWO)
    worse = invoke(scenario.parent, "evaluate", "refund_desk", "--iteration", "2", **gates)
    assert worse.exit_code == 0, worse.output
    record = load_run(scenario)
    (second,) = [r for r in record.results if r.iteration == 2]
    mutation = second.figures["mutation_score"]
    assert second.success_rate == 0.8 and second.passed == 8 and mutation is not None, second
    assert any(u.startswith("success rate 80% < target 85%") for u in second.unmet), second.unmet
    assert record.status == "failed_target" and record.phase == "done"
    assert "judged again" in worse.output and "succeeded -> failed_target" in worse.output, worse.output

    shown = invoke(scenario.parent, "status", "refund_desk", **gates)
    assert shown.exit_code == 0, shown.output
    assert "done, iteration 2/3, failed_target" in shown.output, shown.output
    cells = row(shown.output, 2)
    assert cells[1] == "80%" and cells[heads(shown.output).index("mutants")] == f"{mutation:.0%}", shown.output
    assert "iteration 2: judged again after `baton evaluate` (evaluation run 2" in shown.output, shown.output
    assert json.loads(invoke(scenario.parent, "status", "refund_desk", "--json").output)["run"]["status"] == \
        "failed_target"

    checker.unlink()
    better = invoke(scenario.parent, "evaluate", "refund_desk", "--iteration", "2", **gates)
    assert better.exit_code == 0, better.output
    assert load_run(scenario).status == "succeeded" and "failed_target -> succeeded" in better.output
    shown = invoke(scenario.parent, "status", "refund_desk", **gates)
    assert "done, iteration 2/3, succeeded" in shown.output and row(shown.output, 2)[1] == "100%", shown.output
    assert "(evaluation run 3" in shown.output, shown.output


def test_status_says_when_a_report_changed_after_the_run_judged_it(scenario: Path) -> None:
    # A report rewritten by something else than `baton evaluate` (an older baton, a hand edit): status shows
    # the report's figures and says run.json's judgement predates them.
    path = report_path(scenario, 2)
    report = json.loads(path.read_text())
    path.write_text(json.dumps(report | {"passed": 7, "failed": 3, "success_rate": 0.7, "run": 5}))
    shown = invoke(scenario.parent, "status", "refund_desk")
    assert row(shown.output, 2)[1] == "70%", shown.output
    assert "iteration 2: report.json (evaluation run 5) is newer than the run's judgement" in shown.output


def test_no_gates_keeps_the_gates_figures_and_counts_on(scenario: Path) -> None:
    before = json.loads(report_path(scenario, 2).read_text())
    assert before["quality"]["ran"], before  # the run's gates wrote their figures
    result = invoke(scenario.parent, "evaluate", "refund_desk", "--iteration", "2", "--no-gates")
    assert result.exit_code == 0, result.output
    after = json.loads(report_path(scenario, 2).read_text())
    # Kept apart from this run's own `quality`, which the proving phase alone decides on, with whose they are.
    assert after["run"] == before["run"] + 1 and after["kept_quality"] == before["quality"], after
    assert after["kept_quality_run"] == before["run"] and "quality" not in after
    assert f"kept the gates' figures of evaluation run {before['run']}" in result.output, result.output
    record = load_run(scenario)
    assert record.status == "succeeded" and record.results[-1].figures["coverage"] == 1.0
    shown = invoke(scenario.parent, "status", "refund_desk")
    assert f"gates' figures from evaluation run {before['run']}" in shown.output, shown.output


# ---- item 7: a torn report.json is damaged, for every command ----------------------------------


def test_a_torn_report_is_damaged_for_status_export_and_evaluate(scenario: Path, tmp_path: Path) -> None:
    path = report_path(scenario, 2)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # half-written
    torn = path.read_bytes()

    shown = invoke(scenario.parent, "status", "refund_desk")
    assert shown.exit_code == 0, shown.output
    assert "iteration 2's report.json is damaged" in shown.output, shown.output
    head = next(line for line in shown.output.splitlines() if line.startswith("refund_desk: "))
    assert "iteration 2's report.json is damaged" in head, head  # not a plain "succeeded"
    overview = invoke(scenario.parent, "status")
    assert "iteration 2's report.json is damaged" in overview.output, overview.output
    data = json.loads(invoke(scenario.parent, "status", "refund_desk", "--json").output)
    assert data["reports"]["2"]["state"] == "damaged" and data["reports"]["1"]["state"] == "ok", data["reports"]

    exported = invoke(scenario.parent, "export", "refund_desk", "--out", str(tmp_path / "out"), "--iteration", "2")
    assert exported.exit_code == 2 and "iteration 2's report.json is damaged" in exported.output, exported.output
    chosen = invoke(scenario.parent, "export", "refund_desk", "--out", str(tmp_path / "out"))
    assert "not evaluated" not in chosen.output and "damaged" in chosen.output, chosen.output

    for flags in ((), ("--no-gates",)):
        refused = invoke(scenario.parent, "evaluate", "refund_desk", "--iteration", "2", *flags)
        assert refused.exit_code == 2, refused.output
        assert "iteration 2's report.json is damaged" in refused.output and "mv " in refused.output
        assert path.read_bytes() == torn  # nothing replaced it


BATON = str(Path(sys.executable).with_name("baton"))


def read_only(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``baton ARGS`` with ``folder`` mounted read-only (bubblewrap): a real read-only file system, which even
    root cannot write, where a chmod would not stop a test run as root."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET} | {"COLUMNS": "400"}
    command = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(folder), str(folder), "--",
               BATON, "--scenarios-dir", str(folder), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("args", [["run", "refund_desk", "--profile", "demo"],
                                  ["evaluate", "refund_desk", "--no-gates"], ["new", "another"]])
def test_a_read_only_folder_is_named_in_a_clear_error(scenario: Path, args: list[str]) -> None:
    if args[0] == "run":
        shutil.rmtree(scenario)
        copy_scenario(EXAMPLE, scenario)
    done = read_only(scenario.parent, *args)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "not writable" in said and str(scenario.parent) in said, said
    assert ".tmp" not in said and "OSError" not in said and "Traceback" not in said, said

"""``baton evaluate NAME [--iteration N]``: an iteration's evaluation run again from disk, without
a model, in the same sandbox and with the same limits (workers/evaluate_command.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.export_support import baton as invoke
from tests.shared_runs import SharedRun
from tests.test_sandbox_escapes import NO_BWRAP

pytestmark = pytest.mark.skipif(bool(NO_BWRAP), reason=f"needs a working bubblewrap: {NO_BWRAP}")

FAILS_S01 = '''
def check_hand_fixed(sample, outcome):
    """Added by hand: this checker now rejects the first sample."""
    if sample["id"].startswith("s01"):
        return {"passed": False, "reason": "rejected by the hand-written checker"}
    return {"passed": True, "reason": "ok"}
'''


@pytest.fixture(scope="module")
def finished(finished_run: SharedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_run.copy_to(tmp_path_factory.mktemp("evaluate"))


@pytest.fixture
def scenario(finished: Path, tmp_path: Path) -> Path:
    target = tmp_path / "refund_desk"
    shutil.copytree(finished, target)
    return target


def report(root: Path, iteration: int) -> dict:
    return json.loads((root / "execution_outputs" / f"iteration_{iteration}" / "report.json").read_text())


def test_it_reruns_the_last_iteration_from_disk(scenario: Path) -> None:
    last = max(int(p.name.split("_")[1]) for p in (scenario / "execution_outputs").iterdir())
    before = report(scenario, last)
    (scenario / "execution_outputs" / f"iteration_{last}" / "checkers" / "hand_fixed.py").write_text(FAILS_S01)
    result = invoke(scenario.parent, "evaluate", "refund_desk")
    assert result.exit_code == 0, result.output
    after = report(scenario, last)
    assert after["total"] == before["total"] and after["passed"] == before["total"] - 1
    assert after["run"] == before["run"] + 1 and after["previous_runs"][-1]["passed"] == before["passed"]
    assert after["model_label"] == "baton evaluate" and after["sandbox"] == "bwrap"
    assert after["limits"] == before["limits"]  # the run's own limits (its profile, its scenario.toml)
    assert [f["layer"] for f in after["failures"]] == ["L3"]
    assert f"iteration {last} (evaluation run {after['run']})" in result.output
    assert "rejected by the hand-written checker" in result.output


def test_an_earlier_iteration_and_the_errors(scenario: Path) -> None:
    result = invoke(scenario.parent, "evaluate", "refund_desk", "--iteration", "1")
    assert result.exit_code == 0, result.output and report(scenario, 1)["run"] == 2
    missing = invoke(scenario.parent, "evaluate", "refund_desk", "--iteration", "9")
    assert missing.exit_code == 2 and "no execution_outputs/iteration_9/" in missing.output
    assert "iterations with outputs: 1, 2" in missing.output
    unknown = invoke(scenario.parent, "evaluate", "nosuch")
    assert unknown.exit_code == 2 and "unknown scenario 'nosuch'" in unknown.output


def test_without_bwrap_it_stops_and_unconfined_is_a_persons_choice(scenario: Path, tmp_path: Path,
                                                                  monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setattr("proving.sandbox.bwrap.SYSTEM_BWRAPS", ())  # not on PATH, nor where distributions put it
    before = report(scenario, 2)
    refused = invoke(scenario.parent, "evaluate", "refund_desk", PATH=str(bin_dir))
    assert refused.exit_code == 2 and "bwrap" in refused.output and "BATON_EVAL_SANDBOX=none" in refused.output
    assert report(scenario, 2) == before  # nothing ran, nothing written
    loose = invoke(scenario.parent, "evaluate", "refund_desk", BATON_EVAL_SANDBOX="none")
    assert loose.exit_code == 0 and "UNCONFINED" in loose.output and report(scenario, 2)["sandbox"] == "none"
    status = invoke(scenario.parent, "status", "refund_desk")
    assert "iteration 2 was evaluated UNCONFINED" in status.output

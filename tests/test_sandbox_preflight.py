"""Without a sandbox for the evaluations, the commands that would need one stop at once (issue 38).

A newcomer on a machine without bubblewrap ran the quick start: Init designed, Execute's RunEvaluation tool
failed with "evaluation samples run only in a bubblewrap sandbox ... not installed", and the run ended much
later with "the agent replied 4 times in a row without a tool call that ran". Now ``baton run`` (approve,
reject, resume) run embedded, and ``baton try``, check the sandbox first (the evaluation's own check,
proving.evaluation.run.check_sandbox) and exit 2 with the install hint before anything is written, unless a
person chose BATON_EVAL_SANDBOX=none. ``baton evaluate`` already did (tests/test_evaluate_command.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios.run import copy_scenario
from tests.export_support import EXAMPLE, baton
from tests.shared_runs import SharedRun


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a machine without bubblewrap: bwrap is not on PATH, nor where distributions put it."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setattr("proving.sandbox.bwrap.SYSTEM_BWRAPS", ())
    return {"PATH": str(empty)}


def said_what_to_do(output: str) -> bool:
    text = " ".join(output.split())
    return "bubblewrap" in text and "apt-get install -y bubblewrap" in text and "BATON_EVAL_SANDBOX=none" in text


def test_the_quick_start_stops_before_copying_the_example(tmp_path: Path, no_bwrap: dict[str, str]) -> None:
    scenarios = tmp_path / "scenarios"
    result = baton(scenarios, "run", "refund_desk", "--auto-approve", "--profile", "demo", **no_bwrap)
    assert result.exit_code == 2, result.output
    assert said_what_to_do(result.output), result.output
    assert "replied" not in result.output and "Traceback" not in result.output
    assert not scenarios.exists() or not any(scenarios.iterdir())  # nothing written, not even the example's copy


def test_approving_a_design_stops_before_execute_starts(awaiting_run: SharedRun, tmp_path: Path,
                                                        no_bwrap: dict[str, str]) -> None:
    root = awaiting_run.copy_to(tmp_path)
    before = files_of(root)
    result = baton(tmp_path, "approve", "refund_desk", "--profile", "demo", **no_bwrap)
    assert result.exit_code == 2 and said_what_to_do(result.output), result.output
    assert files_of(root) == before  # run.json still waits for approval; no step, no log line


def test_try_stops_before_inspect_runs(tmp_path: Path, no_bwrap: dict[str, str]) -> None:
    root = copy_scenario(EXAMPLE, tmp_path / "refund_desk")
    before = files_of(root)
    result = baton(tmp_path, "try", "refund_desk", **no_bwrap)
    assert result.exit_code == 2 and said_what_to_do(result.output), result.output
    assert files_of(root) == before


def test_unconfined_evaluations_are_a_persons_choice(tmp_path: Path, no_bwrap: dict[str, str]) -> None:
    copy_scenario(EXAMPLE, tmp_path / "refund_desk")
    result = baton(tmp_path, "run", "refund_desk", "--profile", "demo", BATON_EVAL_SANDBOX="none", **no_bwrap)
    assert result.exit_code == 3, result.output  # Init designed; the design waits for approval

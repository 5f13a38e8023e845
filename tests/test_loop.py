"""The iteration loop in embedded mode: phases, approval, rejection, resume, bad input."""

from __future__ import annotations

import json

import pytest

from agents.disk import AgentDisk
from scenarios.run import load_run
from scenarios.store import StoreError
from tests.agent_run import assert_log_consistent, copy_example
from workers.embedded import run_embedded
from workers.loop import Team, approve, reject, resume, scenario_root, start


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("BATON_SCENARIOS_DIR", str(tmp_path))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return copy_example(tmp_path)


def _team(root):
    return Team(root, profile="demo", env={})


@pytest.mark.slow  # a whole simulated run
def test_auto_approved_run_fails_iteration_one_and_passes_iteration_two(root):
    ran = run_embedded(start(root, auto_approve=True), _team(root))
    record = load_run(root)
    assert (record.phase, record.status, record.iteration) == ("done", "succeeded", 2)
    assert [(r.iteration, r.success_rate) for r in record.results] == [(1, 0.8), (2, 1.0)]
    assert ran > 50
    for role in ("init", "execute"):
        assert_log_consistent(root, role)
    assert run_embedded(resume(root), _team(root)) == 0  # finished runs have nothing left


@pytest.mark.slow  # a whole simulated run
def test_approval_gate_then_approve_and_reject(root):
    team = _team(root)
    run_embedded(start(root), team)
    assert (load_run(root).phase, load_run(root).status) == ("awaiting_approval", "waiting")
    assert not (root / "execution_outputs").exists()

    run_embedded(reject(root, "Add a rule for gift cards."), team)
    openings = [r for r in AgentDisk.load(root, "init").records if r.kind == "opening"]
    assert "Add a rule for gift cards." in json.dumps(openings[-1].message)
    assert "design/scenario_design.md" in (root / "handoffs/iteration_1/init_to_execute_context.json").read_text()
    assert "gift cards" in (root / "design/scenario_design.md").read_text()
    assert load_run(root).phase == "awaiting_approval"

    run_embedded(approve(root), team)
    assert (root / "handoffs/iteration_1/approval.json").is_file()
    assert load_run(root).iteration == 2 and load_run(root).phase == "awaiting_approval"


def test_approve_or_reject_in_the_wrong_phase_is_a_clear_error(root):
    with pytest.raises(StoreError, match="not started, not awaiting_approval"):
        approve(root)
    run_embedded(start(root, auto_approve=True), _team(root), max_tasks=3)
    with pytest.raises(StoreError, match="designing, not awaiting_approval"):
        reject(root, "x")
    with pytest.raises(StoreError, match="needs feedback"):
        reject(root, "  ")


@pytest.mark.slow  # a whole simulated run
def test_stopped_mid_iteration_resumes_from_disk(root):
    run_embedded(start(root, auto_approve=True), _team(root), max_tasks=25)  # then "everything stops"
    mid = load_run(root)
    assert mid.phase in ("designing", "executing") and mid.status == "running"
    run_embedded(resume(root), _team(root))  # a new process, nothing in memory
    assert (load_run(root).phase, load_run(root).status) == ("done", "succeeded")
    for role in ("init", "execute"):
        assert_log_consistent(root, role)


@pytest.mark.slow  # a whole simulated run
def test_torn_log_line_is_recovered(root):
    run_embedded(start(root, auto_approve=True), _team(root), max_tasks=5)
    with open(root / "state/init/log.jsonl", "ab") as fh:
        fh.write(b'{"seq": 99, "kind": "assis')
    disk = AgentDisk.load(root, "init")
    assert disk.problems and "not valid JSON" in disk.problems[0]
    run_embedded(resume(root), _team(root))
    assert load_run(root).phase == "done"


def test_handoff_edited_into_invalid_json_is_a_clear_error(root):
    run_embedded(start(root), _team(root))
    path = root / "handoffs/iteration_1/init_to_execute_context.json"
    path.write_text('{"scenario": "refund_desk", ')
    with pytest.raises(StoreError, match="not a valid init_to_execute payload"):
        approve(root)
    assert path.read_text() == '{"scenario": "refund_desk", '


def test_unknown_and_hostile_scenarios(root, tmp_path):
    with pytest.raises(StoreError, match="unknown scenario 'nope'.*baton new nope"):
        scenario_root("nope")
    with pytest.raises(StoreError, match="invalid scenario name"):
        scenario_root("../etc")


@pytest.mark.slow  # a whole simulated run
def test_a_new_run_archives_the_finished_one(root):
    run_embedded(start(root, auto_approve=True), _team(root))
    first = load_run(root)
    run_embedded(start(root, auto_approve=True), _team(root))
    archived = list((root / "runs").iterdir())
    assert (
        len(archived) == 1
        and (archived[0] / "run.json").is_file()
        and (archived[0] / "state/execute/log.jsonl").is_file()
    )
    assert load_run(root).started_at >= first.started_at and load_run(root).phase == "done"
    assert_log_consistent(root, "execute")


def _executed(root, claimed_rate: float, passed: int):
    """Iteration 1 handed off by Execute: a handoff claiming ``claimed_rate``, a report with ``passed`` of 10."""
    from scenarios.folder import Folder
    from scenarios.run import RunRecord, claim_run, save_run

    save_run(root, RunRecord(scenario=root.name, phase="executing", target_success_rate=0.85), claim_run(root))
    figures = {"total": 10, "passed": passed, "failed": 10 - passed, "success_rate": passed / 10,
               "failures_per_layer": {"L1": 10 - passed, "L2": 0, "L3": 0, "L4": 0}}
    Folder(root).write_json(root / "execution_outputs/iteration_1/report.json", {"iteration": 1, **figures})
    Folder(root).write_json(root / "handoffs/iteration_1/execute_to_init_context.json", {
        "kind": "execute_to_init", "iteration": 1, "execution_output_dir": "execution_outputs/iteration_1",
        "success_rate": claimed_rate, "totals": {"samples": 10, "passed": passed, "failed": 10 - passed},
        "failures_per_layer": {"L1": 10 - passed}, "layer1_problems_summary": [], "recommendation": "r"})


def test_a_claimed_success_rate_does_not_end_the_run_succeeded(root):
    from workers.loop import do_phase

    _executed(root, claimed_rate=1.0, passed=8)  # a handoff file changed after the fact (SubmitHandoff refuses it)
    assert do_phase(root) == []
    record = load_run(root)
    assert record.status == "error" and record.phase == "executing" and not record.results
    assert "success_rate: claimed 1.0, report.json says 0.8" in record.last_error


def test_the_run_is_decided_on_the_reports_figures(root, monkeypatch):
    from workers.loop import Task, do_phase, do_proving

    monkeypatch.setenv("BATON_PROVING_GATES", "duplicate")  # no design here: coverage would be unmeasured
    _executed(root, claimed_rate=0.9, passed=9)
    assert do_phase(root) == [Task(kind="proving", scenario=root.name)]  # the gates decide, after the handoff
    assert load_run(root).phase == "proving"
    do_proving(root)
    record = load_run(root)
    assert (record.phase, record.status) == ("done", "succeeded")
    assert [(r.success_rate, r.passed, r.total) for r in record.results] == [(0.9, 9, 10)]

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

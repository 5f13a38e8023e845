"""A compaction is asked for before the step that needs it is sent, so each step runs once.

The step that goes on decides for the step after it (``agents.step_request.compaction_first``), and the
phase that opens a turn for the turn's first step (``workers.loop.first_steps``). Here in embedded mode,
which runs the loop the workers run; tests/test_sent_once.py counts the same on real workers.
"""

from __future__ import annotations

from collections import Counter

import pytest

from agents.disk import AgentDisk
from scenarios.run import load_run
from tests.agent_run import copy_example
from workers.embedded import run_embedded
from workers.loop import Task, Team, start

ROLES = ("init", "execute")


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("BATON_SCENARIOS_DIR", str(tmp_path))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return copy_example(tmp_path)


@pytest.mark.slow  # a whole simulated run
def test_each_step_runs_once_and_each_compaction_is_asked_for_before_its_step(root):
    ran: list[tuple[Task, list[Task]]] = []
    run_embedded(start(root, auto_approve=True, profile="demo"), Team(root, profile="demo", env={}),
                 on_task=lambda task, following: ran.append((task, following)))
    record = load_run(root)
    assert (record.phase, record.status) == ("done", "succeeded")
    disks = {role: AgentDisk.load(root, role) for role in ROLES}

    steps = Counter((task.agent, task.number) for task, _ in ran if task.kind == "step")
    assert {key: n for key, n in steps.items() if n > 1} == {}, "steps that ran more than once"
    assert set(steps) == {(role, r.step) for role, disk in disks.items() for r in disk.steps}
    compactions = Counter((task.agent, task.number) for task, _ in ran if task.kind == "compaction")
    on_disk = {(role, e.after_step) for role, disk in disks.items() for e in disk.events if e.kind == "compaction"}
    assert on_disk and set(compactions) == on_disk and max(compactions.values()) == 1

    # Who asked for each: the step before the one that waited for it, or the task that opened that step's turn, a
    # phase or (Init's turn after the gates) the proving task (whether an opening takes a context over the
    # threshold depends on the story; the phase's own decision is tested on its own in test_sent_once).
    askers = {(nxt.agent, nxt.number): task.kind for task, following in ran for nxt in following
              if nxt.kind == "compaction"}
    assert set(askers) == on_disk and "step" in set(askers.values()) <= {"step", "phase", "proving"}
    for task, following in ran:
        if task.kind == "step" and following and following[0].kind == "compaction":
            assert following[0].number == task.number, "a compaction after the step that asked for it"

"""CPU priority across sessions (proving/priority.py), checked on real processes: with Linux autogroups a
process's niceness ranks it only inside its session, so a worker that leads its session sets its group's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proving.priority import autogroup_niceness, autogroups_on
from tests.workers_harness import spawn

ROOT = Path(__file__).resolve().parent.parent
needs_autogroups = pytest.mark.skipif(not autogroups_on(), reason="this kernel has no autogroups (or they are off)")

REPORT = """
import json, os, sys
from proving.priority import autogroup_niceness, lower_priority
before = autogroup_niceness()
now = lower_priority(int(sys.argv[1]))
print(json.dumps({"niceness": now, "before": before, "after": autogroup_niceness(),
                  "leader": os.getsid(0) == os.getpid()}))
"""


def report(increment: int, own_session: bool) -> dict:
    done = subprocess.run([sys.executable, "-c", REPORT, str(increment)], cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=60, start_new_session=own_session)
    return json.loads(done.stdout)


@needs_autogroups
def test_a_session_leader_gives_its_autogroup_its_niceness() -> None:
    seen = report(7, own_session=True)
    assert seen["leader"] and seen["before"] == 0  # a new session starts a new group, at nice 0
    assert seen["niceness"] == min(19, os.nice(0) + 7) and seen["after"] == seen["niceness"]


@needs_autogroups
def test_a_process_inside_another_session_leaves_that_group_alone() -> None:
    mine = autogroup_niceness()
    seen = report(3, own_session=False)  # it shares this test's session: the group is not its own to change
    assert not seen["leader"] and seen["niceness"] == min(19, os.nice(0) + 3)
    assert seen["before"] == seen["after"] == mine == autogroup_niceness()


def test_without_autogroups_niceness_is_all_there_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from proving import priority

    monkeypatch.setattr(priority, "AUTOGROUP_SWITCH", tmp_path / "missing")
    assert not priority.autogroups_on()
    assert not priority.follow_autogroup(5, pid=os.getpid())  # nothing written, whoever leads the session
    off = tmp_path / "off"
    off.write_text("0\n")
    monkeypatch.setattr(priority, "AUTOGROUP_SWITCH", off)
    assert not priority.autogroups_on()


def test_an_unknown_process_has_no_autogroup_niceness() -> None:
    assert autogroup_niceness(2**22 + 1) is None  # above any pid_max: no such process


@needs_autogroups
@pytest.mark.slow  # real Celery workers on redis-server
def test_step_workers_rank_below_the_compaction_worker_across_sessions(tmp_path: Path, redis_server) -> None:
    """Real ``baton worker`` processes, each in its own session as systemd or a container runtime starts
    them: each one's autogroup takes its niceness, so the step workers' groups yield to the compaction's."""
    baton = Path(sys.executable).with_name("baton")
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"} | {"BATON_BROKER_URL": redis_server.url}
    workers = {role: spawn(f"worker-{role}", [str(baton), "worker", role, "--concurrency", "2"], env, tmp_path)
               for role in ("execute", "compaction")}
    try:
        deadline = time.monotonic() + 60
        while not all(" ready." in w.tail() for w in workers.values()) and time.monotonic() < deadline:
            assert all(w.running() for w in workers.values()), "\n".join(w.tail() for w in workers.values())
            time.sleep(0.2)
        mine = os.nice(0)
        assert autogroup_niceness(workers["execute"].pid) == min(19, mine + 10)
        assert autogroup_niceness(workers["compaction"].pid) == mine
    finally:
        for worker in workers.values():
            worker.stop()

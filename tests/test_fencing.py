"""Fencing at the write (scenarios.lease): a writer that lost its lease changes nothing.

The process-level test freezes a real process inside a step with SIGSTOP, lets another
writer take the agent over and finish the turn, then thaws the first one: everything it
goes on to write must be refused and noted, nothing of the turn changed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agents.disk import AgentDisk, open_turn
from agents.openings import execute_opening, init_opening
from agents.step import run_turn
from scenarios.folder import Folder
from scenarios.lease import Lease, LeaseBusy, LeaseLost
from tests.agent_run import agents, assert_log_consistent, copy_example, handoff, turn_surviving_crashes
from tests.load import load_scaled

REPO = Path(__file__).resolve().parent.parent


# ---- the lease itself -------------------------------------------------------------------------


def append_jsonl(path: Path, record: dict, lease: Lease) -> None:
    Folder(path.parent).append_jsonl(path.name, record, lease)


def write_atomic(path: Path, text: str, lease: Lease) -> None:
    Folder(path.parent).write_atomic(path.name, text, lease)


def read_jsonl(path: Path):
    return Folder(path.parent).read_jsonl(path.name)


def test_a_writer_whose_lease_was_taken_writes_nothing(tmp_path: Path) -> None:
    lease_file, log, report = tmp_path / "lease.json", tmp_path / "log.jsonl", tmp_path / "report.json"
    first = Lease.claim(lease_file)
    append_jsonl(log, {"seq": 1}, first)
    write_atomic(report, "first\n", first)
    second = Lease.claim(lease_file)
    assert second.epoch == first.epoch + 1

    with pytest.raises(LeaseLost, match=f"epoch {first.epoch}.*epoch {second.epoch}"):
        append_jsonl(log, {"seq": 2}, first)
    with pytest.raises(LeaseLost):
        write_atomic(report, "stale\n", first)
    assert read_jsonl(log).records == [{"seq": 1}]
    assert report.read_text() == "first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lease.json", "log.jsonl", "report.json"]  # no temp left

    append_jsonl(log, {"seq": 2}, second)  # the current holder writes
    assert [r["seq"] for r in read_jsonl(log).records] == [1, 2]


def test_a_lease_whose_file_was_archived_is_lost(tmp_path: Path) -> None:
    state = tmp_path / "state"
    lease = Lease.claim(state / "lease.json")
    (state / "lease.json").rename(tmp_path / "archived.json")  # what archive_run does to the whole state/
    with pytest.raises(LeaseLost, match="the lease file is gone"):
        append_jsonl(state / "log.jsonl", {"seq": 1}, lease)
    assert not (state / "log.jsonl").exists()


def test_a_fresh_lease_file_does_not_match_an_old_writer_of_the_same_epoch(tmp_path: Path) -> None:
    old = Lease.claim(tmp_path / "lease.json")
    (tmp_path / "lease.json").unlink()  # a new run starts its leases afresh
    new = Lease.claim(tmp_path / "lease.json")
    assert new.epoch == old.epoch == 1
    with pytest.raises(LeaseLost):
        append_jsonl(tmp_path / "log.jsonl", {"seq": 1}, old)


# ---- a frozen writer wakes up after a takeover ------------------------------------------------

CHILD = textwrap.dedent("""
    import json, os, signal, sys
    from pathlib import Path
    from agents.disk import AgentDisk
    from agents.step import run_turn
    from tests.agent_run import agents

    root = Path(sys.argv[1])

    def fault(where, step):
        # Frozen just before the RunEvaluation call of a persisted response runs.
        pending = AgentDisk.load(root, "execute").pending()
        names = [b["name"] for b in pending.message["content"] if b["type"] == "tool_use"] if pending else []
        if where == "before_tool:0" and names[:1] == ["RunEvaluation"]:
            os.kill(os.getpid(), signal.SIGSTOP)

    outcome = run_turn(root, agents(root)["execute"], fault=fault)
    print(json.dumps(outcome.model_dump(include={"status", "skip", "reason", "step"})))
""")


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2] == "T"


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the scenario but the lease bookkeeping, by path."""
    skip = {"lease.json", "discarded.jsonl"}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in skip}


@pytest.mark.slow  # real processes, a real evaluation
def test_a_frozen_step_that_wakes_after_a_takeover_changes_nothing(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    team = agents(root)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    assert turn_surviving_crashes(root, team["init"], None).status == "handoff"
    open_turn(root, "execute", 1, execute_opening(handoff(root, 1, "init_to_execute")), key="iteration-1")

    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root)], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not _stopped(child.pid):
            assert child.poll() is None, child.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the child never reached RunEvaluation"
            time.sleep(0.02)
        frozen_at = AgentDisk.load(root, "execute").pending().step

        # Another writer takes the agent over (as a worker does once the frozen one's lock expired)
        # and finishes the turn, the frozen step's RunEvaluation included.
        assert run_turn(root, team["execute"]).status == "handoff"
        before = _snapshot(root)
        report = json.loads((root / "execution_outputs/iteration_1/report.json").read_text())
        assert report["success_rate"] == handoff(root, 1, "execute_to_init").success_rate
    finally:
        child.send_signal(signal.SIGCONT)
    out, err = child.communicate(timeout=load_scaled(120))
    assert child.returncode == 0, err.decode()[-2000:]

    outcome = json.loads(out.decode().strip().splitlines()[-1])
    assert outcome["skip"] == "lease_lost" and outcome["step"] == frozen_at, outcome
    assert _snapshot(root) == before, "the stale writer changed files after it lost its lease"
    disk = assert_log_consistent(root, "execute")  # one response and one results record per step
    assert [r.seq for r in disk.records] == list(range(1, len(disk.records) + 1))
    noted = read_jsonl(root / "state/execute/discarded.jsonl").records
    assert [n["step"] for n in noted] == [frozen_at] and "refused" in noted[0]["reason"]
    from workers.readmodel import read_agent

    assert any("lost its lease" in w for w in read_agent(root, "execute", detailed=True).warnings)  # baton status


def test_a_writer_frozen_inside_its_write_delays_a_claim_but_never_hangs_it(tmp_path: Path) -> None:
    """A process frozen while it holds the lease file's lock: the claim gives up after its wait (the task
    is retried), and succeeds once the holder is gone."""
    lease_file = tmp_path / "lease.json"
    Lease.claim(lease_file)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, signal
        fd = os.open({str(lease_file)!r}, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("locked", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    """)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"locked\n"
        with pytest.raises(LeaseBusy, match="frozen or hung"):
            Lease.claim(lease_file, wait_s=0.3)
    finally:
        holder.kill()
        holder.wait()
    assert Lease.claim(lease_file, wait_s=0.3).epoch == 2  # the dead holder's lock went with it


def test_a_phase_change_computed_before_a_newer_one_is_discarded(tmp_path: Path) -> None:
    """A phase task frozen between reading run.json and writing it must not put an old run.json back."""
    from scenarios.run import claim_run, load_run
    from workers import loop

    root = copy_example(tmp_path)
    loop.start(root, auto_approve=True)
    assert turn_surviving_crashes(root, agents(root)["init"], None).status == "handoff"
    stale_lease, stale_record = claim_run(root), load_run(root)  # the frozen phase task's read

    assert [t.agent for t in loop.do_phase(root)] == ["execute"]  # a newer phase task moves the run on
    moved = (root / "run.json").read_bytes()
    with pytest.raises(LeaseLost):
        loop._next_phase(root, stale_record.model_copy(update={"auto_approve": False}), stale_lease)
    assert (root / "run.json").read_bytes() == moved and load_run(root).phase == "executing"

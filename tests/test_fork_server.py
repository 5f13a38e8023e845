"""The sample fork server (proving/evaluation/fork_server*.py): samples forked from one small
long-lived process keep every property of a freshly spawned child (tests/test_evaluation.py
runs its limits through it), and these are the server's own: samples do not share state, a
sample's leftovers are killed, a server that dies loses no sample, a worker that dies takes
its server and the server's children with it, and the setting is checked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from proving.evaluation import fork_server
from proving.priority import autogroups_on
from proving.sandbox.bwrap import usable_bwrap
from tests.test_bash_sandbox import gone, processes_with
from tests.test_evaluation import PASSING, TOOLS, build, evaluate, sample
from tests.workers_harness import descendants, load_scaled, refused_worker, wait_for

REPO = Path(__file__).resolve().parent.parent

STATEFUL = TOOLS + '''

CALLS = []


def remember(data):
    CALLS.append(1)
    return {"calls": len(CALLS), "server_module_loaded": "baton_child_main" in __import__("sys").modules}


def niceness(data):
    import os
    try:
        group = int(open("/proc/self/autogroup").read().split()[-1])
    except (OSError, ValueError):
        group = None  # a root worker's sandboxed sample has no /proc (proving/sandbox/nest.py)
    return {"nice": os.nice(0), "autogroup": group, "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0)}


def leave_behind(data, marker):
    import subprocess
    subprocess.Popen(["sh", "-c", f"sleep 60; : {marker}"])  # the sandbox allows no pid file outside; a marker
    return {}


def nap(data, marker):
    import subprocess
    subprocess.run(["sh", "-c", f"sleep 1; : {marker}"])  # found by its command line from outside the sandbox
    return {"napped": True}
'''


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except (OSError, IndexError):
        return False


def wait_gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def wait_for_process(marker: str, within_s: float = 10.0) -> int:
    """The pid, seen from the host, of a process a sample started with ``marker`` in its command line."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if found := processes_with(marker):
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no process with {marker} appeared")


def server_python(pid: int) -> int:
    """The server's Python: ``pid`` itself, or the process in its sandbox (bwrap's child) running it."""
    for candidate in [pid, *descendants(pid)]:
        try:
            if b"fork_server_main" in Path(f"/proc/{candidate}/cmdline").read_bytes() and \
                    b"bwrap" not in Path(f"/proc/{candidate}/cmdline").read_bytes():
                return candidate
        except OSError:
            continue
    raise AssertionError(f"no server Python under {pid}")


def test_samples_forked_from_one_server_share_no_state(tmp_path: Path) -> None:
    build(tmp_path, [sample("a", [("remember", {}), ("remember", {})]), sample("b", [("remember", {})])],
          tools=STATEFUL)
    _, results = evaluate(tmp_path)
    # Within a sample the module lives on; the next sample starts from the server's clean memory.
    assert [o["calls"] for o in results["a"]["outputs"]] == [1, 2]
    assert [o["calls"] for o in results["b"]["outputs"]] == [1]
    assert results["a"]["outputs"][0]["server_module_loaded"] is True  # it did run in a forked child
    assert fork_server.server().alive()


def test_samples_run_nicer_than_their_worker(tmp_path: Path) -> None:
    build(tmp_path, [sample("n", [("niceness", {})])], tools=STATEFUL)
    _, results = evaluate(tmp_path)
    seen = results["n"]["outputs"][0]
    assert seen["nice"] == min(19, os.nice(0) + 5)  # the worker's own threads come first
    # PID 2 of a namespace of its own, under its own init; its process group (killed as a whole) and the
    # server's session lie outside that namespace: the server's autogroup, at the server's niceness (a
    # session of its own would get a full share of the CPU whatever its niceness).
    assert (seen["pid"], seen["pgid"], seen["sid"]) == (2, 0, 0)
    if autogroups_on() and seen["autogroup"] is not None:
        assert seen["autogroup"] == seen["nice"]


def test_what_a_sample_leaves_running_is_killed_with_its_group(tmp_path: Path) -> None:
    marker = f"leaves-{uuid.uuid4().hex}"
    build(tmp_path, [sample("leaves", [("leave_behind", {"marker": marker})])], tools=STATEFUL)
    _, results = evaluate(tmp_path)
    assert results["leaves"]["outputs"] == [{}]
    assert gone(marker, within_s=load_scaled(5)), processes_with(marker)


def test_a_server_killed_mid_sample_loses_no_sample(tmp_path: Path) -> None:
    marker = f"nap-{uuid.uuid4().hex}"
    build(tmp_path, [sample("naps", [("nap", {"marker": marker})]), PASSING], tools=STATEFUL)
    first = fork_server.server()

    done: dict[str, object] = {}
    runner = threading.Thread(target=lambda: done.update(zip(("report", "results"), evaluate(tmp_path))))
    runner.start()
    first_pid = wait_for_process(marker)
    os.kill(first.proc.pid, signal.SIGKILL)
    assert wait_gone(first_pid, within_s=load_scaled(5))  # the orphaned sample did not live on
    runner.join(timeout=load_scaled(60))
    results = done["results"]
    assert isinstance(results, dict)
    # The sample the server was running was run again in a fresh Python, and the next one had a new server.
    assert results["naps"]["passed"] is True and results["naps"]["outputs"] == [{"napped": True}]
    assert results["ok"]["passed"] is True
    assert fork_server.server() is not first and fork_server.server().alive()


def test_a_confined_server_started_by_a_thread_outlives_that_thread() -> None:
    """bwrap's --die-with-parent fires when the thread that started the server ends, not the process: a
    server a short-lived thread started (a runner thread, a task's thread) must still be there after it."""
    try:
        usable_bwrap()
    except Exception as exc:  # noqa: BLE001 - whatever makes the sandbox unusable here
        pytest.skip(f"no working bubblewrap sandbox here ({exc})")
    started: dict[str, fork_server.ForkServer] = {}
    starter = threading.Thread(target=lambda: started.update(server=fork_server.ForkServer(confined=True)))
    starter.start()
    starter.join(timeout=load_scaled(60))
    server = started["server"]
    try:
        # A parent-death signal lands as the thread ends; a second is ample for it to have ended the server.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and server.alive():
            time.sleep(0.05)
        assert server.alive(), f"the server ended with the thread that started it (exit {server.proc.poll()})"
    finally:
        server.close()


def test_a_frozen_server_is_ended_and_its_sample_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fork_server, "GRACE_S", 1.0)
    marker = f"nap-{uuid.uuid4().hex}"
    build(tmp_path, [sample("naps", [("nap", {"marker": marker})])], tools=STATEFUL)
    frozen = fork_server.server()

    done: dict[str, object] = {}
    runner = threading.Thread(target=lambda: done.update(zip(("report", "results"), evaluate(tmp_path))))
    runner.start()
    first_pid = wait_for_process(marker)
    python = server_python(frozen.proc.pid)
    os.kill(python, signal.SIGSTOP)  # it can neither reap its child nor answer
    try:
        runner.join(timeout=load_scaled(60))
    finally:
        if alive(python):
            os.kill(python, signal.SIGCONT)
    results = done["results"]
    assert isinstance(results, dict) and results["naps"]["outputs"] == [{"napped": True}]
    # The frozen server is killed as the sample is run again; on a busy machine its end may lag the result.
    wait_for(lambda: not frozen.alive(), "the frozen sample server to be ended", timeout=5)
    assert wait_gone(first_pid, within_s=load_scaled(5))


WORKER = """
import sys, threading
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tests.test_evaluation import evaluate
server = __import__("proving.evaluation.fork_server", fromlist=["server"]).server()
print(server.proc.pid, flush=True)
evaluate(Path(sys.argv[2]))
"""


def test_a_worker_killed_with_9_takes_its_server_and_samples_along(tmp_path: Path) -> None:
    marker = f"nap-{uuid.uuid4().hex}"
    build(tmp_path, [sample("naps", [("nap", {"marker": marker})])], tools=STATEFUL)
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(REPO), str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        assert worker.stdout is not None
        server_pid = int(worker.stdout.readline())
        sample_pid = wait_for_process(marker)
        assert alive(server_pid) and alive(sample_pid)
        worker.kill()
        worker.wait(10)
        # Its stdin closed: the server kills the sample's group and ends; nothing is left behind.
        assert wait_gone(sample_pid, within_s=load_scaled(5))
        assert wait_gone(server_pid, within_s=load_scaled(5))
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)


def test_the_server_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fork_server.SERVER_ENV, "0")
    build(tmp_path, [sample("a", [("remember", {})])], tools=STATEFUL)
    _, results = evaluate(tmp_path)
    assert results["a"]["outputs"] == [{"calls": 1, "server_module_loaded": False}]  # a fresh Python


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_a_bad_setting_is_named(value: str) -> None:
    with pytest.raises(ValueError, match=f"{fork_server.SERVER_ENV}='{value}' must be 1"):
        fork_server.enabled({fork_server.SERVER_ENV: value})
    assert fork_server.enabled({}) and not fork_server.enabled({fork_server.SERVER_ENV: "0"})


def test_a_worker_with_a_bad_setting_does_not_start() -> None:
    said = refused_worker("execute", fork_server.SERVER_ENV, "maybe")
    assert "BATON_SAMPLE_SERVER='maybe' must be 1" in said, said


def test_a_request_the_server_cannot_read_is_answered_not_fatal(tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-I", str(fork_server.SERVER_SCRIPT)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdin is not None and server.stdout is not None
        assert json.loads(server.stdout.readline()) == {"ready": True}
        server.stdin.write("not json\n{\"id\": 3}\n")
        server.stdin.flush()
        first, second = json.loads(server.stdout.readline()), json.loads(server.stdout.readline())
        assert "bad request" in first["error"] and "bad request" in second["error"]
        assert server.poll() is None
    finally:
        server.stdin.close()
        assert server.wait(10) == 0

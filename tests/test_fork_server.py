"""The sample fork server (agents/evaluation/fork_server*.py): samples forked from one small
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
import time
from pathlib import Path

import pytest

from agents.evaluation import fork_server
from agents.priority import autogroups_on
from tests.test_evaluation import PASSING, TOOLS, build, evaluate, sample
from tests.workers_harness import refused_worker

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
        group = None
    return {"nice": os.nice(0), "autogroup": group, "group_leader": os.getpgid(0) == os.getpid(),
            "session_leader": os.getsid(0) == os.getpid()}


def leave_behind(data, pid_file):
    import subprocess
    sleeper = subprocess.Popen(["sleep", "60"])  # same process group as the sample
    with open(pid_file, "w") as fh:
        fh.write(str(sleeper.pid))
    return {}


def nap(data, pid_file):
    import os, time
    with open(pid_file, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(1)
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


def wait_for_file(path: Path, within_s: float = 10.0) -> str:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} was never written")


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
    # Its own group, killed as a whole, inside the server's session: the server's autogroup, at the server's
    # niceness (a session of its own would get a full share of the CPU whatever its niceness).
    assert seen["group_leader"] and not seen["session_leader"]
    if autogroups_on():
        assert seen["autogroup"] == seen["nice"]


def test_what_a_sample_leaves_running_is_killed_with_its_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "sleeper.pid"
    build(tmp_path, [sample("leaves", [("leave_behind", {"pid_file": str(pid_file)})])], tools=STATEFUL)
    _, results = evaluate(tmp_path)
    assert results["leaves"]["outputs"] == [{}]
    assert wait_gone(int(pid_file.read_text()), within_s=5)


def test_a_server_killed_mid_sample_loses_no_sample(tmp_path: Path) -> None:
    pid_file = tmp_path / "nap.pid"
    build(tmp_path, [sample("naps", [("nap", {"pid_file": str(pid_file)})]), PASSING], tools=STATEFUL)
    first = fork_server.server()
    import threading

    done: dict[str, object] = {}
    runner = threading.Thread(target=lambda: done.update(zip(("report", "results"), evaluate(tmp_path))))
    runner.start()
    first_pid = int(wait_for_file(pid_file))
    os.kill(first.proc.pid, signal.SIGKILL)
    assert wait_gone(first_pid, within_s=5)  # the orphaned sample did not live on
    runner.join(timeout=60)
    results = done["results"]
    assert isinstance(results, dict)
    # The sample the server was running was run again in a fresh Python, and the next one had a new server.
    assert results["naps"]["passed"] is True and results["naps"]["outputs"] == [{"napped": True}]
    assert results["ok"]["passed"] is True
    assert fork_server.server() is not first and fork_server.server().alive()


def test_a_frozen_server_is_ended_and_its_sample_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fork_server, "GRACE_S", 1.0)
    pid_file = tmp_path / "nap.pid"
    build(tmp_path, [sample("naps", [("nap", {"pid_file": str(pid_file)})])], tools=STATEFUL)
    frozen = fork_server.server()
    import threading

    done: dict[str, object] = {}
    runner = threading.Thread(target=lambda: done.update(zip(("report", "results"), evaluate(tmp_path))))
    runner.start()
    first_pid = int(wait_for_file(pid_file))
    os.kill(frozen.proc.pid, signal.SIGSTOP)  # it can neither reap its child nor answer
    try:
        runner.join(timeout=60)
    finally:
        if frozen.alive():
            os.kill(frozen.proc.pid, signal.SIGCONT)
    results = done["results"]
    assert isinstance(results, dict) and results["naps"]["outputs"] == [{"napped": True}]
    assert not frozen.alive() and wait_gone(first_pid, within_s=5)


WORKER = """
import sys, threading
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tests.test_evaluation import evaluate
server = __import__("agents.evaluation.fork_server", fromlist=["server"]).server()
print(server.proc.pid, flush=True)
evaluate(Path(sys.argv[2]))
"""


def test_a_worker_killed_with_9_takes_its_server_and_samples_along(tmp_path: Path) -> None:
    pid_file = tmp_path / "nap.pid"
    build(tmp_path, [sample("naps", [("nap", {"pid_file": str(pid_file)})])], tools=STATEFUL)
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(REPO), str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        assert worker.stdout is not None
        server_pid = int(worker.stdout.readline())
        sample_pid = int(wait_for_file(pid_file))
        assert alive(server_pid) and alive(sample_pid)
        worker.kill()
        worker.wait(10)
        # Its stdin closed: the server kills the sample's group and ends; nothing is left behind.
        assert wait_gone(sample_pid, within_s=5)
        assert wait_gone(server_pid, within_s=5)
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

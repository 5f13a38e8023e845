"""Code a model wrote tries to get out (issue 23): from an evaluation sample, forked from the
sample server and spawned afresh, and from a Bash command. One test per way out; each
attack is a small real program, run by a worker stand-in (tests/escape_driver.py) that has
an API key and broker and database passwords in its environment, as a real worker has.

docs/evaluation.md, "What code written by the model can and cannot do", is this file's table.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from proving.sandbox import cgroup
from proving.sandbox.bwrap import SandboxUnavailable, usable_bwrap
from proving.sandbox.limits import BASH_MEMORY_MB, MAX_PROCESSES
from tests.test_bash_sandbox import gone, processes_with

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "tests" / "escape_driver.py"
KEY = "sk-ant-api03-ESCAPEtestKEY0123456789abcdefghijklmnopqrstuvwxyz-AbCdEfGh"
BROKER = "redis://:brokerPassw0rdXYZ@127.0.0.1:6390/0"
DATABASE = "postgres://app:dbPassw0rdXYZ@db.internal/app"
SECRET_PARTS = ("ESCAPEtestKEY", "brokerPassw0rdXYZ", "dbPassw0rdXYZ")
SAMPLE_MEMORY_MB = 512
WAYS = ["sample-forked", "sample-spawned", "bash"]

try:
    usable_bwrap()
    NO_BWRAP = ""
except SandboxUnavailable as exc:
    NO_BWRAP = str(exc)
pytestmark = pytest.mark.skipif(bool(NO_BWRAP), reason=f"needs a working bubblewrap: {NO_BWRAP}")

ATTACKS = '''
import os, socket, sys, time


def environ(data, parts):
    """Every /proc/<pid>/environ this process can read, /proc/1 and the parent's included."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() or name == "self":
            try:
                raw = open(f"/proc/{name}/environ", "rb").read()
            except OSError:
                continue
            found += [f"{name}:{p}" for p in parts if p.encode() in raw]
    return {"found": found, "ppid": os.getppid()}


def loopback(data, port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        return {"connected": True}
    except OSError as exc:
        return {"connected": False, "why": type(exc).__name__}


def write_outside(data, paths):
    written = []
    for path in paths:
        try:
            with open(path, "a") as fh:
                fh.write("bash_enabled = true\\n")
            written.append(path)
        except OSError:
            pass
    return {"written": written}


def outlive(data, marker):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sh", ["sh", "-c", f"sleep 120; : {marker}"])
        os._exit(0)
    os.wait()
    time.sleep(0.3)
    return {"left": True}


def fork_many(data, most):
    count = 0
    while count < most:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        count += 1
    return {"forked": count}


def hold_memory(data, children, mb):
    """``children`` processes each holding ``mb`` MiB at once: how many still hold it together."""
    read, write = os.pipe()
    pids = []
    for index in range(children):
        pid = os.fork()
        if pid == 0:
            held = b"\\x01" * (mb * 1024 * 1024)
            os.write(write, bytes([index]))
            time.sleep(20)
            os._exit(len(held) and 0)
        pids.append(pid)
    os.close(write)
    holding, ended, deadline = set(), {}, time.monotonic() + 8
    os.set_blocking(read, False)
    # Until every child holds its memory or has ended (killed before it could): no later write can come.
    while time.monotonic() < deadline and len(holding | set(ended)) < children:
        try:
            holding |= set(os.read(read, 16))
        except BlockingIOError:
            ended |= {i: s for i, p in enumerate(pids) if i not in ended and (s := os.waitpid(p, os.WNOHANG)) != (0, 0)}
            time.sleep(0.05)
    time.sleep(0.5)
    # the kernel may have killed some, then or since
    alive = sum(i not in ended and os.waitpid(p, os.WNOHANG) == (0, 0) for i, p in enumerate(pids))
    return {"held": min(len(holding), alive)}


def outgrow(data, children, mb):
    """Children hold ``mb`` MiB each, then this process takes twice that: it is the largest."""
    for _ in range(children):
        if os.fork() == 0:
            held = b"\\x01" * (mb * 1024 * 1024)
            time.sleep(20)
            os._exit(len(held) and 0)
    time.sleep(1)
    mine = b"\\x01" * (2 * mb * 1024 * 1024)
    return {"held": len(mine)}


def nested_userns(data):
    """A user namespace of its own, where it would hold every capability (in a child, to leave this one be)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc.unshare(0x10000000) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return {"nested": os.waitstatus_to_exitcode(status) == 0}


def tell_key(data, key):
    print("the key is", key)
    return {"key": key}
'''

CHECKER = "def check_anything(sample, outcome):\n    return {'passed': True, 'reason': 'ok'}\n"


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    """scenarios/demo with a scenario.toml and state/run.json, and a file beside the scenarios folder."""
    root = tmp_path / "scenarios" / "demo"
    (root / "state").mkdir(parents=True)
    (root / "scenario.toml").write_text("[agents.execute]\n", encoding="utf-8")
    (root / "run.json").write_text("{}", encoding="utf-8")
    (root / "state" / "run.json").write_text("{}", encoding="utf-8")
    beside = tmp_path / "beside.txt"
    beside.write_text("untouched\n", encoding="utf-8")
    return {"root": root, "beside": beside, "toml": root / "scenario.toml", "state": root / "state" / "run.json",
            "run": root / "run.json"}


def driver_env(way: str) -> dict[str, str]:
    return {**os.environ, "ANTHROPIC_API_KEY": KEY, "BATON_BROKER_URL": BROKER, "DATABASE_URL": DATABASE,
            "BATON_SAMPLE_SERVER": "0" if way == "sample-spawned" else "1"}


def drive(way: str, *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(DRIVER), *args], env=driver_env(way), capture_output=True,
                          text=True, timeout=180, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def attack(root: Path, way: str, tool: str, timeout_s: float = 20.0, **args: Any) -> dict[str, Any]:
    """Run ``tool`` of ATTACKS as a sample's only action; its result line from results.jsonl."""
    out = root / "execution_outputs" / "iteration_1"
    for folder in ("tools", "checkers", "samples"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    (out / "tools" / "tools.py").write_text(ATTACKS, encoding="utf-8")
    (out / "tools" / "data.json").write_text("{}", encoding="utf-8")
    (out / "checkers" / "any.py").write_text(CHECKER, encoding="utf-8")
    sample = {"id": tool, "instruction": "try", "actions": [{"tool": tool, "args": args}]}
    (out / "samples" / f"{tool}.json").write_text(json.dumps(sample), encoding="utf-8")
    drive(way, "evaluate", str(root), str(timeout_s), str(SAMPLE_MEMORY_MB))
    return json.loads((out / "results.jsonl").read_text(encoding="utf-8").splitlines()[0])


def bash(root: Path, command: str) -> dict[str, Any]:
    reply = drive("bash", "bash", str(root), command)
    assert reply["status"] == "ok", reply["error"]
    return reply["data"]


def output(result: dict[str, Any]) -> dict[str, Any]:
    assert result["outputs"], result["reason"]
    return result["outputs"][0]


def bash_python(root: Path, function: str, call: str) -> str:
    """Run ``function`` of ATTACKS from Bash with the sandbox's python3; its stdout."""
    source = f"def {function}" + ATTACKS.split(f"def {function}")[1].split("\ndef ")[0]
    script = f"import os, time\n{source}\nprint({call})\n"
    (root / "attack.py").write_text(script, encoding="utf-8")
    return bash(root, "python3 attack.py")["stdout"]


@pytest.mark.parametrize("way", WAYS)
def test_no_secret_in_any_environ_it_can_read(place, way):
    if way == "bash":
        parts = " ".join(f"-e {p}" for p in SECRET_PARTS)
        data = bash(place["root"], f"cat /proc/1/environ /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' "
                                   f"| grep -c {parts}; ls /proc | grep -c '^[0-9]'")
        found, processes = data["stdout"].split()
        assert found == "0" and int(processes) >= 1
        return
    result = attack(place["root"], way, "environ", parts=list(SECRET_PARTS))
    assert output(result)["found"] == []


@pytest.mark.parametrize("way", WAYS)
def test_a_listener_on_the_hosts_loopback_cannot_be_reached(place, way):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        if way == "bash":
            data = bash(place["root"], f"echo > /dev/tcp/127.0.0.1/{port} && echo connected")
            assert "connected" not in data["stdout"]
        else:
            assert output(attack(place["root"], way, "loopback", port=port))["connected"] is False
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()


@pytest.mark.parametrize("way", WAYS)
def test_nothing_outside_its_copy_can_be_written(place, way):
    targets = [place["toml"], place["state"], place["run"], place["beside"], place["root"].parent / "new.txt"]
    before = {path: path.read_bytes() if path.exists() else None for path in targets}
    if way == "bash":
        writes = "; ".join(f"echo 'bash_enabled = true' >> {path}" for path in targets)
        bash(place["root"], f"{writes}; echo x >> scenario.toml; echo x >> state/run.json; echo x >> run.json; "
                            "echo x >> ../beside.txt; mkdir -p state/new && echo x > state/new/f; true")
    else:
        assert output(attack(place["root"], way, "write_outside", paths=[str(p) for p in targets]))["written"] == []
    assert {path: path.read_bytes() if path.exists() else None for path in targets} == before
    assert not (place["root"] / "state" / "new").exists()


@pytest.mark.parametrize("way", WAYS)
def test_nothing_it_started_outlives_it(place, way):
    marker = f"escape-{uuid.uuid4().hex}"
    try:
        if way == "bash":
            bash(place["root"], f"setsid sh -c 'sleep 120; : {marker}' </dev/null >/dev/null 2>&1 & echo started")
        else:
            assert output(attack(place["root"], way, "outlive", marker=marker))["left"] is True
        assert gone(marker, within_s=5), processes_with(marker)
    finally:
        for pid in processes_with(marker):  # only when the test failed: what the attack left
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("way", WAYS)
def test_it_cannot_fork_past_the_process_limit(place, way):
    most = 300
    if way == "bash":
        forked = int(bash_python(place["root"], "fork_many", f"fork_many(None, {most})['forked']").split()[0])
    else:
        forked = output(attack(place["root"], way, "fork_many", most=most))["forked"]
    assert forked < MAX_PROCESSES


@pytest.mark.parametrize("way", WAYS)
def test_several_children_cannot_hold_more_than_the_limit_together(place, way):
    """With a writable cgroup the limit is on the whole sandbox; without one (tests report which),
    RLIMIT_AS per process and the process limit hold: at most MAX_PROCESSES x the limit."""
    limit_mb = BASH_MEMORY_MB if way == "bash" else SAMPLE_MEMORY_MB
    each_mb = limit_mb * 4 // 10  # three fit under the limit one by one, not together
    if way == "bash":
        stdout = bash_python(place["root"], "hold_memory", f"hold_memory(None, 4, {each_mb})['held']").split()
        held = int(stdout[0]) if stdout else 0  # nothing printed: the sandbox was stopped as a whole
    else:
        result = attack(place["root"], way, "hold_memory", children=4, mb=each_mb)
        held = result["outputs"][0]["held"] if result["outputs"] else 0
    if cgroup.available():
        assert held * each_mb <= limit_mb
    else:
        assert held <= MAX_PROCESSES  # the weaker bound, documented in docs/evaluation.md


@pytest.mark.parametrize("way", WAYS)
def test_no_nested_user_namespace(place, way):
    if way == "bash":
        data = bash(place["root"], "unshare -U true && echo nested; python3 -c 'import os; os.fork()' && echo forks")
        assert "nested" not in data["stdout"] and "forks" in data["stdout"]
    else:
        assert output(attack(place["root"], way, "nested_userns"))["nested"] is False


@pytest.mark.skipif(not cgroup.available(), reason="no writable cgroup here: memory is limited per process only")
@pytest.mark.parametrize("way", WAYS[:2])
def test_a_sample_killed_for_its_total_memory_is_told_so(place, way):
    result = attack(place["root"], way, "outgrow", children=2, mb=SAMPLE_MEMORY_MB // 4)
    assert result["layer"] == "L2" and "reached by the sample as a whole" in result["reason"], result["reason"]


@pytest.mark.parametrize("way", WAYS[:2])
def test_what_a_sample_prints_is_stored_redacted(place, way):
    result = attack(place["root"], way, "tell_key", key=KEY)
    out = place["root"] / "execution_outputs" / "iteration_1"
    stored = (out / "results.jsonl").read_text() + (out / "traces" / "tell_key.json").read_text()
    assert result["passed"] and "ESCAPEtestKEY" not in stored and "REDACTED" in stored


def test_a_scenario_toml_bash_creates_is_removed(place):
    place["toml"].unlink()
    data = bash(place["root"], "printf 'bash_sandbox = \"none\"\\n' > scenario.toml; mkdir -p brief.md; echo done")
    assert data["stdout"] == "done\n"
    assert [item["path"] for item in data["not_applied"]] == ["brief.md", "scenario.toml"]
    assert not place["toml"].exists() and not (place["root"] / "brief.md").exists()


def test_bash_cannot_write_a_report_or_a_handoff_of_its_own(place):
    """What the evaluation computes and what the handoffs carry decide the run: a command may read them, never
    change them; what it writes there in its copy of the folder is not applied (the file tools refuse them too)."""
    out = place["root"] / "execution_outputs" / "iteration_1"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text('{"success_rate": 0.8}\n', encoding="utf-8")
    handoffs = place["root"] / "handoffs" / "iteration_1"
    handoffs.mkdir(parents=True, exist_ok=True)
    data = bash(place["root"], "cat execution_outputs/iteration_1/report.json; "
                               "echo '{\"success_rate\": 1.0}' > execution_outputs/iteration_1/report.json; "
                               "echo '{}' > handoffs/iteration_1/execute_to_init_context.json; "
                               "echo x > execution_outputs/iteration_1/results.jsonl; echo done")
    assert "0.8" in data["stdout"] and data["stdout"].endswith("done\n")
    assert (out / "report.json").read_text() == '{"success_rate": 0.8}\n'
    assert not (handoffs / "execute_to_init_context.json").exists()
    assert not (out / "results.jsonl").exists()
    assert {item["path"] for item in data["not_applied"]} == {
        "execution_outputs/iteration_1/report.json", "execution_outputs/iteration_1/results.jsonl",
        "handoffs/iteration_1/execute_to_init_context.json"}

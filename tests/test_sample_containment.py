"""A sample's hold on its worker (issue 30): what the tools of an evaluation sample can leave behind, or
plant on the way in, must neither reach past the sample nor hold the step. Each attack is a small real
program run as a sample's only action by the worker stand-in of tests/test_sandbox_escapes.py
(tests/escape_driver.py, a process with an API key and passwords in its environment):

- a 32-bit system call (``int 0x80``) past the seccomp filter of a forked sample;
- a folder filled past the sample's disk limit;
- a FIFO, a link to /dev/zero or to a file of the worker's, or a huge sparse file where the sample's
  result.json and progress.json should be;
- links, hard links and special files in tools/, which the evaluation copies into every sample;
- the temporary folders of a sample server whose worker was killed.

docs/evaluation.md, "What code written by the model can and cannot do", has a row for each.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from proving.sandbox.bwrap import SandboxUnavailable, usable_bwrap
from tests.test_sandbox_escapes import CHECKER, DRIVER, REPO, SECRET_PARTS, driver_env

try:
    usable_bwrap()
    NO_BWRAP = ""
except SandboxUnavailable as exc:
    NO_BWRAP = str(exc)
pytestmark = pytest.mark.skipif(bool(NO_BWRAP), reason=f"needs a working bubblewrap: {NO_BWRAP}")

WAYS = ["sample-forked", "sample-spawned"]
ALL_WAYS = [*WAYS, "unconfined"]  # unconfined: a person's BATON_EVAL_SANDBOX=none; the worker reads what is left
MEMORY_MB = 512
DISK_MB = 64
MARKER = "OTHER-SCENARIO-LOG-7c1d"  # in another scenario's state/execute/log.jsonl
DRIVER_MEMORY = 4 << 30  # a safety net for the code before: it read a link to /dev/zero without end
WAIT_S = 90  # the driver's own bound: a step held by a FIFO fails the test rather than hanging it

ATTACKS = '''
import ctypes, mmap, os, resource, time


def folder():
    """The sample's folder as its code sees it (the working directory is <folder>/work)."""
    return os.path.dirname(os.getcwd())


def int80_unshare(data):
    """unshare(CLONE_NEWUSER | CLONE_NEWNS) through the 32-bit system call gate, in a child; if it works the
    child mounts a tmpfs, which only a process with user and mount namespaces of its own can do."""
    code = (b"\\xb8" + (310).to_bytes(4, "little")  # mov eax, 310: unshare in the i386 table
            + b"\\xbb" + (0x10000000 | 0x00020000).to_bytes(4, "little")  # mov ebx, CLONE_NEWUSER|CLONE_NEWNS
            + b"\\xcd\\x80\\xc3")  # int 0x80; ret
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    pid = os.fork()
    if pid == 0:
        if call() != 0:
            os._exit(2)
        libc = ctypes.CDLL(None, use_errno=True)
        os._exit(0 if libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0 else 3)
    _, status = os.waitpid(pid, 0)
    return {"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
            "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None}


def fill(data, most_gb):
    """Files of 256 MiB in its folder until a write fails or ``most_gb`` GiB are written; what it wrote."""
    chunk, written, index, error = b"\\x01" * (1 << 20), 0, 0, ""
    try:
        while written < most_gb << 30:
            fd = os.open(os.path.join(folder(), f"fill{index}.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                for _ in range(256):
                    written += os.write(fd, chunk)
            finally:
                os.close(fd)
            index += 1
    except OSError as exc:
        error = str(exc)
    print("written", written, error, flush=True)
    return {"written": written, "error": error}


def plant(data, kind, secret):
    """Put ``kind`` where result.json and progress.json go, then end at once (nothing writes them after)."""
    for name in ("result.json", "progress.json"):
        path = os.path.join(folder(), name)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dev_zero":
            os.symlink("/dev/zero", path)
        elif kind == "secret":
            os.symlink(secret, path)
        elif kind == "sparse":
            with open(path, "wb") as fh:
                try:
                    fh.truncate(10 << 30)
                except OSError:  # past the file-size limit: the largest file it may have
                    fh.truncate(resource.getrlimit(resource.RLIMIT_FSIZE)[0] - 4096)
    print("planted", kind, flush=True)
    os._exit(0)


def reach_out(data):
    """Every folder a process it can see holds open (/proc/<pid>/fd): a file written into each; and whether it
    can trace PID 1 (which, for a spawned sample, holds the sample's folder on the host open)."""
    import ctypes
    written = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()] if os.path.isdir("/proc") else []:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            target = f"/proc/{pid}/fd/{fd}"
            try:
                if os.path.isdir(target):
                    with open(os.path.join(target, "planted.txt"), "w") as fh:
                        fh.write("x")
                    written.append(os.readlink(target))
            except OSError:
                continue
    libc = ctypes.CDLL(None, use_errno=True)
    traced = libc.ptrace(16, 1, None, None) == 0  # PTRACE_ATTACH
    return {"written": written, "traced": traced}


def peek(data, names, parts):
    """Which of ``parts`` the copies of tools/<name> hold (a file, or every file below a folder)."""
    here = os.path.dirname(os.path.abspath(__file__))
    found, seen = [], []
    for name in names:
        path = os.path.join(here, name)
        files = [path] if not os.path.isdir(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
        for file in files:
            try:
                with open(file, "rb") as fh:
                    text = fh.read(1 << 20)
            except OSError:
                continue
            seen.append(os.path.relpath(file, here))
            found += [f"{name}:{p}" for p in parts if p.encode() in text]
    return {"found": found, "seen": seen}
'''


def drive(way: str, root: Path, *, timeout_s: float = 20.0, memory_mb: int = MEMORY_MB,
          disk_mb: int | None = None) -> tuple[subprocess.CompletedProcess[str], int]:
    """One evaluation by the worker stand-in: how it ended, and the most memory (KiB) a process of it held
    (the stand-in, which reads what the sample left, or one of the processes it waited for)."""
    env = {**driver_env("sample-spawned" if way == "sample-spawned" else "sample-forked"),
           "BATON_EVAL_SANDBOX": "none" if way == "unconfined" else "bwrap"}
    argv = [sys.executable, str(DRIVER), "evaluate", str(root), str(timeout_s), str(memory_mb)]
    argv += [str(disk_mb)] if disk_mb is not None else []

    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (DRIVER_MEMORY, DRIVER_MEMORY))

    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=bounded, start_new_session=True)
    streams: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda n=name, s=stream: streams.__setitem__(n, s.read()), daemon=True)
               for name, stream in (("out", proc.stdout), ("err", proc.stderr))]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + WAIT_S
    while (ended := os.wait4(proc.pid, os.WNOHANG))[0] == 0:  # wait4: the rusage of this one child's tree
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            pytest.fail(f"the evaluation did not end within {WAIT_S} s: what the sample left held it")
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(ended[1])
    for reader in readers:
        reader.join(timeout=10)
    text = {name: streams.get(name, b"").decode("utf-8", "replace") for name in ("out", "err")}
    return subprocess.CompletedProcess(argv, proc.returncode, text["out"], text["err"]), ended[2].ru_maxrss


def iteration(root: Path, tool: str, **args: Any) -> Path:
    """execution_outputs/iteration_1 of ``root`` with ATTACKS as its tools and ``tool`` as its one sample's action."""
    out = root / "execution_outputs" / "iteration_1"
    for folder in ("tools", "checkers", "samples"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    (out / "tools" / "tools.py").write_text(ATTACKS, encoding="utf-8")
    (out / "tools" / "data.json").write_text("{}", encoding="utf-8")
    (out / "checkers" / "any.py").write_text(CHECKER, encoding="utf-8")
    sample = {"id": tool, "instruction": "try", "actions": [{"tool": tool, "args": args}]}
    (out / "samples" / f"{tool}.json").write_text(json.dumps(sample), encoding="utf-8")
    return out


def evaluated(way: str, root: Path, tool: str, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Evaluate ``tool`` (as set up by ``iteration``): its results.jsonl line, its trace, the memory peak."""
    done, peak = drive(way, root, **kwargs)
    assert done.returncode == 0, done.stderr[-3000:]
    out = root / "execution_outputs" / "iteration_1"
    result = json.loads((out / "results.jsonl").read_text(encoding="utf-8").splitlines()[0])
    trace = json.loads((out / "traces" / f"{tool}.json").read_text(encoding="utf-8"))
    return result, trace, peak


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "scenarios" / "demo"
    (folder / "state").mkdir(parents=True)
    (folder / "scenario.toml").write_text("[agents.execute]\n", encoding="utf-8")
    return folder


# ---- 1. seccomp: another architecture's system calls ------------------------------------------------------


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the 32-bit gate (int 0x80) is x86_64's")
@pytest.mark.parametrize("way", WAYS)
def test_a_32_bit_system_call_gets_no_namespace(root, way):
    """A forked sample's filter checks the architecture first and kills a process that uses another's (the
    i386 unshare got past it and mounted a tmpfs); a spawned sample's bwrap forbids user namespaces already."""
    iteration(root, "int80_unshare")
    result, _, _ = evaluated(way, root, "int80_unshare")
    outcome = result["outputs"][0]
    assert outcome["exit"] != 0, outcome  # 0: it had namespaces of its own and mounted a tmpfs
    if way == "sample-forked":
        assert outcome["signal"] == signal.SIGSYS, outcome


# ---- 2. disk --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("way", WAYS)
def test_a_sample_that_fills_its_folder_stops_at_the_disk_limit(root, way):
    iteration(root, "fill", most_gb=8)
    result, trace, _ = evaluated(way, root, "fill", disk_mb=DISK_MB)
    assert not result["passed"] and f"disk limit ({DISK_MB} MB)" in result["reason"], result["reason"]
    written = int(trace["child"]["stdout_tail"].split("written ")[1].split()[0])
    assert written <= DISK_MB << 20


def test_the_disk_limit_is_a_setting_of_a_gibibyte():
    from agents.config import ToolSettings
    from proving.sandbox import limits, nest

    assert ToolSettings().eval_disk_mb == limits.EVAL_DISK_MB == nest.DISK_MB == 1024


# ---- 3. what it leaves where its result should be ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "secret", "sparse"])
@pytest.mark.parametrize("way", ALL_WAYS)
def test_what_a_sample_leaves_for_its_result_cannot_hold_the_step(root, tmp_path, way, kind):
    """A FIFO would block the read for ever, /dev/zero would fill the worker's memory, a link to a file of the
    worker's would be read as the sample's result (and its content stored in results.jsonl), a sparse file as
    large as the file-size limit allows would be read whole: each is refused, none followed, and the sample
    fails saying why, within its time limit plus a margin."""
    secret = tmp_path / "worker-secret.json"
    secret.write_text(json.dumps({
        "completed": True, "phase": "checkers", "outputs": [{"leak": MARKER}], "final_data": {}, "action": 0,
        "tool": MARKER, "checkers": [{"checker": "any.check_anything", "passed": True, "reason": MARKER}],
    }), encoding="utf-8")
    out = iteration(root, "plant", kind=kind, secret=str(secret))
    started = time.monotonic()
    result, trace, peak_kib = evaluated(way, root, "plant", timeout_s=10.0)
    assert time.monotonic() - started < 10.0 + 30
    assert not result["passed"] and "result.json" in result["reason"], result["reason"]
    stored = "".join(p.read_text(encoding="utf-8") for p in (out / "results.jsonl", out / "report.json",
                                                             out / "traces" / "plant.json"))
    assert MARKER not in stored
    assert peak_kib < 768 * 1024, f"a process of the evaluation held {peak_kib // 1024} MiB"
    assert "result.json" in json.dumps(trace["child"]["refused"])


@pytest.mark.parametrize("way", WAYS)
def test_the_host_folder_cannot_be_reached_through_another_process(root, way):
    """A spawned sample's first process holds the sample's folder on the host open (no host folder is mounted):
    it is not dumpable, so neither its /proc/1/fd nor ptrace reaches it. A forked sample's init holds nothing."""
    iteration(root, "reach_out")
    result, _, _ = evaluated(way, root, "reach_out")
    assert result["outputs"][0]["written"] == [], result["outputs"]
    if way == "sample-spawned":
        assert result["outputs"][0]["traced"] is False


# ---- 4. links in what is copied into the sample ------------------------------------------------------------


@pytest.fixture
def other_scenario(tmp_path: Path) -> Path:
    """Another scenario's state/, with its Execute log."""
    state = tmp_path / "scenarios" / "other" / "state"
    (state / "execute").mkdir(parents=True)
    (state / "execute" / "log.jsonl").write_text(json.dumps({"text": MARKER}) + "\n", encoding="utf-8")
    return state


@pytest.mark.parametrize("way", WAYS)
def test_links_in_tools_are_not_followed_into_the_sample(root, other_scenario, way):
    """tools/env.txt -> /proc/self/environ handed the sample the worker's environment, a folder link another
    scenario's state/, a hard link that scenario's log: only regular files and folders are copied, and what
    was refused is in the sample's trace and the report."""
    out = iteration(root, "peek", names=["env.txt", "other", "log.jsonl"], parts=[*SECRET_PARTS, MARKER])
    tools = out / "tools"
    (tools / "env.txt").symlink_to("/proc/self/environ")
    (tools / "other").symlink_to(other_scenario, target_is_directory=True)
    os.link(other_scenario / "execute" / "log.jsonl", tools / "log.jsonl")
    result, trace, _ = evaluated(way, root, "peek")
    assert result["passed"], result["reason"]
    assert result["outputs"][0]["found"] == []
    refused = "\n".join(trace["child"]["refused"])
    for name in ("tools/env.txt", "tools/other", "tools/log.jsonl"):
        assert name in refused, refused
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert any("tools/env.txt" in note for note in report["notes"]), report.get("notes")


@pytest.mark.parametrize("way", WAYS)
def test_a_dangling_link_or_a_fifo_in_tools_does_not_stop_the_evaluation(root, way):
    out = iteration(root, "peek", names=["gone.txt", "pipe"], parts=[MARKER])
    (out / "tools" / "gone.txt").symlink_to("/nonexistent/file")
    os.mkfifo(out / "tools" / "pipe")
    (out / "checkers" / "helper.py").symlink_to("/etc/passwd")
    result, trace, _ = evaluated(way, root, "peek")
    assert result["passed"], result["reason"]
    refused = "\n".join(trace["child"]["refused"])
    for name in ("tools/gone.txt", "tools/pipe", "checkers/helper.py"):
        assert name in refused, refused


# ---- the folders of a killed worker's sample server -----------------------------------------------------------

HOLDER = """
import sys
from proving.evaluation import fork_server
print(fork_server.server().home, flush=True)
sys.stdin.read()
"""


def test_a_killed_workers_server_folder_is_removed_when_the_next_server_starts():
    """Like its cgroups (cgroup.prune), the /tmp folder of a server whose worker was killed with 9 is removed
    by the next server that starts; a live worker's is left alone."""
    env = {**os.environ, "BATON_EVAL_SANDBOX": "bwrap", "BATON_SAMPLE_SERVER": "1"}
    holders = [subprocess.Popen([sys.executable, "-c", HOLDER], cwd=REPO, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for _ in range(2)]
    killed, alive = holders
    try:
        homes = [Path(h.stdout.readline().strip()) for h in holders]
        assert all(home.is_dir() for home in homes), homes
        killed.kill()
        killed.wait()
        from proving.evaluation import fork_server

        deadline = time.monotonic() + 10
        while homes[0].exists() and time.monotonic() < deadline:
            fork_server.ForkServer(confined=True).close()  # the killed worker's server may take a moment to end
            time.sleep(0.2)
        assert not homes[0].exists(), sorted(p.name for p in homes[0].rglob("*"))
        assert homes[1].is_dir()
    finally:
        for holder in holders:
            if holder.poll() is None:
                holder.communicate("", timeout=30)

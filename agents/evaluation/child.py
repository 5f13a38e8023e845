"""The child process of one sample: a fresh temp dir with copies of tools/ and
checkers/, resource limits, a minimal environment, and its own process group that
is killed afterwards. It runs ``child_main.py`` (docs/evaluation.md, "How a sample
is run")."""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agents.evaluation.models import ChildProgress, ChildResult
from agents.processes import kill_group

CHILD_SCRIPT = Path(__file__).with_name("child_main.py")
TAIL_BYTES = 4096  # per stream of the child kept for the trace: the end says how it died


@dataclass
class ChildRun:
    result: ChildResult | None
    progress: ChildProgress
    returncode: int
    timed_out: bool
    stdout_tail: str = ""
    stderr_tail: str = ""


class _Tail(threading.Thread):
    """Drains one pipe of the child and keeps its last bytes only: a sample that
    prints without end must not fill baton's memory."""

    def __init__(self, stream: Any):
        super().__init__(daemon=True)
        self.stream = stream
        self.buffer = bytearray()
        self.total = 0

    def run(self) -> None:
        fd = self.stream.fileno()
        while chunk := os.read(fd, 65536):
            self.total += len(chunk)
            self.buffer += chunk
            if len(self.buffer) > TAIL_BYTES:
                del self.buffer[:-TAIL_BYTES]

    def text(self) -> str:
        body = self.buffer.decode("utf-8", "replace")
        return f"[... {self.total - len(self.buffer)} bytes before]\n{body}" if self.total > len(self.buffer) else body


def _limiter(timeout_s: float, memory_mb: int) -> Callable[[], None]:
    """The preexec_fn: limits applied in the child before it executes Python."""
    memory = memory_mb * 1024 * 1024
    # CPU time is a backstop for the wall clock (SIGXCPU, then SIGKILL a second later).
    cpu = math.ceil(timeout_s) + 1

    def apply() -> None:
        _set_limit(resource.RLIMIT_AS, memory)
        _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
        _set_limit(resource.RLIMIT_CORE, 0)  # a killed child must not leave core files
        # Output files are bounded too: a loop writing to disk stops at twice the memory cap.
        _set_limit(resource.RLIMIT_FSIZE, 2 * memory)

    return apply


def _set_limit(which: int, soft: int, hard: int | None = None) -> None:
    _, current_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:  # an unprivileged process cannot raise its hard limit
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(which, (soft, hard))


def _child_env(home: Path) -> dict[str, str]:
    # Nothing of baton's environment (API keys, Redis URLs) reaches generated code.
    # HOME and TMPDIR point into the temp dir, which is removed afterwards.
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": str(home),
        "TMPDIR": str(home),
    }


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for the child without reaping it; True if the time limit passed.

    Not reaped, the child keeps its pid (and so its process group id) reserved,
    so the group can be killed afterwards without hitting a reused pid."""
    if not hasattr(os, "waitid"):  # not on macOS: plain wait, group kill is best effort
        try:
            proc.wait(timeout=timeout_s)
            return False
        except subprocess.TimeoutExpired:
            return True
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return True
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return False


def run_child(out_dir: Path, raw_sample: dict[str, Any], *, timeout_s: float, memory_mb: int) -> ChildRun:
    """Run one sample in a fresh temp dir holding copies of tools/ and checkers/."""
    with tempfile.TemporaryDirectory(prefix="baton-eval-") as tmp_name:
        tmp = Path(tmp_name)
        work = tmp / "work"
        work.mkdir()
        for folder in ("tools", "checkers"):
            if (out_dir / folder).is_dir():
                shutil.copytree(out_dir / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        job = {
            "tools_dir": str(work / "tools"),
            "checkers_dir": str(work / "checkers"),
            "sample": raw_sample,
            "result_path": str(tmp / "result.json"),
            "progress_path": str(tmp / "progress.json"),
        }
        (tmp / "job.json").write_text(json.dumps(job), encoding="utf-8")
        run = _spawn(tmp, work, timeout_s, memory_mb)
        run.result = _read_model(tmp / "result.json", ChildResult)
        run.progress = _read_model(tmp / "progress.json", ChildProgress) or ChildProgress()
        return run


def _spawn(tmp: Path, work: Path, timeout_s: float, memory_mb: int) -> ChildRun:
    proc = subprocess.Popen(
        [sys.executable, "-I", str(CHILD_SCRIPT), str(tmp / "job.json")],
        cwd=work,
        env=_child_env(work),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, killed as a whole
        preexec_fn=_limiter(timeout_s, memory_mb),  # noqa: PLW1509 - only setrlimit calls
        close_fds=True,
    )
    tails = [_Tail(proc.stdout), _Tail(proc.stderr)]
    for tail in tails:
        tail.start()
    timed_out = _wait(proc, timeout_s)
    kill_group(proc.pid)  # on time-out, and to end anything the sample left running
    returncode = proc.wait()
    for tail in tails:
        tail.join(timeout=2)  # a grandchild that escaped the group may hold a pipe open
    return ChildRun(None, ChildProgress(), returncode, timed_out, tails[0].text(), tails[1].text())


def _read_model(path: Path, model: type[Any]) -> Any:
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None

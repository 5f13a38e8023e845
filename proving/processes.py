"""Child processes that run untrusted code: Bash (agents/tools/bash.py), the evaluation
samples (proving/evaluation/child.py) and the tool calls of an exported scenario
(proving/export). Each child starts with ``start_new_session=True``, so it and everything
it spawns share one process group that can be killed as a whole.

Standard library only, on purpose: ``baton export`` copies this file into the exported
task (docs/export.md), which must run where baton is not installed.
"""

from __future__ import annotations

import math
import os
import resource
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TAIL_BYTES = 4096  # per stream of a child kept for a trace: the end says how it died


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid``. Safe only while the group exists (its
    leader not yet reaped, or members known to be left): otherwise the id may be reused."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts: it is there, only not ours to signal)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@dataclass
class Finished:
    """How a limited child ended: its exit status, whether the wall clock ran out, and
    the last bytes it wrote to each stream."""

    returncode: int
    timed_out: bool
    stdout_tail: str = ""
    stderr_tail: str = ""


class TailBuffer:
    """The last ``TAIL_BYTES`` of a stream and how many bytes came in all: a child that prints
    without end must not fill its reader's memory. Fed by ``Tail`` here and by the sample server
    (proving/evaluation/fork_server_main.py)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.total = 0

    def keep(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.buffer += chunk
        if len(self.buffer) > TAIL_BYTES:
            del self.buffer[:-TAIL_BYTES]

    def text(self) -> str:
        body = self.buffer.decode("utf-8", "replace")
        return f"[... {self.total - len(self.buffer)} bytes before]\n{body}" if self.total > len(self.buffer) else body


class Tail(threading.Thread):
    """Drains one pipe of a child into a ``TailBuffer``."""

    def __init__(self, stream: Any):
        super().__init__(daemon=True)
        self.stream = stream
        self.kept = TailBuffer()

    def run(self) -> None:
        fd = self.stream.fileno()
        while chunk := os.read(fd, 65536):
            self.kept.keep(chunk)

    def text(self) -> str:
        return self.kept.text()


def limiter(timeout_s: float, memory_mb: int) -> Callable[[], None]:
    """The preexec_fn: limits applied in the child before it executes anything."""
    memory = memory_mb * 1024 * 1024
    # CPU time is a backstop for the wall clock (SIGXCPU, then SIGKILL a second later).
    cpu = math.ceil(timeout_s) + 1

    def apply() -> None:
        set_limit(resource.RLIMIT_AS, memory)
        set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
        set_limit(resource.RLIMIT_CORE, 0)  # a killed child must not leave core files
        # Output files are bounded too: a loop writing to disk stops at twice the memory cap.
        set_limit(resource.RLIMIT_FSIZE, 2 * memory)

    return apply


def set_limit(which: int, soft: int, hard: int | None = None) -> None:
    _, current_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:  # an unprivileged process cannot raise its hard limit
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(which, (soft, hard))


def minimal_env(home: Path) -> dict[str, str]:
    # Nothing of the parent's environment (API keys, Redis URLs) reaches generated code.
    # HOME and TMPDIR point into a temp dir the caller removes afterwards.
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": str(home),
        "TMPDIR": str(home),
    }


def wait_unreaped(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
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
    watch = _pidfd(proc.pid)
    if watch is not None:  # readable when the child ends: woken then, not at the next poll
        try:
            while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                select.select([watch], [], [], left)
            return False
        finally:
            os.close(watch)
    delay = 0.002
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return True
        time.sleep(delay)
        delay = min(delay * 2, 0.05)  # a child ending just after a poll is seen up to 50 ms late
    return False


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (Linux 5.3+), or None where there is none (then the wait polls)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def run_limited(argv: list[str], *, cwd: Path, timeout_s: float, memory_mb: int,
                env: dict[str, str] | None = None, before: Callable[[], None] | None = None,
                pass_fds: tuple[int, ...] = (), wall_s: float | None = None) -> Finished:
    """Run ``argv`` in ``cwd`` with the minimal environment (HOME and TMPDIR = ``cwd``) or ``env``,
    memory and CPU limits, and a wall-clock limit after which its whole group is killed (``timeout_s``,
    or ``wall_s`` where the child enforces ``timeout_s`` itself and needs a moment after it).
    ``before`` runs in the child too, after the limits (a sandbox joins its cgroup there);
    ``pass_fds`` stay open in it."""
    limits = limiter(timeout_s, memory_mb)

    def prepare() -> None:
        limits()
        if before is not None:
            before()

    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=minimal_env(cwd) if env is None else env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, killed as a whole
        preexec_fn=prepare,  # noqa: PLW1509 - only setrlimit calls and a write to a cgroup file
        close_fds=True,
        pass_fds=pass_fds,
    )
    tails = [Tail(proc.stdout), Tail(proc.stderr)]
    for tail in tails:
        tail.start()
    timed_out = wait_unreaped(proc, timeout_s if wall_s is None else wall_s)
    kill_group(proc.pid)  # on time-out, and to end anything the child left running
    returncode = proc.wait()
    for tail in tails:
        tail.join(timeout=2)  # a grandchild that escaped the group may hold a pipe open
    return Finished(returncode, timed_out, tails[0].text(), tails[1].text())

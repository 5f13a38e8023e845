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
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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
    return wait_pid(proc.pid, timeout_s)


STOP_POLL_S = 0.1  # how often a wait that can be stopped looks at its stop


def wait_pid(pid: int, timeout_s: float | None, stop: threading.Event | None = None) -> bool:
    """Wait until this process's child ``pid`` ends, without reaping it (Linux: ``waitid`` with WNOWAIT); True if
    ``timeout_s`` passed first, False when it ended or ``stop`` was set."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    watch = _pidfd(pid)  # readable when the child ends: woken then, not at the next poll
    delay = 0.002
    try:
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if stop is not None and stop.is_set():
                return False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return True
            if watch is not None:
                naps = [n for n in (left, STOP_POLL_S if stop is not None else None) if n is not None]
                select.select([watch], [], [], min(naps) if naps else None)
            else:
                time.sleep(delay if left is None else min(delay, left))
                delay = min(delay * 2, 0.05)  # a child ending just after a poll is seen up to 50 ms late
        return False
    finally:
        if watch is not None:
            os.close(watch)


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


def run_forked(body: Callable[[], Any], *, cwd: Path, timeout_s: float, memory_mb: int,
               env: dict[str, str] | None = None) -> Finished:
    """``run_limited`` for code this process has loaded: ``body`` runs in a forked child that gets what a spawned
    one gets (a session of its own, ``cwd``, the minimal environment or ``env``, stdin from /dev/null, the memory,
    CPU, core and file-size limits, the wall clock, its group killed afterwards) and must end it with
    ``os._exit``. A fork costs about a millisecond; a fresh interpreter and its imports cost about 90 ms.

    Only from a process with one thread (the export's box): a fork copies the calling thread alone, with every
    lock as the other threads held it. Here the readers' threads start after the fork."""
    environment = minimal_env(cwd) if env is None else env
    limits = limiter(timeout_s, memory_mb)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    sys.stdout.flush()  # nothing buffered here may be written twice
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's side, seen through its output and exit status
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.closerange(3, 1 << 16)  # this process's pipes and files
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(environment)
            limits()
            body()
        except BaseException:  # noqa: BLE001 - told on stderr, like an uncaught error in a fresh Python
            traceback.print_exc()
        finally:
            os._exit(1)  # body ends the child itself; here only if it returned or raised
    os.close(out_w)
    os.close(err_w)
    tails = [Tail(os.fdopen(out_r, "rb", buffering=0)), Tail(os.fdopen(err_r, "rb", buffering=0))]
    for tail in tails:
        tail.start()
    if hasattr(os, "waitid"):
        timed_out, status = wait_pid(pid, timeout_s), None
    else:  # macOS: reaped while waited for, so the group kill is best effort
        timed_out, status = _wait_reaping(pid, timeout_s)
    kill_group(pid)  # on time-out, and to end anything the child left running
    if status is None:
        status = os.waitpid(pid, 0)[1]
    for tail in tails:
        tail.join(timeout=2)  # a grandchild that escaped the group may hold a pipe open
    return Finished(os.waitstatus_to_exitcode(status), timed_out, tails[0].text(), tails[1].text())


def _wait_reaping(pid: int, timeout_s: float) -> tuple[bool, int | None]:
    """(timed out, the exit status if it ended and was reaped)."""
    deadline, delay = time.monotonic() + timeout_s, 0.002
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return False, status
        if time.monotonic() >= deadline:
            return True, None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class Head(threading.Thread):
    """Drains a pipe, keeping its first ``limit`` bytes (``Tail`` keeps the last ones)."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        super().__init__(daemon=True)
        self.stream, self.limit = stream, limit
        self.kept = bytearray()
        self.over = False

    def run(self) -> None:
        fd = self.stream.fileno()
        try:
            while chunk := os.read(fd, 1 << 16):
                room = self.limit - len(self.kept)
                self.kept += chunk[:max(room, 0)]
                self.over = self.over or len(chunk) > room
        finally:  # closed here, not by the waiter: a number closed under a blocked read could be reused
            self.stream.close()


def _feed(stream: IO[bytes], data: bytes | None) -> None:
    try:
        if data:
            stream.write(data)
    except OSError:
        pass  # it ended, or closed its stdin, before reading it all
    finally:
        try:
            stream.close()
        except OSError:
            pass


def feed_and_wait(proc: subprocess.Popen[bytes], data: bytes | None, timeout: float | None, limit: int,
                  stop: threading.Event) -> tuple[int, bytes, bytes, bool, bool]:
    """Feed ``data`` to ``proc`` (started in a session of its own, its three streams piped), keep the first
    ``limit`` bytes of each of its outputs, and wait for it, then kill its group and reap it: (exit code, stdout,
    stderr, over the limit, timed out). The group is killed before the leader is reaped, while its id is still
    ours. Used by the export's sandbox (every exec) and by its session where there is none."""
    assert proc.stdin and proc.stdout and proc.stderr
    feeder = threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True)
    readers = [Head(proc.stdout, limit), Head(proc.stderr, limit)]
    for thread in (feeder, *readers):
        thread.start()
    timed_out = _wait_or_stop(proc, timeout, stop)
    kill_group(proc.pid)  # on time-out, and to end anything the command left in its group
    returncode = proc.wait()
    for thread in (feeder, *readers):
        thread.join(timeout=2)  # something that left the group (unconfined only) may hold a pipe open
    return returncode, bytes(readers[0].kept), bytes(readers[1].kept), any(r.over for r in readers), timed_out


def _wait_or_stop(proc: subprocess.Popen[bytes], timeout: float | None, stop: threading.Event) -> bool:
    """Wait until ``proc`` ends (not reaped), ``timeout`` passes (True) or ``stop`` is set."""
    if hasattr(os, "waitid"):  # woken by its pidfd as it ends, not at the next poll
        return wait_pid(proc.pid, timeout, stop)
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.002
    while not stop.is_set():
        if proc.poll() is not None:  # no waitid (macOS): reaped, so the group kill is best effort
            return False
        if deadline is not None and time.monotonic() >= deadline:
            return True
        stop.wait(delay)
        delay = min(delay * 2, 0.05)
    return False

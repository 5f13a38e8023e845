"""One lock for both modes: a ``flock`` on ``<scenario>/state/.lock``, exclusive or shared.

An embedded command (``baton run``, ``approve``, ``reject``, ``resume`` without a broker)
holds it exclusively from before its first change to its end: one such process at a time,
and nothing else writes the folder meanwhile. Every process that writes the folder for the
workers (a worker's task, the reaper, a command that dispatches to workers) holds it shared
(``shared_scenario_lock``) while it writes: they run together, as the workers' per-agent
Redis locks (``workers.tasks.agent_lock``) and the leases order their writes, but never
beside an embedded run on the same folder (on other hosts, as far as the filesystem carries
``flock``). The kernel frees a ``flock`` when its process dies, even by SIGKILL, so a crashed
run never leaves the scenario locked. The file records who holds it exclusively (pid, host,
since when, command) so a second run can say so, and ``holder(root)`` lets ``baton status``
tell whether an embedded run is under way. With a broker configured, an embedded run also
takes the workers' own Redis locks (``workers.exclusion.workers_excluded``).

The file lives in ``state/``, which baton alone writes (the agents' tools refuse to); an
exclusive holder removes it on release (shared holders cannot know whether others still hold
it), and archiving a run (``scenarios.run.archive_run``) leaves it in place.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from scenarios.lease import SAFE_OPEN, read_from_start
from scenarios.run import STATE_LOCK

LOCK_NAME = STATE_LOCK


@dataclass(frozen=True)
class Holder:
    """Who holds a scenario: enough to find the process and decide what to do."""

    pid: int
    host: str
    since: str  # ISO 8601, UTC
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, since {self.since}: {self.command}"


class ScenarioBusy(RuntimeError):
    """Another process runs this scenario: an embedded run (``holder``, None if it wrote no
    details yet) or, with ``by_workers``, a worker in the middle of one of its tasks."""

    def __init__(self, root: Path, holder: Holder | None, by_workers: bool = False):
        if by_workers:
            message = f"{root.name} is being run by workers: one of them holds an agent of it right now"
        else:
            who = holder.describe() if holder else "another process (it has not said who yet)"
            message = f"{root.name} is already running in {who}"
        super().__init__(message)
        self.root, self.holder, self.by_workers = root, holder, by_workers


def lock_path(root: Path) -> Path:
    return Path(root) / "state" / LOCK_NAME


def _held_shared(fd: int) -> bool:
    """After an exclusive lock was refused: True if only shared holders (workers) have it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def _read_holder(fd: int) -> Holder | None:
    try:
        return Holder(**json.loads(read_from_start(fd)))
    except (ValueError, TypeError):
        return None  # empty (the holder is between taking the lock and writing) or not ours


def holder(root: Path) -> Holder | None:
    """The process running ``root`` embedded right now, or None. Never blocks, never writes."""
    try:
        fd = os.open(lock_path(root), os.O_RDONLY | SAFE_OPEN)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # someone holds it exclusively: a run is under way
            return _read_holder(fd) or Holder(pid=0, host="?", since="?", command="?")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # a file left by a killed run: nobody holds it
    finally:
        os.close(fd)


def _open_locked(path: Path) -> int:
    """Open ``path`` and lock it exclusively; raises BlockingIOError if someone holds it.

    A releasing holder unlinks the file; if that happened between our open and our lock,
    we locked an orphan that nobody else will ever see, so open the new file again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | SAFE_OPEN, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


@contextmanager
def scenario_lock(root: Path, command: str | None = None) -> Iterator[Holder]:
    """Hold ``root`` for this process; raises ``ScenarioBusy`` naming the holder if it is taken."""
    path = lock_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            fd = _open_locked(path)
            break
        except BlockingIOError:
            try:
                with open(os.open(path, os.O_RDONLY | SAFE_OPEN), "rb") as busy:
                    if _held_shared(busy.fileno()):
                        raise ScenarioBusy(Path(root), None, by_workers=True) from None
                    raise ScenarioBusy(Path(root), _read_holder(busy.fileno())) from None
            except FileNotFoundError:
                continue  # the holder released it meanwhile: try again
    me = Holder(pid=os.getpid(), host=socket.gethostname(),
                since=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                command=command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(asdict(me)).encode(), 0)
        yield me
    finally:
        # Unlink while still locked: a process that opened the old file finds it orphaned and retries.
        # Only our own file: if state/ was archived meanwhile, the path may name another run's lock.
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                path.unlink()
        except FileNotFoundError:
            pass
        os.close(fd)  # closing the last descriptor releases the lock


@contextmanager
def shared_scenario_lock(root: Path) -> Iterator[None]:
    """Held by whatever writes the folder for the workers, many at once; raises ``ScenarioBusy`` naming
    the embedded run that holds the scenario. Shared holders never remove the file: another may hold it."""
    path = lock_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | SAFE_OPEN, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder_now = _read_holder(fd)
            os.close(fd)
            raise ScenarioBusy(Path(root), holder_now) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # an exclusive holder removed it between our open and our lock: the new file counts
    try:
        yield
    finally:
        os.close(fd)

"""Leases: which writer may change an agent's state now (docs/architecture.md, "Fencing").

The per-agent Redis lock keeps two workers from running one agent at once, but
a lock can expire under a live process (frozen by SIGSTOP, swapped out, cut off
from Redis) that later wakes up and goes on writing. Fencing makes such a late
write harmless, and it is checked where the write lands, not when the step starts:

- a writer first *claims* the lease: under an exclusive flock on
  ``state/<agent>/lease.json`` it records the next epoch and itself as owner;
- every write (a log append, an event, a state file, a tool's file, the
  evaluation report) is done while holding the same flock, and only if the
  file still names this writer's epoch and owner; otherwise ``LeaseLost``.
  The flock covers the write itself only (an append, a rename); the fsync
  comes after it, so the lock is held for microseconds.

A claim and a write never interleave, so each write either landed before the
newer writer claimed (which then loads it from disk) or is refused. The owner
carries a random part, so a lease file that was archived and started afresh
(epoch 1 again) never matches a writer of the earlier run.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

# Lock files live in state/, out of every agent's reach; still, a link or FIFO there is never followed or
# waited on (O_NONBLOCK does not change how flock or a read of a regular file behave).
SAFE_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class LeaseLost(RuntimeError):
    """A newer writer claimed the lease: this writer's work must be discarded, not written."""


class LeaseBusy(RuntimeError):
    """The lease file stayed locked too long (its holder froze mid-write): nothing was done; try again later."""


@dataclass(frozen=True)
class Holder:
    epoch: int
    owner: str


def read_from_start(fd: int) -> bytes:
    """Everything in the (small) file behind ``fd``, whatever its offset: a lock file read under its lock."""
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    return raw


def _read(fd: int) -> Holder | None:
    try:
        data = json.loads(read_from_start(fd))
        return Holder(epoch=int(data["epoch"]), owner=str(data["owner"]))
    except (ValueError, KeyError, TypeError):  # empty (first claim) or damaged: nobody holds it
        return None


# The lease file's lock is held only for one append or rename, but a process can be frozen while it
# holds it (SIGSTOP, a hung disk). Whoever waits for it gives up after this long instead of hanging
# with it; the task is retried, and the lock frees itself when the holder goes on or dies.
LOCK_WAIT_S = 5.0


def _flock(fd: int, path: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise LeaseBusy(f"{path} has been locked for over {wait_s:g} s by a writer that does not finish its "
                                "write (a frozen or hung process?); try again later, or end that process: its lock "
                                "is released when it exits") from None
            time.sleep(0.01)


@contextmanager
def _locked(path: Path, flags: int, wait_s: float) -> Iterator[int]:
    fd = os.open(path, flags | SAFE_OPEN, 0o644)
    try:
        _flock(fd, path, wait_s)
        yield fd
    finally:
        os.close(fd)  # closing the descriptor releases the flock


@dataclass(frozen=True)
class Lease:
    """A claimed lease: the file it lives in and the epoch and owner this writer recorded there."""

    path: Path
    epoch: int
    owner: str

    @classmethod
    def claim(cls, path: Path, wait_s: float = LOCK_WAIT_S) -> Lease:
        """Become the only writer allowed at ``path``'s state: every earlier lease is lost from now on."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        with _locked(path, os.O_RDWR | os.O_CREAT, wait_s) as fd:
            previous = _read(fd)
            epoch = (previous.epoch if previous else 0) + 1
            since = datetime.now(UTC).isoformat(timespec="milliseconds")
            body = json.dumps({"epoch": epoch, "owner": owner, "since": since}).encode() + b"\n"
            os.ftruncate(fd, 0)
            os.pwrite(fd, body, 0)
            os.fsync(fd)
        return cls(path=path, epoch=epoch, owner=owner)

    @contextmanager
    def held(self, what: Path | str) -> Iterator[None]:
        """Hold the lease while one write lands; ``LeaseLost`` (nothing written) if a newer writer claimed it."""
        try:
            fd = os.open(self.path, os.O_RDONLY | SAFE_OPEN)
        except FileNotFoundError:  # the state folder was archived or removed under this writer
            raise LeaseLost(self._lost(what, None)) from None
        try:
            _flock(fd, self.path, LOCK_WAIT_S)
            current = _read(fd)
            if current != Holder(self.epoch, self.owner):
                raise LeaseLost(self._lost(what, current))
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def _lost(self, what: Path | str, current: Holder | None) -> str:
        now = f"epoch {current.epoch} ({current.owner}) holds it now" if current else "the lease file is gone"
        return (f"write to {what} refused: this writer's lease (epoch {self.epoch}, {self.owner}) on {self.path} "
                f"was taken over ({now}); its work is discarded and the newer writer goes on")

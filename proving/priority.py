"""CPU priority that holds between sessions: a process's niceness, and its autogroup's.

Linux with ``sched_autogroup_enabled`` (the default of most distributions' kernels) shares the CPU
fairly between *sessions* first, and only then by niceness between the processes of one session. A
worker started in its own session (by systemd, a container runtime, ``setsid`` or ``bench/``) at nice 10
therefore got as much CPU as the compaction worker at nice 0 in another session: ``os.nice`` alone ranked
nothing. The session's autogroup has a niceness of its own (``/proc/self/autogroup``); a process that
leads its session has that group to itself and its children, so it sets the group's niceness to its own.

A process that does not lead its session (started from an interactive shell) shares its autogroup with
the shell and everything started there; it leaves that group alone, and its niceness ranks it among them.

Standard library only: the sample fork server (``python -I``) loads this file by its path.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")
# Without CAP_SYS_ADMIN the kernel takes one autogroup write per 100 ms, machine-wide (EAGAIN otherwise).
RETRY_S, RETRIES = 0.11, 10


def autogroups_on() -> bool:
    try:
        return AUTOGROUP_SWITCH.read_text().strip() == "1"
    except OSError:  # not Linux, or a kernel without autogroups: niceness alone ranks processes
        return False


def lower_priority(increment: int) -> int:
    """Add ``increment`` to this process's niceness and, where it leads its session, give its
    autogroup the same niceness. Returns the niceness now."""
    niceness = os.nice(increment)
    follow_autogroup(niceness)
    return niceness


def follow_autogroup(niceness: int, pid: int | None = None) -> bool:
    """Set the autogroup of ``pid`` (this process by default) to ``niceness`` if that process leads its
    session (the group is its own). False where there is nothing to set, or the kernel refused (the
    process's own niceness still holds)."""
    pid = os.getpid() if pid is None else pid
    if os.getsid(pid) != pid or not autogroups_on():
        return False
    for _ in range(RETRIES):
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(niceness))
            return True
        except OSError as exc:
            if exc.errno != errno.EAGAIN:  # EPERM: a negative niceness without CAP_SYS_NICE
                return False
            time.sleep(RETRY_S)
    return False


def autogroup_niceness(pid: int | str = "self") -> int | None:
    """The niceness of ``pid``'s autogroup (``/autogroup-85 nice 10``), or None without autogroups."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None

"""A memory limit for a sandbox as a whole: one cgroup per sample or Bash command, made
under the worker's own cgroup where the machine lets the worker write there.

Two kinds are used, whichever the machine offers:

- cgroup v2 with the ``memory`` controller already enabled for the worker's children
  (``cgroup.subtree_control``), as under systemd with ``Delegate=yes``: ``memory.max``,
  ``memory.swap.max = 0`` and ``memory.oom.group = 1`` (an out-of-memory kill takes the
  whole sandbox);
- cgroup v1's memory hierarchy, writable (a root worker on a v1 host):
  ``memory.limit_in_bytes`` (and ``memsw`` where swap is accounted); the kernel's OOM
  killer then ends the largest process of the group. The v1 pids hierarchy too, where
  writable: ``pids.max`` (in v2, where ``pids`` is delegated as well).

The process cap matters for a root worker: RLIMIT_NPROC does not bind a process whose user
is root on the host, even inside a user namespace (the kernel exempts INIT_USER).

Where neither is writable (an unprivileged worker without delegation, most CI runners),
``available()`` is False and what holds instead is RLIMIT_AS per process with the process
count capped (``limits.py``): at most MAX_PROCESSES x the limit. docs/evaluation.md says so.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proving.processes import pid_alive

MIB = 1024 * 1024
log = logging.getLogger(__name__)
_names = itertools.count(1)
_lock = threading.Lock()
_bases: list[Hierarchy] | None = None  # None: not looked at yet


def _mounts() -> list[tuple[str, Path, str, str]]:
    """(root inside the hierarchy, mount point, fs type, super options) of each cgroup mount."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields, _, tail = line.partition(" - ")
        parts, rest = fields.split(), tail.split()
        if len(parts) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            found.append((parts[3], Path(parts[4]), rest[0], rest[2]))
    return found


def _own(version: int, controller: str) -> str | None:
    """This process's cgroup path in the v2 hierarchy, or in v1's hierarchy of ``controller``."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if (version == 2 and number == "0" and controllers == "") or (
            version == 1 and controller in controllers.split(",")
        ):
            return path
    return None


def _under(root: str, mount: Path, path: str) -> Path:
    relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return (mount / relative).resolve() if relative != "." else mount


def _writable(directory: Path) -> bool:
    trial = directory / f"baton-probe-{os.getpid()}"
    try:
        trial.mkdir()
        trial.rmdir()
        return True
    except OSError:
        return False


@dataclass(frozen=True)
class Hierarchy:
    label: str  # "unified" (v2), or the v1 controller: "memory", "pids"
    directory: Path  # the worker's own cgroup in it
    version: int


def _find_bases() -> list[Hierarchy]:
    for root, mount, kind, _ in _mounts():
        if kind == "cgroup2" and (own := _own(2, "")) is not None:
            directory = _under(root, mount, own)
            try:
                delegated = "memory" in (directory / "cgroup.subtree_control").read_text().split()
            except OSError:
                delegated = False
            if delegated and _writable(directory):
                return [Hierarchy("unified", directory, 2)]
    found = []
    for controller in ("memory", "pids"):
        for root, mount, kind, options in _mounts():
            if kind == "cgroup" and controller in options.split(",") and (own := _own(1, controller)) is not None:
                directory = _under(root, mount, own)
                if _writable(directory):
                    found.append(Hierarchy(controller, directory, 1))
                break
    return found if found and found[0].label == "memory" else []


def bases() -> list[Hierarchy]:
    """Where the worker may make sandboxes' groups (memory first), looked up once; [] where nowhere."""
    global _bases
    with _lock:
        if _bases is None:
            _bases = _find_bases()
        return _bases


def available() -> bool:
    """A memory limit for a sandbox as a whole can be set here."""
    return bool(bases())


def counts_processes() -> bool:
    """A cgroup can cap a sandbox's process count here (RLIMIT_NPROC cannot for a root worker)."""
    found = bases()
    if found and found[0].version == 2:
        try:
            return "pids" in (found[0].directory / "cgroup.subtree_control").read_text().split()
        except OSError:
            return False
    return any(h.label == "pids" for h in found)


@dataclass
class Group:
    """One sandbox's group, a directory in each hierarchy (v2: one; v1: memory and pids)."""

    parts: dict[str, Path]
    version: int

    @property
    def name(self) -> str:
        return next(iter(self.parts.values())).name

    def join(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the calling process) in; safe in a preexec_fn (a write per hierarchy)."""
        for path in self.parts.values():
            fd = os.open(path / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, str(pid or os.getpid()).encode())
            finally:
                os.close(fd)

    def inside(self) -> list[str]:
        """Its folders as the sample server sees them (``/cgroup/<label>/<name>``)."""
        return [f"{label}/{path.name}" for label, path in self.parts.items()]

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this group for want of memory."""
        memory = self.parts.get("unified") or self.parts.get("memory")
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            lines = (memory / name).read_text().splitlines() if memory else []
        except OSError:
            return False
        return any(line.split()[:1] == ["oom_kill"] and line.split()[1] != "0" for line in lines)

    def close(self) -> None:
        """Kill what is left in it (nothing, normally: its sandbox has ended) and remove it."""
        for path in self.parts.values():
            _remove(path)


def _remove_empty_tree(path: Path) -> None:
    """rmdir ``path`` and the baton groups below it, where no process is left in them."""
    for child in path.iterdir() if path.is_dir() else []:
        if child.is_dir() and child.name.startswith("baton-"):
            _remove_empty_tree(child)
    try:
        path.rmdir()  # fails, and leaves it, while a process is inside
    except OSError:
        pass


def prune() -> None:
    """Remove the empty groups of workers that are gone (killed before they could remove their own).
    Never kills: a worker of another PID namespace may share the hierarchy and look gone."""
    for hierarchy in bases():
        try:
            entries = list(hierarchy.directory.iterdir())
        except OSError:
            continue
        for entry in entries:
            owner = re.fullmatch(r"baton(?:-server)?-(\d+)-\d+", entry.name)
            if owner and entry.is_dir() and not pid_alive(int(owner.group(1))):
                _remove_empty_tree(entry)


def _remove(path: Path) -> None:
    for _ in range(100):
        try:
            pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)  # the last members are still exiting


def _write(path: Path, value: str, required: bool = True) -> None:
    try:
        path.write_text(value)
    except OSError:
        if required:
            raise


def _limit(label: str, path: Path, memory_mb: int, max_processes: int) -> None:
    limit = str(memory_mb * MIB)
    if label == "unified":
        _write(path / "memory.max", limit)
        _write(path / "memory.swap.max", "0", required=False)
        _write(path / "memory.oom.group", "1", required=False)
        _write(path / "pids.max", str(max_processes), required=False)
    elif label == "memory":
        _write(path / "memory.limit_in_bytes", limit)
        _write(path / "memory.memsw.limit_in_bytes", limit, required=False)
    else:
        _write(path / "pids.max", str(max_processes))


def _make(prefix: str, parent: Group | None) -> Group | None:
    found = bases()
    if not found:
        return None
    name = f"{prefix}-{os.getpid()}-{next(_names)}"
    parts = {h.label: (parent.parts[h.label] if parent else h.directory) / name for h in found}
    group = Group({}, found[0].version)
    try:
        for label, path in parts.items():
            path.mkdir()
            group.parts[label] = path
    except OSError:
        group.close()
        raise
    return group


def _made(prefix: str, parent: Group | None, configure: Callable[[Group], None], what: str) -> Group | None:
    """A group made and configured, or None (logged: the per-process limits still hold)."""
    group = None
    try:
        group = _make(prefix, parent)
        if group is not None:
            configure(group)
    except OSError as exc:
        log.warning("no cgroup for %s (%s): its processes are limited one by one only", what, exc)
        if group is not None:
            group.close()
        return None
    return group


def create(memory_mb: int, max_processes: int, parent: Group | None = None) -> Group | None:
    """A new group holding a sandbox to ``memory_mb`` and ``max_processes`` (under ``parent``,
    or the worker's cgroup); None where the machine offers no writable cgroup, or where this
    one could not be made."""

    def limit(group: Group) -> None:
        for label, path in group.parts.items():
            _limit(label, path, memory_mb, max_processes)

    return _made("baton", parent, limit, "this sandbox")


def create_parent() -> Group | None:
    """A group without limits of its own, to hold a sample server's per-sample groups; None as ``create``.
    Groups a killed worker left behind are removed first."""
    prune()

    def delegate(group: Group) -> None:
        if group.version == 2:
            controllers = (bases()[0].directory / "cgroup.subtree_control").read_text().split()
            _write(group.parts["unified"] / "cgroup.subtree_control", " ".join(f"+{c}" for c in controllers))

    return _made("baton-server", None, delegate, "the sample server")

"""The bubblewrap (``bwrap``) command line every sandbox is built from, and the check that
bwrap can make one here.

The shape, and why:

- ``--unshare-all`` and ``--unshare-user``: new user, PID, network, IPC, UTS, cgroup and
  mount namespaces (also for a worker running as root, which bwrap would otherwise leave in
  the host's user namespace). No network but its own loopback; no view of the host's
  processes, so no ``/proc/<pid>/environ`` of the worker to read.
- ``--cap-drop ALL``: root keeps no capability inside. ``--disable-userns`` where nothing
  inside needs to nest (Bash, a spawned sample): no nested user namespaces, a large share of
  the kernel's attack surface. The sample server nests one per sample (``nest.py``).
- ``--die-with-parent``: the sandbox goes when whoever started it goes; ``--new-session``:
  no terminal to push input into. When the sandbox's first process ends, the kernel ends
  every process of its PID namespace: nothing started inside outlives it.
- ``/usr`` read-only, ``/bin``, ``/lib``... as the host has them; no ``/etc``, ``/home``,
  ``/root``, ``/work`` or host ``/tmp``; the sandbox's own ``/`` and ``/dev`` read-only (bwrap makes them
  tmpfs, which code could otherwise fill without bound); a private capped tmpfs at ``/tmp``, a fresh
  ``/proc`` and a minimal ``/dev``; the Python baton runs on, read-only at its own path.
- An empty environment: bwrap itself is started with none (its own process, PID 1 inside,
  would otherwise show the worker's in ``/proc/1/environ``), and ``--clearenv`` plus the few
  variables the caller names for the process it runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TMP_BYTES = 512 * 1024 * 1024  # the private /tmp lives in memory: without a cap it may take half the host's RAM
SHM_BYTES = 16 * 1024 * 1024  # /dev/shm (POSIX shared memory, multiprocessing's locks): small, and sized
EMPTY_ENV: dict[str, str] = {}  # what bwrap is started with
INSTALL_HINT = (
    "install bubblewrap on the worker (`apt-get install -y bubblewrap` on Debian/Ubuntu; it needs unprivileged "
    "user namespaces, or a worker running as root; in a container see docs/deployment.md)"
)
# Only successes are remembered: a failure may be fixed (bwrap installed, namespaces
# allowed) while the worker runs, and each use then tries again.
_WORKING_BWRAP: set[str] = set()


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot make a sandbox on this host; the message says why."""


def system_binds() -> list[str]:
    """/usr read-only, and /bin, /lib... as the host has them: symlinks into /usr
    on merged-usr systems, read-only binds of the real directories otherwise."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def python_dirs() -> list[str]:
    """The install trees of the Python baton runs on that lie outside /usr (a venv and
    the interpreter it links to): the scenario's code is evaluated with this Python."""
    dirs = []
    for prefix in dict.fromkeys((sys.base_prefix, sys.prefix)):
        path = Path(prefix)
        # (one the worker cannot read, e.g. under another user's home, would make bwrap fail)
        readable = path.is_dir() and os.access(path, os.R_OK | os.X_OK)
        if readable and path.resolve() != Path("/") and not path.resolve().is_relative_to("/usr"):
            dirs.append(str(path))
    return dirs


def python_path_dirs() -> list[str]:
    """PATH's entries inside: the venv's bin first (else the interpreter is under /usr already)."""
    venv_bin = [f"{sys.prefix}/bin"] if sys.prefix in python_dirs() else []
    return [*venv_bin, "/usr/local/bin", "/usr/bin", "/bin"]


def base_args(bwrap: str, *, nested_userns: bool = False) -> list[str]:
    """The isolation every sandbox gets, without its folders: also what the probe runs."""
    userns = [] if nested_userns else ["--disable-userns"]
    return [
        bwrap, "--unshare-all", "--unshare-user", *userns, "--cap-drop", "ALL",
        "--die-with-parent", "--new-session", "--hostname", "sandbox",
        *system_binds(), "--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp",
    ]


def command(
    bwrap: str, *, writable: dict[Path, str], chdir: str, env: dict[str, str], argv: list[str],
    read_only: dict[Path, str] | None = None, nested_userns: bool = False, extra: list[str] | None = None,
) -> list[str]:
    """The argv that runs ``argv`` in a sandbox where each host folder of ``writable`` is
    bound read-write at its path inside, each of ``read_only`` read-only (bound after the
    writable ones, so it covers a file inside one), the Python read-only, nothing else."""
    args = base_args(bwrap, nested_userns=nested_userns)
    for directory in python_dirs():
        args += ["--ro-bind", directory, directory]
    for host, inside in writable.items():
        args += ["--bind", str(host.resolve()), inside]
    for host, inside in (read_only or {}).items():
        args += ["--ro-bind", str(host.resolve()), inside]
    # Last, once every mount point exists: bwrap builds / and /dev on tmpfs, which code inside could fill
    # without bound (half the host's memory) were they writable. /dev/shm keeps a small one of its own.
    args += [*(extra or []), "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
             "--remount-ro", "/", "--chdir", chdir, "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return [*args, *argv]


SYSTEM_BWRAPS = ("/usr/bin/bwrap", "/bin/bwrap", "/usr/local/bin/bwrap")


def usable_bwrap() -> str:
    """The path of a bwrap that can make a sandbox here: a trial sandbox runs until one works."""
    # On PATH first; then where distributions install it, for a worker started with a bare PATH (a service
    # manager, a minimal environment): the sandbox must not depend on how the worker was launched.
    bwrap = shutil.which("bwrap") or next((p for p in SYSTEM_BWRAPS if os.access(p, os.X_OK)), None)
    if bwrap is None:
        raise SandboxUnavailable("bubblewrap (`bwrap`) is not installed: it was not found on PATH nor in "
                                 f"{', '.join(SYSTEM_BWRAPS)}")
    if bwrap in _WORKING_BWRAP:
        return bwrap
    try:
        probe = subprocess.run([*base_args(bwrap), "true"], capture_output=True, timeout=10, env=EMPTY_ENV)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"{bwrap} could not be run: {exc}") from None
    if probe.returncode != 0:
        why = probe.stderr.decode("utf-8", errors="replace").strip() or f"exit code {probe.returncode}"
        raise SandboxUnavailable(f"{bwrap} cannot create a sandbox here: {why}")
    _WORKING_BWRAP.add(bwrap)
    return bwrap

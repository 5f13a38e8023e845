"""How an evaluation sample's folder is seen from inside its sandbox, and the bwrap command
that runs a spawned sample (one forked by the sample server is confined by ``nest.py``).

The sample's folder is a tmpfs of its disk limit at ``/sample`` (bwrap's ``--size``): it can
write nothing on the host. Its first process, ``spawned_main.py`` (PID 1, ``--as-pid-1``),
copies ``job.json`` and ``work/`` (the copies of tools/ and checkers/) into it from the host
folder, which it holds as an open descriptor (no host folder is mounted), runs the sample,
and copies ``result.json`` and ``progress.json`` back out when it has ended. ``child_main.py``,
``spawned_main.py`` and ``nest.py`` are bound read-only; baton's other files are not there.
"""

from __future__ import annotations

import sys
from pathlib import Path

from proving.sandbox import bwrap
from proving.sandbox.nest import CGROUP_DIR, MIB, SAMPLE_DIR

PROVING_DIR = Path(__file__).resolve().parents[1]  # read-only at /baton/proving in the sample server's sandbox
INSIDE_PROVING = "/baton/proving"
SPAWNED_FILES = ("evaluation/spawned_main.py", "evaluation/child_main.py", "sandbox/nest.py",
                 "evaluation/child_runs.py", "evaluation/compare.py",  # these two: the gates' runs
                 "evaluation/child_policy.py")  # the policy gate's predicates


def inside_env(home: str) -> dict[str, str]:
    """The whole environment of the sandboxed process: nothing of the worker's."""
    return {"PATH": ":".join(bwrap.python_path_dirs()), "LANG": "C.UTF-8", "HOME": home, "TMPDIR": home}


def spawn_command(bwrap_path: str, folder_fd: int, timeout_s: float, disk_mb: int) -> list[str]:
    """Run the sample of the host folder open as ``folder_fd`` (pass it to the sandbox) in a tmpfs of
    ``disk_mb`` at /sample, ended at ``timeout_s`` by its first process (``spawned_main.py``)."""
    read_only = {PROVING_DIR / name: f"{INSIDE_PROVING}/{name}" for name in SPAWNED_FILES}
    return bwrap.command(
        bwrap_path, writable={}, read_only=read_only, chdir="/", env=inside_env(SAMPLE_DIR),
        argv=[sys.executable, "-I", f"{INSIDE_PROVING}/{SPAWNED_FILES[0]}", str(folder_fd), repr(float(timeout_s))],
        extra=["--as-pid-1", "--size", str(disk_mb * MIB), "--tmpfs", SAMPLE_DIR],
    )


def server_command(bwrap_path: str, samples: Path, cgroups: dict[str, Path], server_script: Path) -> list[str]:
    """The sample server's sandbox: every sample folder of this server under /samples (each
    sample then sees only its own, at /sample), its cgroups at /cgroup/<hierarchy>, baton's
    agents/ read-only. User namespaces stay allowed and CAP_SETFCAP is kept (to map root, for
    a root worker): each sample nests its own (nest.py), then drops every capability."""
    writable = {samples: "/samples", **{path: f"{CGROUP_DIR}/{label}" for label, path in cgroups.items()}}
    script = f"{INSIDE_PROVING}/evaluation/{server_script.name}"
    return bwrap.command(
        bwrap_path, writable=writable, read_only={PROVING_DIR: INSIDE_PROVING}, chdir="/",
        env=inside_env("/tmp"), argv=[sys.executable, "-I", script], nested_userns=True,
        extra=["--dir", SAMPLE_DIR, "--cap-add", "CAP_SETFCAP"],
    )


def from_bwrap(returncode: int) -> int:
    """bwrap reports a process killed by signal N as 128 + N; the evaluation reads -N."""
    return -(returncode - 128) if 128 < returncode < 160 else returncode

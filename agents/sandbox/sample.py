"""How an evaluation sample's folder is seen from inside its sandbox, and the bwrap command
that runs a spawned sample (one forked by the sample server is confined by ``nest.py``).

The sample's temp folder (``job.json``, ``result.json``, ``progress.json`` and ``work/`` with
the copies of tools/ and checkers/) is bound read-write at ``/sample``: the only host folder
it can change. ``child_main.py`` is bound read-only; baton's other files are not there.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agents.sandbox import bwrap
from agents.sandbox.nest import CGROUP_DIR, SAMPLE_DIR

AGENTS_DIR = Path(__file__).resolve().parents[1]  # read-only at /baton/agents in the sample server's sandbox
INSIDE_AGENTS = "/baton/agents"


def inside_env(home: str) -> dict[str, str]:
    """The whole environment of the sandboxed process: nothing of the worker's."""
    return {"PATH": ":".join(bwrap.python_path_dirs()), "LANG": "C.UTF-8", "HOME": home, "TMPDIR": home}


def spawn_command(bwrap_path: str, folder: Path, child_script: Path) -> list[str]:
    """Run ``child_script`` on ``folder``/job.json, with ``folder`` at /sample."""
    script = f"{INSIDE_AGENTS}/evaluation/{child_script.name}"
    return bwrap.command(
        bwrap_path, writable={folder: SAMPLE_DIR}, read_only={child_script: script},
        chdir=f"{SAMPLE_DIR}/work", env=inside_env(SAMPLE_DIR),
        argv=[sys.executable, "-I", script, f"{SAMPLE_DIR}/job.json"],
    )


def server_command(bwrap_path: str, samples: Path, cgroups: dict[str, Path], server_script: Path) -> list[str]:
    """The sample server's sandbox: every sample folder of this server under /samples (each
    sample then sees only its own, at /sample), its cgroups at /cgroup/<hierarchy>, baton's
    agents/ read-only. User namespaces stay allowed and CAP_SETFCAP is kept (to map root, for
    a root worker): each sample nests its own (nest.py), then drops every capability."""
    writable = {samples: "/samples", **{path: f"{CGROUP_DIR}/{label}" for label, path in cgroups.items()}}
    script = f"{INSIDE_AGENTS}/evaluation/{server_script.name}"
    return bwrap.command(
        bwrap_path, writable=writable, read_only={AGENTS_DIR: INSIDE_AGENTS}, chdir="/",
        env=inside_env("/tmp"), argv=[sys.executable, "-I", script], nested_userns=True,
        extra=["--dir", SAMPLE_DIR, "--cap-add", "CAP_SETFCAP"],
    )


def from_bwrap(returncode: int) -> int:
    """bwrap reports a process killed by signal N as 128 + N; the evaluation reads -N."""
    return -(returncode - 128) if 128 < returncode < 160 else returncode

"""Simulated runs of the example that many test modules start from, made once per test session and shared by
every pytest-xdist worker.

A run of the example costs about 2 CPU-seconds, and under ``-n 6 --dist worksteal`` a module's tests land on
every worker, so a session or module fixture that ran it was paid once per worker and per module (13 runs in
the fast subset). Here the first worker to ask makes the run, under a file lock, in a folder all workers of
the session share; the others wait for it and read it. The shared copy is never handed out: each fixture gets
its own copy (a run folder holds no absolute path, so a copy is the run).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class SharedRun:
    """What ``baton run`` left: the scenario folder (read it, never write it), its exit code and its output."""

    root: Path
    exit_code: int
    output: str

    def copy_to(self, folder: Path) -> Path:
        """A private copy of the scenario folder in ``folder``, to read or change."""
        target = folder / self.root.name
        shutil.copytree(self.root, target)
        return target


Make = Callable[[Path], tuple[Path, int, str]]  # a folder to run in -> (scenario root, exit code, output)


def session_folder(factory: pytest.TempPathFactory) -> Path:
    """A folder every worker of this test session sees: xdist gives each worker its own basetemp inside the
    controller's (…/pytest-N/popen-gw0), so their parent is the session's; a plain run has its basetemp alone."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_run(factory: pytest.TempPathFactory, name: str, make: Make) -> SharedRun:
    """The run called ``name``, made by ``make`` once per session across workers."""
    shared = session_folder(factory) / "shared-runs"
    shared.mkdir(exist_ok=True)
    done, meta = shared / name, shared / f"{name}.json"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this worker dies
        if not meta.is_file():  # the meta file is written last: a worker that died mid-run left none
            shutil.rmtree(done, ignore_errors=True)
            done.mkdir()
            root, exit_code, output = make(done)
            meta.write_text(json.dumps({"root": root.name, "exit_code": exit_code, "output": output}))
    recorded = json.loads(meta.read_text())
    return SharedRun(done / recorded["root"], recorded["exit_code"], recorded["output"])

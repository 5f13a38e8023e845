"""The child process of one sample: a fresh temp dir with copies of tools/ and
checkers/, in the sandbox (agents/sandbox/: its own namespaces, an empty environment,
only that dir writable, a memory cgroup where the machine has one), with resource
limits, in its own process group that is killed afterwards. It runs ``child_main.py``
(docs/evaluation.md, "How a sample is run")."""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agents.cpu_slots import cpu_slot
from agents.evaluation import fork_server
from agents.evaluation.models import ChildProgress, ChildResult
from agents.processes import Finished, run_limited
from agents.sandbox import cgroup
from agents.sandbox.bwrap import EMPTY_ENV, usable_bwrap
from agents.sandbox.limits import MAX_PROCESSES
from agents.sandbox.nest import SAMPLE_DIR
from agents.sandbox.policy import evaluation_confined
from agents.sandbox.sample import from_bwrap, spawn_command

log = logging.getLogger(__name__)
CHILD_SCRIPT = Path(__file__).with_name("child_main.py")


@dataclass
class ChildRun:
    result: ChildResult | None
    progress: ChildProgress
    returncode: int
    timed_out: bool
    stdout_tail: str = ""
    stderr_tail: str = ""
    out_of_memory: bool = False  # the sample's cgroup ran out: the kernel killed some of its processes


def run_child(out_dir: Path, raw_sample: dict[str, Any], *, timeout_s: float, memory_mb: int) -> ChildRun:
    """Run one sample in a fresh temp dir holding copies of tools/ and checkers/: in the
    sandbox (agents/sandbox/) unless a person chose BATON_EVAL_SANDBOX=none.
    Raises SandboxUnavailable where bwrap cannot make one."""
    confined = evaluation_confined()
    bwrap_path = usable_bwrap() if confined else ""
    server = _server(confined)
    where = server.samples if server is not None and server.samples is not None else None
    with tempfile.TemporaryDirectory(prefix="baton-eval-", dir=where) as tmp_name:
        tmp = Path(tmp_name)
        inside = SAMPLE_DIR if confined else str(tmp)  # how the sample's code sees its folder
        work = tmp / "work"
        work.mkdir()
        for folder in ("tools", "checkers"):
            if (out_dir / folder).is_dir():
                shutil.copytree(out_dir / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        job = {
            "tools_dir": f"{inside}/work/tools",
            "checkers_dir": f"{inside}/work/checkers",
            "sample": raw_sample,
            "result_path": f"{inside}/result.json",
            "progress_path": f"{inside}/progress.json",
            "max_processes": MAX_PROCESSES if confined else None,
        }
        (tmp / "job.json").write_text(json.dumps(job), encoding="utf-8")
        group = cgroup.create(memory_mb, MAX_PROCESSES, parent=server.cgroup if server else None) \
            if confined else None
        try:
            with cpu_slot():  # a worker serving many steps runs at most a core's worth of samples at once
                done = _run_sample(server, tmp, bwrap_path, group, timeout_s, memory_mb)
        finally:
            out_of_memory = group.oom_killed() if group else False
            if group:
                group.close()
        run = ChildRun(None, ChildProgress(), done.returncode, done.timed_out, done.stdout_tail, done.stderr_tail,
                       out_of_memory)
        run.result = _read_model(tmp / "result.json", ChildResult)
        run.progress = _read_model(tmp / "progress.json", ChildProgress) or ChildProgress()
        return run


def _server(confined: bool) -> fork_server.ForkServer | None:
    if not fork_server.enabled():
        return None
    try:
        return fork_server.server(confined)
    except (fork_server.ServerGone, TimeoutError, OSError) as exc:
        log.warning("%s: samples run in a fresh Python instead", exc)
        return None


def _run_sample(server: fork_server.ForkServer | None, tmp: Path, bwrap_path: str, group: cgroup.Group | None,
                timeout_s: float, memory_mb: int) -> Finished:
    """Forked from the process's sample server; spawned afresh when the server is off or failed it."""
    work = tmp / "work"
    if server is not None:
        try:
            return server.run(tmp, timeout_s, memory_mb, group.inside() if group else [])
        except (fork_server.ServerGone, TimeoutError, OSError) as exc:
            log.warning("%s: this sample runs in a fresh Python instead", exc)
    if not bwrap_path:
        argv = [sys.executable, "-I", str(CHILD_SCRIPT), str(tmp / "job.json")]
        return run_limited(argv, cwd=work, timeout_s=timeout_s, memory_mb=memory_mb)
    argv = spawn_command(bwrap_path, tmp, CHILD_SCRIPT)
    done = run_limited(argv, cwd=work, timeout_s=timeout_s, memory_mb=memory_mb, env=EMPTY_ENV,
                       before=group.join if group else None)
    done.returncode = from_bwrap(done.returncode)
    return done


def _read_model(path: Path, model: type[Any]) -> Any:
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None

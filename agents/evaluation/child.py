"""The child process of one sample: a fresh temp dir with copies of tools/ and
checkers/, resource limits, a minimal environment, and its own process group that
is killed afterwards. It runs ``child_main.py`` (docs/evaluation.md, "How a sample
is run")."""

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


def run_child(out_dir: Path, raw_sample: dict[str, Any], *, timeout_s: float, memory_mb: int) -> ChildRun:
    """Run one sample in a fresh temp dir holding copies of tools/ and checkers/."""
    with tempfile.TemporaryDirectory(prefix="baton-eval-") as tmp_name:
        tmp = Path(tmp_name)
        work = tmp / "work"
        work.mkdir()
        for folder in ("tools", "checkers"):
            if (out_dir / folder).is_dir():
                shutil.copytree(out_dir / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        job = {
            "tools_dir": str(work / "tools"),
            "checkers_dir": str(work / "checkers"),
            "sample": raw_sample,
            "result_path": str(tmp / "result.json"),
            "progress_path": str(tmp / "progress.json"),
        }
        (tmp / "job.json").write_text(json.dumps(job), encoding="utf-8")
        run = _spawn(tmp, work, timeout_s, memory_mb)
        run.result = _read_model(tmp / "result.json", ChildResult)
        run.progress = _read_model(tmp / "progress.json", ChildProgress) or ChildProgress()
        return run


def _spawn(tmp: Path, work: Path, timeout_s: float, memory_mb: int) -> ChildRun:
    with cpu_slot():  # a worker serving many steps runs at most a core's worth of samples at once
        done = _run_sample(tmp / "job.json", work, timeout_s, memory_mb)
    return ChildRun(None, ChildProgress(), done.returncode, done.timed_out, done.stdout_tail, done.stderr_tail)


def _run_sample(job: Path, work: Path, timeout_s: float, memory_mb: int) -> Finished:
    """Forked from the process's sample server; spawned afresh when the server is off or failed it."""
    if fork_server.enabled():
        try:
            return fork_server.server().run(job, work, timeout_s, memory_mb)
        except (fork_server.ServerGone, TimeoutError, OSError) as exc:
            log.warning("%s: this sample runs in a fresh Python instead", exc)
    argv = [sys.executable, "-I", str(CHILD_SCRIPT), str(job)]
    return run_limited(argv, cwd=work, timeout_s=timeout_s, memory_mb=memory_mb)


def _read_model(path: Path, model: type[Any]) -> Any:
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None

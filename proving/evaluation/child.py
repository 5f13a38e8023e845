"""The child process of one sample: a fresh temp dir with copies of tools/ and
checkers/, in the sandbox (proving/sandbox/: its own namespaces, an empty environment,
only that dir writable, a memory cgroup where the machine has one), with resource
limits, in its own process group that is killed afterwards. It runs ``child_main.py``
(docs/evaluation.md, "How a sample is run").

Everything in the iteration folder and everything the sample leaves is hostile input: tools/ and
checkers/ are copied as regular files and folders only (``trees.copy_tree``: a link to
/proc/self/environ or to another scenario's state/ is refused, named in the sample's trace, never
followed); the sample's result and progress are read regular-file-only, without following a link,
without waiting on a FIFO and within a bound. Confined, the sample writes them into a tmpfs of its
disk limit and a process it cannot reach copies them out (``nest.copy_out``) with a note of its own
(``sandbox.json``: what it refused, whether the disk was full, whether the time limit was reached)."""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from proving.cpu_slots import cpu_slot
from proving.evaluation import fork_server
from proving.evaluation.models import ChildProgress, ChildResult
from proving.processes import Finished, run_limited
from proving.sandbox import cgroup
from proving.sandbox.bwrap import EMPTY_ENV, usable_bwrap
from proving.sandbox.limits import MAX_PROCESSES
from proving.sandbox.nest import DISK_MB, MIB, NOTE, OUT_FILES, SAMPLE_DIR
from proving.sandbox.policy import evaluation_confined
from proving.sandbox.sample import from_bwrap, spawn_command
from scenarios import confined as folder_access
from scenarios import trees
from scenarios.store import StoreError

log = logging.getLogger(__name__)
CHILD_SCRIPT = Path(__file__).with_name("child_main.py")
OVER_BOUND = "not run: what was written is over a bound of the sample's copy:"
NOTE_BYTES = 64 * 1024
COPY_OUT_S = 5.0  # a spawned sample's first process kills it at its time limit, then copies out: a backstop after


@dataclass
class ChildRun:
    result: ChildResult | None
    progress: ChildProgress
    returncode: int
    timed_out: bool
    stdout_tail: str = ""
    stderr_tail: str = ""
    out_of_memory: bool = False  # the sample's cgroup ran out: the kernel killed some of its processes
    not_copied: list[str] = field(default_factory=list)  # entries of tools/ and checkers/ refused, "path: why"
    refused: list[str] = field(default_factory=list)  # what the sample left for the worker and was refused
    disk_full: bool = False  # its folder (a tmpfs of its disk limit) was full when it ended
    problem: str | None = None  # why it was not run at all
    problem_layer: Literal["L2", "L4"] = "L2"  # L4: what was written passes a bound of its copy (issue 39, item 5)


def run_child(root: Path, parts: Sequence[str], raw_sample: dict[str, Any], *, timeout_s: float, memory_mb: int,
              disk_mb: int = DISK_MB, job: dict[str, Any] | None = None,
              result_model: type[BaseModel] = ChildResult) -> ChildRun:
    """Run one sample in a fresh temp dir holding copies of tools/ and checkers/ of the iteration folder
    ``root``/``parts`` (``root`` the scenario folder): in the sandbox (proving/sandbox/) unless a person chose
    BATON_EVAL_SANDBOX=none. Raises SandboxUnavailable where bwrap cannot make one. ``job``: more of the
    child's job (the gates' runs: ``mode`` "runs"), whose result is read as ``result_model``."""
    confined = evaluation_confined()
    bwrap_path = usable_bwrap() if confined else ""
    server = _server(confined)
    where = server.samples if server is not None and server.samples is not None else None
    with tempfile.TemporaryDirectory(prefix="baton-eval-", dir=where) as tmp_name:
        tmp = Path(tmp_name)
        inside = SAMPLE_DIR if confined else str(tmp)  # how the sample's code sees its folder
        work = tmp / "work"
        work.mkdir()
        started = time.monotonic()  # the copy is part of the sample's time: a tree that takes long to copy is bounded
        not_copied, problem = copy_files(root, parts, work, disk_mb, deadline=started + timeout_s)
        if problem is not None:
            return ChildRun(None, ChildProgress(), 0, False, not_copied=not_copied, problem=problem,
                            problem_layer="L4" if problem.startswith(OVER_BOUND) else "L2")
        timeout_s = max(0.1, timeout_s - (time.monotonic() - started))
        whole = {
            "tools_dir": f"{inside}/work/tools",
            "checkers_dir": f"{inside}/work/checkers",
            "sample": raw_sample,
            "result_path": f"{inside}/result.json",
            "progress_path": f"{inside}/progress.json",
            "max_processes": MAX_PROCESSES if confined else None,
            **(job or {}),
        }
        (tmp / "job.json").write_text(json.dumps(whole), encoding="utf-8")
        group = cgroup.create(memory_mb, MAX_PROCESSES, parent=server.cgroup if server else None) \
            if confined else None
        try:
            with cpu_slot():  # a worker serving many steps runs at most a core's worth of samples at once
                done = _run_sample(server, tmp, bwrap_path, group, timeout_s, memory_mb, disk_mb)
        finally:
            out_of_memory = group.oom_killed() if group else False
            if group:
                group.close()
        run = ChildRun(None, ChildProgress(), done.returncode, done.timed_out, done.stdout_tail, done.stderr_tail,
                       out_of_memory, not_copied)
        if confined:  # written by the process that copied the result out; unconfined, the sample could forge it
            note = _read_note(tmp)
            run.refused = [str(r) for r in note.get("refused", [])][:10]
            run.disk_full = note.get("disk_full") is True
            run.timed_out = run.timed_out or note.get("timed_out") is True
        run.result = _read_model(tmp, "result.json", result_model, run.refused)
        run.progress = _read_model(tmp, "progress.json", ChildProgress, run.refused) or ChildProgress()
        return run


def copy_files(root: Path, parts: Sequence[str], work: Path, disk_mb: int,
               deadline: float | None = None) -> tuple[list[str], str | None]:
    """tools/ and checkers/ of ``root``/``parts`` into ``work`` as regular files and folders only: what was
    refused ("tools/env.txt: a symlink, not copied"), and why the sample cannot run, if it cannot (starting with
    OVER_BOUND when the folder passes a bound of the copy: depth, entries, time)."""
    not_copied: list[str] = []
    for name in ("tools", "checkers"):
        try:
            refused = trees.copy_tree(root, (*parts, name), work / name, skip=_compiled,
                                      limit_bytes=disk_mb * MIB, deadline=deadline)
        except folder_access.Missing:
            continue
        except trees.OverBound as exc:
            return not_copied, f"{OVER_BOUND} {name}/: {exc}"
        except folder_access.TooLarge as exc:
            return not_copied, f"{name}/ does not fit in a sample's folder (disk limit {disk_mb} MB): {exc}"
        except StoreError:  # the folder itself is a link, or a file
            not_copied.append(f"{name}: not a folder (a symlink is never followed), not copied")
            continue
        not_copied += [f"{name}/{entry}" for entry in refused]
    return not_copied, None


def _compiled(name: str) -> bool:
    return name == "__pycache__" or name.endswith(".pyc")


def _server(confined: bool) -> fork_server.ForkServer | None:
    if not fork_server.enabled():
        return None
    try:
        return fork_server.server(confined)
    except (fork_server.ServerGone, TimeoutError, OSError) as exc:
        log.warning("%s: samples run in a fresh Python instead", exc)
        return None


def _run_sample(server: fork_server.ForkServer | None, tmp: Path, bwrap_path: str, group: cgroup.Group | None,
                timeout_s: float, memory_mb: int, disk_mb: int) -> Finished:
    """Forked from the process's sample server; spawned afresh when the server is off or failed it."""
    work = tmp / "work"
    if server is not None:
        try:
            return server.run(tmp, timeout_s, memory_mb, group.inside() if group else [], disk_mb)
        except (fork_server.ServerGone, TimeoutError, OSError) as exc:
            log.warning("%s: this sample runs in a fresh Python instead", exc)
            for name in (*OUT_FILES, NOTE):  # what the failed run may have left: written again below
                try:
                    os.unlink(tmp / name)
                except OSError:
                    pass
    if not bwrap_path:
        argv = [sys.executable, "-I", str(CHILD_SCRIPT), str(tmp / "job.json")]
        return run_limited(argv, cwd=work, timeout_s=timeout_s, memory_mb=memory_mb)
    folder = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the sandbox's one way to the host
    try:
        argv = spawn_command(bwrap_path, folder, timeout_s, disk_mb)
        # The sandbox's first process ends the sample at its time limit and then copies its result out;
        # the wall clock here is a backstop a little after that.
        done = run_limited(argv, cwd=work, timeout_s=timeout_s, memory_mb=memory_mb, env=EMPTY_ENV,
                           before=group.join if group else None, pass_fds=(folder,), wall_s=timeout_s + COPY_OUT_S)
    finally:
        os.close(folder)
    done.returncode = from_bwrap(done.returncode)
    return done


def _read_note(tmp: Path) -> dict[str, Any]:
    try:
        note = json.loads(folder_access.read_bytes(tmp, (NOTE,), limit=NOTE_BYTES))
    except (StoreError, OSError, ValueError):
        return {}
    return note if isinstance(note, dict) else {}


def _read_model(tmp: Path, name: str, model: type[Any], refused: list[str]) -> Any:
    """``tmp``/``name`` parsed as ``model``: read regular-file-only, no link followed, no FIFO waited on, at most
    its bound (what it is when it is refused is added to ``refused``); None when absent, refused or invalid."""
    try:
        raw = folder_access.read_bytes(tmp, (name,), limit=OUT_FILES[name])
    except folder_access.Missing:
        return None
    except folder_access.TooLarge as exc:
        refused.append(str(exc))  # "result.json holds N bytes, more than ..."
        return None
    except (StoreError, OSError):
        try:
            what = folder_access.describe(os.lstat(tmp / name))
        except OSError:
            what = "unreadable"
        refused.append(f"{name}: {what}, refused")
        return None
    try:
        return model.model_validate_json(raw)
    except (ValidationError, ValueError):
        return None

"""What an exported task runs in its sandbox for each tool call and each judgement:
``python3 -I -B <export>/baton_runtime/box.py``, the request on stdin, one framed result on stdout.

Standard library only, and no sandbox of its own: it runs inside whichever sandbox Inspect was given
(the export's own bubblewrap one, ``sandbox.py``; Inspect's ``docker`` with the export's compose.yaml;
any other provider), so the same steps run everywhere:

1. read the request, bounded: a header line (``BATON-JOB/1 {"timeout_s", "memory_mb", "reference"}``) and the
   job as the task wrote it, which is kept as bytes, never parsed here (with a benchmark's megabytes of data,
   each parse and each dump costs tens of milliseconds);
2. make a fresh folder in the working directory (the sandbox's bounded ``/work``), copy the export's
   ``tools/`` and ``checkers/`` into it, regular files only (a second copy for the judge's replay), and write
   the job and, beside it, its paths;
3. run ``child_main`` there in a child forked from this process (``processes.run_forked``: memory, CPU and
   wall-clock limits, a session of its own killed afterwards, an environment of four variables): this
   process has loaded it and nothing else, so a call costs a fork, not a second interpreter and its imports;
   the process count is capped inside the child when this process has a user namespace of its own, where
   RLIMIT_NPROC counts that sandbox's processes only;
4. read what the child wrote (regular files only, no links followed, bounded, valid UTF-8), say which writable
   space it filled if it left one full, remove the folder, and print one frame: ``BATON-BOX/2 <lengths>``,
   a line of facts and the child's result files as they are. The task reads it with ``read_frame``.

The export's folder is this file's grandparent: ``/export`` in a sandbox, the export itself where
none could be had.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    from . import child_main
    from .processes import Finished, run_forked
except ImportError:  # run as a script (python -I box.py): its package is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from baton_runtime import child_main
    from baton_runtime.processes import Finished, run_forked

EXPORT = Path(__file__).resolve().parents[1]
MAGIC = "BATON-BOX/2"
ASKED = "BATON-JOB/1"
REQUEST_BYTES = 256 * 1024 * 1024  # the job carries the sample's data
RESULT_BYTES = 32 * 1024 * 1024  # each file the child writes: the data after a call, the checkers' verdicts
FRAME_BYTES = 2 * RESULT_BYTES + 1024 * 1024  # the result, the replay's result and the child's tails
MAX_PROCESSES = 64  # as baton's evaluation (proving/sandbox/limits.py), its init and the box included
FULL_BYTES = 1024 * 1024  # a writable space with less left than this was filled
CODE = ("tools", "checkers")
SKIPPED = ("__pycache__",)

Runner = Callable[..., Finished]
Parts = tuple[dict[str, Any], bytes | None, bytes | None]  # the facts, the child's result, the replay's result


def run_child(job: Path, where: Path, *, cwd: Path, timeout_s: float, memory_mb: int) -> Finished:
    """``child_main`` on ``job`` in a limited child forked from this process."""
    argv = ["child_main.py", str(job), str(where)]
    return run_forked(lambda: child_main.end_of_fork(lambda: child_main.main(argv)), cwd=cwd, timeout_s=timeout_s,
                      memory_mb=memory_mb)


def request(header: dict[str, Any], job: str) -> bytes:
    """What the task writes on the box's stdin: the header, a line, and the job's JSON (ASCII: ``json.dumps``)."""
    return f"{ASKED} {json.dumps(header)}\n".encode() + job.encode("ascii")


def split_request(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """(the header, the job's bytes); ValueError for anything else."""
    head, newline, job = raw.partition(b"\n")
    asked, _, header = head.partition(b" ")
    if asked != ASKED.encode() or not newline:
        raise ValueError(f"the request does not start with {ASKED}")
    facts = json.loads(header)
    if not isinstance(facts, dict) or not {"timeout_s", "memory_mb"} <= facts.keys():
        raise ValueError("the request's header lacks timeout_s or memory_mb")
    return facts, job


def launch(export: Path, header: dict[str, Any], job: bytes, base: Path, run: Runner = run_child) -> Parts:
    """Run ``job`` in a fresh folder under ``base``: the frame's parts. ``run`` starts its one child (a test
    counts them with it)."""
    work_root = Path(tempfile.mkdtemp(prefix="call-", dir=base))
    try:
        return _launch(export, header, job, work_root, run)
    finally:
        shutil.rmtree(work_root, ignore_errors=True)


def _launch(export: Path, header: dict[str, Any], job: bytes, root: Path, run: Runner) -> Parts:
    work = root / "work"
    where: dict[str, Any] = {"tools_dir": str(work / "tools"), "checkers_dir": str(work / "checkers"),
                             "result_path": str(root / "result.json"), "progress_path": str(root / "progress.json")}
    if own_user_namespace():
        where["max_processes"] = MAX_PROCESSES
    try:
        copy_code(export, work)
        if header.get("reference"):
            apart = copy_code(export, root / "reference" / "work")
            where["reference"] = {"cwd": str(apart), "tools_dir": str(apart / "tools"),
                                  "checkers_dir": str(apart / "checkers"), "result_path": str(root / "reference.json")}
        (root / "job.json").write_bytes(job)
        (root / "where.json").write_text(json.dumps(where), encoding="utf-8")
    except OSError as exc:  # the code and the job did not fit: nothing of the model's has run yet
        return {"problem": f"the sandbox could not prepare the call ({exc})", "full": full_spaces(root)}, None, None
    done = run(root / "job.json", root / "where.json", cwd=work, timeout_s=float(header["timeout_s"]),
               memory_mb=int(header["memory_mb"]))
    facts = {"returncode": done.returncode, "timed_out": done.timed_out, "stdout_tail": done.stdout_tail,
             "stderr_tail": done.stderr_tail, "full": full_spaces(root)}
    reference = result_text(root / "reference.json") if header.get("reference") else None
    return facts, result_text(root / "result.json"), reference


def copy_code(export: Path, work: Path) -> Path:
    """The export's tools/ and checkers/ under ``work``: regular files and folders only, nothing followed."""
    work.mkdir(parents=True)
    for name in CODE:
        if (export / name).is_dir() and not (export / name).is_symlink():
            _copy_tree(export / name, work / name)
    return work


def _copy_tree(source: Path, target: Path) -> None:
    target.mkdir()
    with os.scandir(source) as entries:
        for entry in entries:
            if entry.name in SKIPPED or entry.name.endswith(".pyc"):
                continue
            if entry.is_dir(follow_symlinks=False):
                _copy_tree(Path(entry.path), target / entry.name)
            elif entry.is_file(follow_symlinks=False):
                (target / entry.name).write_bytes(read_regular(Path(entry.path), RESULT_BYTES))


def read_regular(path: Path, limit: int) -> bytes:
    """A regular file's bytes, at most ``limit`` (OSError otherwise): no link followed, no FIFO waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path.name} is not a regular file")
        if info.st_size > limit:
            raise OSError(f"{path.name} holds {info.st_size} bytes, more than {limit}")
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise OSError(f"{path.name} grew past {limit} bytes")
        return data
    finally:
        os.close(fd)


def result_text(path: Path) -> bytes | None:
    """The bytes of a result the child wrote there, or None (none written, not a regular file, too big, not
    UTF-8). Parsed by the task, not here: the file lies in the sandbox with the generated code."""
    try:
        raw = read_regular(path, RESULT_BYTES)
        raw.decode("utf-8")  # the frame goes back as text: what is not UTF-8 would not come through whole
    except (OSError, UnicodeDecodeError):
        return None
    return raw


def own_user_namespace() -> bool:
    """Whether this process has a user namespace of its own (bwrap gives one; a container usually does not):
    only there does RLIMIT_NPROC count this sandbox's processes rather than the user's on the host."""
    try:
        return Path("/proc/self/uid_map").read_text().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def full_spaces(root: Path) -> list[str]:
    """The writable spaces (the call's folder's, /tmp's) with less than FULL_BYTES left, as ``path (N MB)``."""
    found, seen = [], set()
    for place in (root.parent, Path(tempfile.gettempdir())):
        try:
            device = os.stat(place).st_dev
            space = os.statvfs(place)
        except OSError:
            continue
        if device in seen:
            continue
        seen.add(device)
        if space.f_bavail * space.f_frsize < FULL_BYTES:
            found.append(f"{place} ({space.f_blocks * space.f_frsize // (1024 * 1024)} MB)")
    return found


def frame(facts: dict[str, Any], result: bytes | None = None, reference: bytes | None = None) -> bytes:
    """``BATON-BOX/2 <facts> <result> <reference>`` (byte lengths, -1 for a file not there), a newline, the facts
    as ASCII JSON, then each file as it is."""
    head = json.dumps(facts).encode("ascii")  # ASCII: a lone surrogate in a tail cannot break it
    lengths = " ".join(str(-1 if part is None else len(part)) for part in (head, result, reference))
    return f"{MAGIC} {lengths}\n".encode() + head + (result or b"") + (reference or b"")


def read_frame(stdout: str) -> dict[str, Any] | None:
    """The facts of the one frame ``stdout`` holds, with its ``result`` and ``reference`` parsed (None for each
    file not there or not a JSON object), or None: nothing else may be there, and it is bounded."""
    head, newline, rest = stdout.partition("\n")
    magic, _, lengths = head.partition(" ")
    sizes = lengths.split(" ")
    if magic != MAGIC or not newline or len(sizes) != 3 or not all(s.lstrip("-").isdigit() for s in sizes):
        return None
    facts_len, result_len, reference_len = (int(s) for s in sizes)
    body = rest.encode("utf-8", "surrogatepass")
    if len(body) > FRAME_BYTES or facts_len < 0 or len(body) != facts_len + max(result_len, 0) + max(reference_len, 0):
        return None
    facts = _object(body[:facts_len])
    if facts is None:
        return None
    result_end = facts_len + max(result_len, 0)
    facts["result"] = _object(body[facts_len:result_end]) if result_len >= 0 else None
    facts["reference"] = _object(body[result_end:]) if reference_len >= 0 else None
    return facts


def _object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def main() -> int:
    raw = sys.stdin.buffer.read(REQUEST_BYTES + 1)
    if len(raw) > REQUEST_BYTES:
        parts: Parts = {"problem": f"the request is larger than {REQUEST_BYTES} bytes"}, None, None
    else:
        try:
            header, job = split_request(raw)
        except ValueError as exc:
            parts = {"problem": f"the request could not be read ({exc})"}, None, None
        else:
            del raw  # the forked child is limited in memory, and would carry the request's copy
            parts = launch(EXPORT, header, job, Path.cwd())
    sys.stdout.buffer.write(frame(*parts))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

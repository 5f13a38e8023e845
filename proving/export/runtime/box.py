"""What an exported task runs in its sandbox for each tool call and each judgement:
``python3 -I <export>/baton_runtime/box.py``, the request on stdin, one framed result on stdout.

Standard library only, and no sandbox of its own: it runs inside whichever sandbox Inspect was given
(the export's own bubblewrap one, ``sandbox.py``; Inspect's ``docker`` with the export's compose.yaml;
any other provider), so the same steps run everywhere:

1. read the request (``job``, ``timeout_s``, ``memory_mb``, ``reference``) from stdin, bounded;
2. make a fresh folder in the working directory (the sandbox's bounded ``/work``) and copy the export's
   ``tools/`` and ``checkers/`` into it, regular files only (a second copy for the judge's replay);
3. run ``child_main.py`` there with the evaluation's limits (``processes.run_limited``: memory, CPU, wall
   clock, its own process group killed afterwards, an environment of four variables); the process
   count is capped inside the child when this process has a user namespace of its own, where
   RLIMIT_NPROC counts that sandbox's processes only;
4. read what the child wrote (regular files only, no links followed, bounded), say which writable
   space it filled if it left one full, remove the folder, and print one frame:
   ``BATON-BOX/1 <length>\\n<JSON>``. The task reads it with ``read_frame``.

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
    from .processes import Finished, run_limited
except ImportError:  # run as a script (python -I box.py): its package is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from baton_runtime.processes import Finished, run_limited

EXPORT = Path(__file__).resolve().parents[1]
MAGIC = "BATON-BOX/1"
REQUEST_BYTES = 256 * 1024 * 1024  # the job carries the sample's data
RESULT_BYTES = 32 * 1024 * 1024  # each file the child writes: the data after a call, the checkers' verdicts
FRAME_BYTES = 2 * RESULT_BYTES + 1024 * 1024  # the result, the replay's result and the child's tails
MAX_PROCESSES = 64  # as baton's evaluation (proving/sandbox/limits.py), its init and the box included
FULL_BYTES = 1024 * 1024  # a writable space with less left than this was filled
CODE = ("tools", "checkers")
SKIPPED = ("__pycache__",)

Runner = Callable[..., Finished]


def launch(export: Path, request: dict[str, Any], base: Path, run: Runner = run_limited) -> dict[str, Any]:
    """Run ``request["job"]`` in a fresh folder under ``base``: what to print as the frame."""
    work_root = Path(tempfile.mkdtemp(prefix="call-", dir=base))
    try:
        return _launch(export, request, work_root, run)
    finally:
        shutil.rmtree(work_root, ignore_errors=True)


def _launch(export: Path, request: dict[str, Any], root: Path, run: Runner) -> dict[str, Any]:
    work = root / "work"
    job = {**request["job"], "tools_dir": str(work / "tools"), "checkers_dir": str(work / "checkers"),
           "result_path": str(root / "result.json"), "progress_path": str(root / "progress.json")}
    if own_user_namespace():
        job["max_processes"] = MAX_PROCESSES
    try:
        copy_code(export, work)
        if request.get("reference"):
            apart = copy_code(export, root / "reference" / "work")
            job["reference"] = {"cwd": str(apart), "tools_dir": str(apart / "tools"),
                                "checkers_dir": str(apart / "checkers"), "result_path": str(root / "reference.json")}
        (root / "job.json").write_text(json.dumps(job), encoding="utf-8")
    except OSError as exc:  # the code and the job did not fit: nothing of the model's has run yet
        return {"problem": f"the sandbox could not prepare the call ({exc})", "full": full_spaces(root)}
    done = run([sys.executable, "-I", str(export / "baton_runtime" / "child_main.py"), str(root / "job.json")],
               cwd=work, timeout_s=float(request["timeout_s"]), memory_mb=int(request["memory_mb"]))
    return {
        "result": read_json(root / "result.json"),
        "reference": read_json(root / "reference.json") if request.get("reference") else None,
        "returncode": done.returncode, "timed_out": done.timed_out,
        "stdout_tail": done.stdout_tail, "stderr_tail": done.stderr_tail,
        "full": full_spaces(root),
    }


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


def read_json(path: Path) -> dict[str, Any] | None:
    """The object the child wrote there, or None (none written, not a regular file, too big, not JSON)."""
    try:
        value = json.loads(read_regular(path, RESULT_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


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


def frame(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload).encode("ascii")  # ASCII: a lone surrogate in the data cannot break it
    return f"{MAGIC} {len(body)}\n".encode() + body


def read_frame(stdout: str) -> dict[str, Any] | None:
    """The payload of the one frame ``stdout`` holds, or None: nothing else may be there, and it is bounded."""
    head, newline, body = stdout.partition("\n")
    magic, _, length = head.partition(" ")
    if magic != MAGIC or not newline or not length.isdigit() or int(length) > FRAME_BYTES:
        return None
    if len(body) != int(length):  # ASCII: as many characters as bytes
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def main() -> int:
    raw = sys.stdin.buffer.read(REQUEST_BYTES + 1)
    if len(raw) > REQUEST_BYTES:
        payload: dict[str, Any] = {"problem": f"the request is larger than {REQUEST_BYTES} bytes"}
    else:
        payload = launch(EXPORT, json.loads(raw), Path.cwd())
    sys.stdout.buffer.write(frame(payload))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The first process of a spawned sample's sandbox (no sample server: ``BATON_SAMPLE_SERVER=0``, or the
server failed): PID 1 of bwrap's namespaces (``--as-pid-1``), in front of the sample as the waiting child
of ``nest.py`` is in front of a forked one (docs/evaluation.md, "The sandbox").

Usage (inside the sandbox): ``python -I spawned_main.py FOLDER_FD TIMEOUT_S``. ``FOLDER_FD`` is the
sample's folder on the host, open, and the only way to it: no host folder is mounted. ``/sample`` is a
tmpfs of the sample's disk limit (bwrap's ``--size``).

1. copy ``job.json`` and ``work/`` from the folder into ``/sample`` (``nest.copy_in``);
2. fork the sample: it closes the folder's descriptor and runs ``child_main`` on ``/sample/job.json``;
   this process is not dumpable, so the sample cannot reach the descriptor through ``/proc/1/fd``
   either, and as PID 1 it ignores the sample's signals (the kernel drops those it has no handler for);
3. wait for the sample until its time limit, then kill every other process of the sandbox;
4. copy ``result.json`` and ``progress.json`` back into the folder (``nest.copy_out``: regular files
   only, bounded, never a link followed, never a FIFO waited on) with ``sandbox.json``, which also
   says whether the time limit was reached;
5. end as the sample did (a signal N as 128 + N, which bwrap passes on).

Standard library only and no baton imports: ``nest.py`` and ``child_main.py`` are loaded by path.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

PR_SET_DUMPABLE = 4  # linux/prctl.h


def load_file(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    folder, timeout_s = int(argv[1]), float(argv[2])
    here = Path(__file__).resolve().parent
    nest = load_file("baton_nest", here.parent / "sandbox" / "nest.py")
    child_main = load_file("child_main", here / "child_main.py")  # not the server's name: this is a fresh Python
    libc = ctypes.CDLL(None, use_errno=True)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # PID 1: no handler, so the sample cannot end it with one
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    nest.copy_in(folder, nest.SAMPLE_DIR)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(folder)
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a freshly started Python is
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(f"{nest.SAMPLE_DIR}/work")
        child_main.end_of_fork(lambda: child_main.main(["child_main.py", f"{nest.SAMPLE_DIR}/job.json"]))
    status, timed_out = wait(pid, timeout_s)
    try:
        os.kill(-1, signal.SIGKILL)  # every process of the sandbox but this one
    except ProcessLookupError:
        pass
    while True:  # reap them all: none is left to change the folder while it is copied out
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    nest.copy_out(nest.SAMPLE_DIR, folder, {"timed_out": timed_out})
    code = os.waitstatus_to_exitcode(status) if status is not None else -signal.SIGKILL
    return 128 - code if code < 0 else code


def wait(pid: int, timeout_s: float) -> tuple[int | None, bool]:
    """The sample's wait status and whether its time limit was reached (it is killed then). Orphans it left,
    this process's children now, are reaped meanwhile, as bwrap's own PID 1 would: zombies count against
    the sample's process limit."""
    deadline = time.monotonic() + timeout_s
    watch = os.pidfd_open(pid)  # readable when the sample ends
    try:
        while True:
            while (info := os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)) is not None:
                if info.si_pid == pid:
                    return os.waitpid(pid, 0)[1], False
                os.waitpid(info.si_pid, 0)
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                return os.waitpid(pid, 0)[1], True
            select.select([watch], [], [], min(left, 0.5))
    finally:
        os.close(watch)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The worker's side of the sample fork server (``fork_server_main.py``): one server per
worker process, started on the first sample, shared by the process's threads.

Why: a fresh ``python -I child_main.py`` per sample costs about 90 ms of CPU (the
interpreter's start, site, imports), and forking it from a large worker process holds the
GIL while the worker's page tables are copied. The server is small, has ``child_main``
loaded already, and forks each sample from there: the limits, the environment, the
process group and its kill are the same as a spawned child's (docs/evaluation.md).

If the server cannot be started or dies, the sample it was running is run again the old
way (``run_limited``), so a sample is never lost to the server; the next sample starts a
new server. ``BATON_SAMPLE_SERVER=0`` turns the server off (every sample spawned).

Each server has a folder of its own in the temporary folder (``baton-fork-server-<pid>-*``,
its samples' folders inside), locked by the worker process for as long as it lives. A worker
killed with 9 cannot remove it; the next server that starts, in any worker, removes every
such folder whose lock nobody holds (``prune_homes``), as ``cgroup.prune`` does for cgroups.
"""

from __future__ import annotations

import atexit
import fcntl
import itertools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from proving.processes import Finished, kill_group, minimal_env, pid_alive
from proving.sandbox import cgroup
from proving.sandbox.bwrap import EMPTY_ENV, usable_bwrap
from proving.sandbox.limits import MAX_PROCESSES
from proving.sandbox.nest import DISK_MB, SAMPLE_DIR
from proving.sandbox.policy import evaluation_confined
from proving.sandbox.sample import server_command

log = logging.getLogger(__name__)
SERVER_SCRIPT = Path(__file__).with_name("fork_server_main.py")
SERVER_ENV = "BATON_SAMPLE_SERVER"
GRACE_S = 30.0  # beyond the sample's own limit, which the server enforces: a backstop only
HOME_PREFIX = "baton-fork-server-"
LOCK = "owner.lock"  # in a server's folder, locked (flock) by the worker process that started the server


class ServerGone(RuntimeError):
    """The server could not take the sample or ended before answering."""


def enabled(env: dict[str, str] | None = None) -> bool:
    value = (os.environ if env is None else env).get(SERVER_ENV, "1").strip().lower()
    if value not in ("0", "1", "false", "true", "off", "on", "no", "yes", ""):
        raise ValueError(f"{SERVER_ENV}={value!r} must be 1 (fork samples from a server, the default) or 0 "
                         "(start a fresh Python for each sample)")
    return value not in ("0", "false", "off", "no")


_spawner: tuple[int, ThreadPoolExecutor] | None = None  # (the process it belongs to, its one thread)
_spawner_lock = threading.Lock()


def _spawn(*args: Any, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` from a thread that lives as long as this process. The confined server's bwrap
    runs with ``--die-with-parent`` (PR_SET_PDEATHSIG), which fires when the *thread* that started it ends
    (prctl(2)): started from a task's or a test's short-lived thread, the server died with that thread and
    the next sample paid for a new one."""
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner[0] != os.getpid():  # a forked worker gets a thread of its own
            _spawner = os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="baton-fork-server-start")
        executor = _spawner[1]
    return executor.submit(subprocess.Popen, *args, **kwargs).result()


def prune_homes(directory: Path | None = None) -> list[Path]:
    """Remove the folders of servers whose worker is gone (killed before it could remove its own): those whose
    worker's pid (in the name) is not alive and whose lock nobody holds (the kernel drops a lock with its last
    holder, whatever killed it; a worker of another PID namespace, whose pid means nothing here, holds its lock).
    The pid covers the moment between a folder's making and its locking. What was removed."""
    removed = []
    base = Path(directory or tempfile.gettempdir())
    try:
        entries = [e for e in os.scandir(base) if e.name.startswith(HOME_PREFIX) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return removed
    for entry in entries:
        owner = re.match(rf"{HOME_PREFIX}(\d+)-", entry.name)
        if owner is None or pid_alive(int(owner.group(1))):
            continue  # a folder of the code before, or its worker lives (or a process that took its pid)
        home = Path(entry.path)
        try:
            fd = os.open(home / LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = -1  # killed before it locked it
        except OSError:
            continue
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: a fork of its worker lives on, or a worker of another PID namespace
            finally:
                os.close(fd)
        shutil.rmtree(home, ignore_errors=True)  # links in it are removed, never followed
        removed.append(home)
    return removed


class ForkServer:
    """One running ``fork_server_main.py`` and the samples waiting on it. Confined, the server
    runs in a sandbox of its own (proving/sandbox/sample.py) and each sample it forks gets
    namespaces of its own inside it (proving/sandbox/nest.py); sample folders are made under
    ``samples``, the only host folder the server's sandbox can write."""

    def __init__(self, confined: bool = False) -> None:
        self.confined = confined
        prune_homes()
        self.home = Path(tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{os.getpid()}-"))
        self.owner = os.open(self.home / LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.owner, fcntl.LOCK_EX)  # held until this process ends (a forked worker's copy holds it too)
        self.samples: Path | None = None
        self.cgroup: cgroup.Group | None = None
        argv, env = [sys.executable, "-I", str(SERVER_SCRIPT)], minimal_env(self.home)
        if confined:
            self.samples = self.home / "samples"
            self.samples.mkdir()
            self.cgroup = cgroup.create_parent()
            argv = server_command(usable_bwrap(), self.samples, self.cgroup.parts if self.cgroup else {},
                                  SERVER_SCRIPT)
            env = EMPTY_ENV
        self.proc = _spawn(
            argv, cwd=self.home, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the worker's group is the worker's to handle, not the server's
        )
        self.ids = itertools.count(1)
        self.waiting: dict[int, Future[dict[str, Any]]] = {}
        self.pids: dict[int, int] = {}  # request id -> its child, which leads its own process group
        self.lock = threading.Lock()
        self.ready: Future[None] = Future()
        self.reader = threading.Thread(target=self._read, name="fork-server-replies", daemon=True)
        self.reader.start()
        try:
            self.ready.result(timeout=GRACE_S)  # raises ServerGone if it died while starting
        except BaseException:
            self.close()  # its folders and cgroup too
            raise

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, folder: Path, timeout_s: float, memory_mb: int, cgroups: list[str] | None = None,
            disk_mb: int = DISK_MB) -> Finished:
        """Run the sample of ``folder``/job.json (a folder under ``samples`` when confined: the sample
        then has it in a tmpfs of ``disk_mb``, and its result is copied back out when it ends)."""
        future: Future[dict[str, Any]] = Future()
        inside = SAMPLE_DIR if self.confined else str(folder)
        request = {"job": f"{inside}/job.json", "cwd": f"{inside}/work", "timeout_s": timeout_s,
                   "memory_mb": memory_mb}
        if self.confined:
            request.update(sandboxed=True, name=folder.name, cgroups=cgroups or [], max_processes=MAX_PROCESSES,
                           disk_mb=disk_mb)
        with self.lock:
            request_id = next(self.ids)
            self.waiting[request_id] = future
            line = json.dumps({"id": request_id, **request})
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(line.encode() + b"\n")
                self.proc.stdin.flush()
            except (OSError, ValueError) as exc:
                self.waiting.pop(request_id, None)
                raise ServerGone(f"the sample server did not take the sample: {exc}") from None
        try:
            reply = future.result(timeout=timeout_s + GRACE_S)
        except TimeoutError:
            # The server enforces the limit itself, so it is stuck: end it (its children die with it) rather
            # than run the sample again beside a child that may still write to the same folder.
            self.proc.kill()
            self.reader.join(timeout=5)
            raise ServerGone(f"the sample server did not answer within {timeout_s + GRACE_S:.0f} s") from None
        if "error" in reply:
            raise ServerGone(f"the sample server refused the sample: {reply['error']}")
        return Finished(int(reply["returncode"]), bool(reply["timed_out"]), str(reply.get("stdout_tail", "")),
                        str(reply.get("stderr_tail", "")))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                reply = json.loads(raw)
            except ValueError:
                log.warning("the sample server wrote a line that is not JSON: %r", raw[:200])
                continue
            if reply.get("ready"):
                self.ready.set_result(None)
                continue
            with self.lock:
                if "pid" in reply:  # started, not finished
                    self.pids[reply.get("id")] = int(reply["pid"])
                    continue
                self.pids.pop(reply.get("id"), None)
                future = self.waiting.pop(reply.get("id"), None)
            if future is not None:
                future.set_result(reply)
        gone = ServerGone(f"the sample server ended (exit status {self.proc.wait()})")
        if not self.ready.done():
            self.ready.set_exception(gone)
        with self.lock:
            waiting, self.waiting = self.waiting, {}
            running, self.pids = self.pids, {}
        for pid in running.values():
            # The server can no longer kill these groups. Safe: a pid is not given out again while its
            # group has members, and the leader itself died with the server (PR_SET_PDEATHSIG).
            kill_group(pid)
        for future in waiting.values():
            future.set_exception(gone)

    def close(self) -> None:
        """End of stdin: the server kills what still runs and exits."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.reader.join(timeout=5)
        if self.cgroup is not None:
            self.cgroup.close()
        if self.owner < 0:
            return  # closed before
        try:
            os.unlink(self.home / LOCK)
        except OSError:
            pass
        for folder in (self.samples, self.home):
            try:
                if folder is not None:
                    folder.rmdir()
            except OSError:
                pass
        os.close(self.owner)
        self.owner = -1


_server: ForkServer | None = None
_server_pid = 0  # the process that started it: a forked worker (Celery prefork) starts its own
_server_lock = threading.Lock()


@atexit.register
def _close_at_exit() -> None:
    """End this process's server with it: its folders and cgroups are removed (a worker killed
    with 9 leaves its cgroup to the next server's ``cgroup.prune``)."""
    if _server is not None and _server_pid == os.getpid():
        _server.close()


def server(confined: bool | None = None) -> ForkServer:
    """This process's server, started (or restarted, if it died or the sandbox setting changed) on first use.
    ``confined``: in the sandbox; by default as the person set it (proving/sandbox/policy.py)."""
    global _server, _server_pid
    confined = evaluation_confined() if confined is None else confined
    with _server_lock:
        mine = _server is not None and _server_pid == os.getpid()
        if not mine or not _server.alive() or _server.confined != confined:  # type: ignore[union-attr]
            if mine:
                _server.close()  # type: ignore[union-attr]
            _server, _server_pid = ForkServer(confined), os.getpid()
        return _server  # type: ignore[return-value]

"""A long-lived parent for evaluation samples: it forks one child per sample instead of
starting a fresh Python for each (``proving/evaluation/fork_server.py`` is its client;
docs/evaluation.md, "How a sample is run").

Usage: ``python -I fork_server_main.py``. Standard library only and no baton imports, like
``child_main.py``, which it loads once from beside itself: every sample's child then starts
from this process's clean memory (``child_main`` imported, no generated code ever run here),
so starting a sample costs a fork, not an interpreter start and its imports (about 90 ms of
CPU each, measured with a sample of the example).

Sandboxed (the worker starts this server in bwrap: proving/sandbox/sample.py), each child
first takes namespaces of its own (``proving/sandbox/nest.py``): it sees only its own folder
and processes, and everything it starts ends with it. A child gets what
``proving.processes.run_limited`` gives a spawned one: its own session
(process group), the sample's folder as working directory, HOME and TMPDIR, the minimal
environment, the memory, CPU, core and file-size limits, stdin from /dev/null, stdout and
stderr read here with only their last bytes kept, a wall-clock limit after which its whole
group is killed, and the group killed in any case once it ends.

Protocol, one JSON object a line. On stdin, one request per sample::

    {"id": 7, "job": "/tmp/x/job.json", "cwd": "/tmp/x/work", "timeout_s": 10, "memory_mb": 512}

sandboxed: ``{"id": 7, "job": "/sample/job.json", "cwd": "/sample/work", ..., "sandboxed": true,
"name": "baton-eval-x", "cgroups": ["memory/baton-1-7"], "max_processes": 64, "disk_mb": 1024}``
(the folder is ``/samples/<name>``, copied into a tmpfs of ``disk_mb`` at ``/sample`` and its
result copied back out by the child, which waits for the sample in a namespace of its own;
its cgroups ``/cgroup/<each>``).

On stdout: ``{"ready": true}`` once; for each request ``{"id": 7, "pid": 1234}`` when its child
has started (the child leads process group 1234), then, in the order children end::

    {"id": 7, "returncode": 0, "timed_out": false, "stdout_tail": "", "stderr_tail": ""}

A request this process cannot use gets ``{"id": ..., "error": "..."}``. End of stdin (the
worker exited or was killed) kills every child's group and ends this process. If this process
is killed, each child is killed too (``PR_SET_PDEATHSIG``), and the client kills the groups of
the children it was waiting for.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import json
import os
import selectors
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POLL_S = 0.05  # how often deadlines are looked at while children run
COPY_OUT_S = 5.0  # after the time limit's kill, what a sandboxed child may take to copy its sample's result out
NICE = 5  # added to the worker's: on a busy machine the workers' own threads, then the samples
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(server_pid: int) -> None:
    """SIGKILL this child if the server dies first (Linux; elsewhere the client's group kill remains)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != server_pid:  # it died before the line above: nobody would tell us
        os._exit(1)


def load_file(name: str, path: Path) -> Any:
    """A module of baton's that is standard library only, by its path (``-I``: no folder of baton is on sys.path)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it is executed
    spec.loader.exec_module(module)
    return module


@dataclass
class Child:
    request_id: Any
    pid: int
    deadline: float
    streams: dict[int, Any] = field(default_factory=dict)  # read fd -> its processes.TailBuffer
    open_fds: set[int] = field(default_factory=set)  # closed at end of file, or when the child is finished
    timed_out: bool = False


def become_sample(request: dict[str, Any], out_w: int, err_w: int, server: Server) -> None:
    """In the forked child: take the sample's place and run it; never returns."""
    server.child_main.end_of_fork(lambda: _sample(request, out_w, err_w, server))


def _sample(request: dict[str, Any], out_w: int, err_w: int, server: Server) -> int:
    signal.set_wakeup_fd(-1)  # the server's wakeup pipe is closed below; its fd number may be reused
    die_with_parent(server.pid)
    # Its own process group, to be killed as a whole, in the server's session: a session of its own would
    # be an autogroup of its own, with a full share of the CPU whatever its niceness (proving/priority.py).
    server_group = os.getpgid(server.pid)
    os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.closerange(3, 1 << 16)  # the server's pipes to the worker and the other children's
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    if request.get("sandboxed"):  # namespaces of its own, inside the server's sandbox
        server.nest.enter(str(request["name"]), list(request.get("cgroups", [])), int(request["max_processes"]),
                          int(request.get("disk_mb", server.nest.DISK_MB)), server_group)
    cwd = Path(request["cwd"])
    sample_env = server.processes.minimal_env(cwd)  # PATH and LANG of the server's own minimal environment
    os.environ.clear()
    os.environ.update(sample_env)
    os.chdir(cwd)
    server.processes.limiter(float(request["timeout_s"]), int(request["memory_mb"]))()
    return server.child_main.main(["child_main.py", request["job"]])


class Server:
    def __init__(self) -> None:
        here = Path(__file__).resolve().parent
        self.child_main = load_file("baton_child_main", here / "child_main.py")
        self.processes = load_file("baton_processes", here.parent / "processes.py")
        self.nest = load_file("baton_nest", here.parent / "sandbox" / "nest.py")
        self.pid = os.getpid()
        self.children: dict[int, Child] = {}  # pid -> child
        self.selector = selectors.DefaultSelector()
        self.inbox = bytearray()
        self.stdin_open = True
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
        signal.set_wakeup_fd(wake_w)
        self.selector.register(wake_r, selectors.EVENT_READ, "wake")
        self.selector.register(0, selectors.EVENT_READ, "requests")

    def reply(self, message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def serve(self) -> None:
        gc.collect()
        gc.freeze()  # what is here now is shared with every child, untouched by their collections
        self.reply({"ready": True})
        while self.stdin_open or self.children:
            for key, _ in self.selector.select(timeout=POLL_S if self.children else None):
                if key.data == "wake":
                    self._drain_wakeups(key.fd)
                elif key.data == "requests":
                    self._read_requests()
                else:
                    self._read_stream(key.fd, key.data)
            self._reap()
        self.selector.close()

    def _drain_wakeups(self, fd: int) -> None:
        try:
            while os.read(fd, 512):
                pass
        except BlockingIOError:
            pass

    def _read_requests(self) -> None:
        chunk = os.read(0, 65536)
        if not chunk:  # the worker is gone: nothing more will be asked, and nobody waits for these
            self.stdin_open = False
            self.selector.unregister(0)
            for child in self.children.values():
                child.deadline, child.timed_out = 0.0, True  # killed at once, copied out by nobody
            return
        self.inbox += chunk
        while b"\n" in self.inbox:
            line, _, rest = bytes(self.inbox).partition(b"\n")
            self.inbox = bytearray(rest)
            if line.strip():
                self._start(line)

    def _start(self, line: bytes) -> None:
        try:
            request = json.loads(line)
            request_id = request["id"]
            timeout_s = float(request["timeout_s"])
            for key in ("job", "cwd", "memory_mb"):
                request[key]  # noqa: B018 - each must be there
        except (ValueError, KeyError, TypeError) as exc:
            self.reply({"id": None, "error": f"bad request {line[:200]!r}: {exc!r}"})
            return
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            become_sample(request, out_w, err_w, self)
        os.close(out_w)
        os.close(err_w)
        self.reply({"id": request_id, "pid": pid})
        child = Child(request_id, pid, time.monotonic() + timeout_s)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
            child.streams[fd] = self.processes.TailBuffer()
            child.open_fds.add(fd)
            self.selector.register(fd, selectors.EVENT_READ, child)
        self.children[pid] = child

    def _read_stream(self, fd: int, child: Child) -> None:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if chunk:
            child.streams[fd].keep(chunk)
        else:
            self._close(child, fd)

    def _close(self, child: Child, fd: int) -> None:
        self.selector.unregister(fd)
        os.close(fd)
        child.open_fds.discard(fd)

    def _reap(self) -> None:
        now = time.monotonic()
        for pid, child in list(self.children.items()):
            # Not reaped yet (WNOWAIT): the pid, and so the group id, stays ours until the group is killed.
            ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            if not ended and now < child.deadline:
                continue
            if not ended and not child.timed_out:
                # The time limit: the sample's group is killed. A sandboxed child has left that group (nest.py)
                # and now copies out what its sample left, within a bound of its own; one that is not ends now.
                child.timed_out, child.deadline = True, now + COPY_OUT_S
                _kill_group(pid)
                continue
            if not ended:
                _kill(pid)  # the copy took too long
            _kill_group(pid)  # to end what the child left running
            _, status = os.waitpid(pid, 0)
            del self.children[pid]
            self._finish(child, os.waitstatus_to_exitcode(status))

    def _finish(self, child: Child, returncode: int) -> None:
        for fd in list(child.open_fds):
            # What is left in the pipe; a grandchild that escaped the group may hold it open: not waited for.
            try:
                while chunk := os.read(fd, 65536):
                    child.streams[fd].keep(chunk)
            except BlockingIOError:
                pass
            self._close(child, fd)
        out, err = child.streams.values()  # in the order registered: stdout, then stderr
        if self.stdin_open:
            self.reply({"id": child.request_id, "returncode": returncode, "timed_out": child.timed_out,
                        "stdout_tail": out.text(), "stderr_tail": err.text()})


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # The server leads its own session: its autogroup takes its niceness too, so samples rank below every worker.
    load_file("baton_priority", Path(__file__).resolve().parent.parent / "priority.py").lower_priority(NICE)
    Server().serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())

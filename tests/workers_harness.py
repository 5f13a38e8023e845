"""Real processes for the worker tests: a private Redis (a real ``redis-server`` or a
fakeredis ``TcpFakeServer`` in a thread), Celery workers, Flower, and helpers that wait
on ``run.json`` and read every agent's log.

Every process is started in its own session and stopped by its pid (its process
group), never by name.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import Celery

import workers.tasks as worker_tasks
from agents.disk import AgentDisk
from scenarios.run import copy_scenario
from tests.agent_run import EXAMPLE, assert_log_consistent
from tests.load import load_scaled  # noqa: F401 - also the harness's to its users
from tests.suite_gates import suite_gates
from workers.app import make_app
from workers.loop import Task, resume, start

REPO = Path(__file__).resolve().parent.parent
SCENARIO = EXAMPLE.name  # refund_desk
ROLES = ("init", "execute")
QUEUES = ("init", "execute", "compaction")
WAIT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = WAIT_S, interval: float = 0.05,
             diagnose: Callable[[], str] | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``diagnose()`` on time-out, which is
    ``timeout`` scaled by the load when the wait starts (``load_scaled``)."""
    timeout = load_scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = diagnose() if diagnose else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{detail}")
        time.sleep(interval)


# ---- processes ------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc, no psutil)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@dataclass
class Proc:
    """One process we started, in its own session (so its group id is its pid)."""

    name: str
    popen: subprocess.Popen
    logfile: Path
    expected_exit: bool = False  # set when the test stops or kills it on purpose

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            text = self.logfile.read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:]

    def kill9(self) -> None:
        """SIGKILL the whole process group: the worker, its pool children, anything they ran."""
        self.expected_exit = True
        pids = [self.pid, *descendants(self.pid)]
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        signal_pids(pids, signal.SIGKILL)  # descendants that left the group (own sessions)
        self.popen.wait(timeout=30)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (a Celery warm shutdown), then SIGKILL the group if it does not exit."""
        self.expected_exit = True
        if self.running():
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        if self.running():
            self.kill9()
        else:  # the leader is gone; end any straggler of its group
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def spawn(name: str, argv: list[str], env: dict[str, str], logdir: Path) -> Proc:
    logfile = logdir / f"{name}.log"
    with logfile.open("ab") as out:
        popen = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    return Proc(name, popen, logfile)


def refused_worker(role: str, setting: str, value: str) -> str:
    """What ``baton worker ROLE`` said when it refused to start with ``setting=value`` (its exit code 2 is
    asserted); its broker is unreachable, since a worker checks its settings before it connects."""
    env = {**os.environ, setting: value, "BATON_BROKER_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([sys.executable, "-m", "baton", "worker", role], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    return said


# ---- brokers ------------------------------------------------------------------------------


class RedisServer:
    """A private ``redis-server`` on a free port, no persistence; stopped by its pid."""

    def __init__(self, workdir: Path):
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not on PATH")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        workdir.mkdir(parents=True, exist_ok=True)
        self.proc = spawn("redis-server", [binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                           "--save", "", "--appendonly", "no", "--dir", str(workdir)],
                          {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, workdir)
        client = redis.Redis.from_url(self.url)
        try:
            wait_for(lambda: self._ping(client), "redis-server to answer PING", timeout=20,
                     diagnose=self.proc.tail)
        except BaseException:
            self.stop()
            raise
        finally:
            client.close()

    def _ping(self, client: redis.Redis) -> bool:
        if not self.proc.running():
            raise AssertionError(f"redis-server exited: {self.proc.tail()}")
        try:
            return bool(client.ping())
        except redis.exceptions.ConnectionError:
            return False

    def stop(self) -> None:
        self.proc.stop(grace=5)


class FakeRedisServer:
    """fakeredis' TCP server (``TcpFakeServer``, server_type="redis") in a thread of this process."""

    def __init__(self):
        from fakeredis import TcpFakeServer

        self.server = TcpFakeServer(("127.0.0.1", 0), server_type="redis")
        self.port = self.server.server_address[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.thread = threading.Thread(target=self.server.serve_forever, name="fakeredis", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


# ---- a scenario run on real workers -------------------------------------------------------


# Recovery bounds scaled down for tests that kill or freeze workers on purpose (a Cluster's default): a dead
# worker's agent lock lives 5 s rather than 15, and the reaper re-dispatches a run idle for 7 s (rather than 20),
# scanning every second.
# The same code paths run; each such test waits seconds for them rather than half a minute. The defaults
# themselves are checked where they are read (tests/test_reaper.py, tests/test_lock_ttl.py).
FAST_RECOVERY = {"BATON_LOCK_TTL_S": "5", "BATON_STALL_AFTER_S": "7", "BATON_REAPER_INTERVAL_S": "1"}


def child_env(broker_url: str, scenarios: Path) -> dict[str, str]:
    """The whole environment of every worker, Flower and client process: nothing inherited
    except PATH/HOME/locale, and never an Anthropic key (the simulated model runs)."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "/usr/bin:/bin")]),
        "HOME": os.environ.get("HOME", str(scenarios)),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "BATON_BROKER_URL": broker_url,
        "BATON_SCENARIOS_DIR": str(scenarios),
        "BATON_PROFILE": "demo",
        # The gates the suite runs (tests/conftest.py) reach the workers too: their environment is made here.
        **suite_gates(),
    }


@dataclass
class Cluster:
    """A scenario folder, a broker URL, and the workers (and Flower) of one test."""

    broker_url: str
    base: Path
    # The recovery bounds its processes run with: the tests' short ones unless told otherwise (the chaos bench
    # passes only those given on its command line, so that by default its workers run with the defaults).
    recovery: dict[str, str] = field(default_factory=lambda: dict(FAST_RECOVERY))
    procs: list[Proc] = field(default_factory=list)
    _client: Celery | None = None

    def __post_init__(self) -> None:
        self.scenarios = self.base / "scenarios"
        self.logs = self.base / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.scenarios.mkdir(parents=True, exist_ok=True)
        copy_scenario(EXAMPLE, self.root)
        self.env = child_env(self.broker_url, self.scenarios) | self.recovery

    @property
    def root(self) -> Path:
        return self.scenarios / SCENARIO

    # -- processes

    def worker(self, queue: str, name: str | None = None, pool: str = "prefork") -> Proc:
        """A real Celery worker on one queue, concurrency 1, events on."""
        name = name or queue
        argv = [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-Q", queue, "-c", "1",
                "-n", f"{name}@%h", "-P", pool, "-E", "--without-mingle", "--loglevel=INFO"]
        proc = spawn(f"worker-{name}", argv, self.env, self.logs)
        self.procs.append(proc)
        return proc

    def workers(self, suffix: str = "", pool: str = "prefork") -> dict[str, Proc]:
        return {q: self.worker(q, f"{q}{suffix}", pool) for q in QUEUES}

    def flower(self, port: int, basic_auth: str) -> Proc:
        argv = [sys.executable, "-m", "celery", "-A", "workers.app", "flower", f"--port={port}",
                "--address=127.0.0.1", f"--basic_auth={basic_auth}"]
        proc = spawn("flower", argv, self.env, self.logs)
        self.procs.append(proc)
        return proc

    @property
    def client(self) -> Celery:
        """A Celery app of this test's broker, in the test process (sends tasks, reads results)."""
        if self._client is None:
            self._client = make_app(self.broker_url)
        return self._client

    def dispatch(self, tasks: list[Task]) -> None:
        """``workers.tasks.dispatch`` itself, sending through this test's broker."""
        module_app = worker_tasks.app
        worker_tasks.app = self.client
        try:
            worker_tasks.dispatch(tasks)
        finally:
            worker_tasks.app = module_app

    def start_run(self) -> None:
        self.dispatch(start(self.root, auto_approve=True))

    def resume_run(self) -> None:
        self.dispatch(resume(self.root))

    def stop_all(self) -> None:
        """Finalizer: SIGKILL every process group we started (the broker is thrown away next)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        for proc in self.procs:
            if proc.running():
                proc.kill9()
            else:
                proc.stop()  # reaps it and ends any straggler of its group

    # -- disk

    def run_json(self) -> dict[str, Any] | None:
        path = self.root / "run.json"
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None  # not written yet (writes are atomic renames, so never torn)

    def log_records(self, role: str) -> list[dict[str, Any]]:
        """The raw records of an agent's log, ignoring a torn last line."""
        path = self.root / "state" / role / "log.jsonl"
        out = []
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            return out
        for line in lines:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break
        return out

    def assistant_steps(self, role: str) -> list[int]:
        return [r["step"] for r in self.log_records(role) if r["kind"] == "assistant"]

    def pending_tool_step(self, role: str, tool: str | None = None) -> dict[str, Any] | None:
        """The last assistant record if its tool calls have no results record yet (a step in its tools)."""
        records = self.log_records(role)
        steps = [r for r in records if r["kind"] == "assistant"]
        if not steps:
            return None
        last = steps[-1]
        uses = [b for b in last["message"].get("content", []) if isinstance(b, dict) and b.get("type") == "tool_use"]
        if not uses or any(r["kind"] == "results" and r["step"] == last["step"] for r in records):
            return None
        if tool is not None and tool not in {u["name"] for u in uses}:
            return None
        return last

    def wait_run(
        self, predicate: Callable[[dict[str, Any]], bool], what: str, timeout: float = WAIT_S
    ) -> dict[str, Any]:
        def check():
            self.check_workers()
            record = self.run_json()
            return record if record is not None and predicate(record) else None

        return wait_for(check, what, timeout, interval=0.1, diagnose=self.diagnose)

    def wait_done(self, timeout: float = WAIT_S) -> dict[str, Any]:
        record = self.wait_run(lambda r: r["phase"] == "done" or r["status"] == "error", "run.json phase done", timeout)
        assert record["status"] == "succeeded", f"{record}\n{self.diagnose()}"
        return record

    def check_workers(self) -> None:
        dead = [p for p in self.procs if p.name.startswith("worker-") and not p.running() and not p.expected_exit]
        if dead:
            raise AssertionError(f"worker {dead[0].name} exited with {dead[0].popen.returncode}\n{self.diagnose()}")

    def diagnose(self) -> str:
        parts = [f"run.json: {self.run_json()}"]
        for role in ROLES:
            steps = self.assistant_steps(role)
            parts.append(f"{role}: {len(steps)} assistant records, last step {steps[-1] if steps else None}")
        for proc in self.procs:
            parts.append(
                f"--- {proc.name} (pid {proc.pid}, {'running' if proc.running() else proc.popen.returncode})\n"
                f"{proc.tail(2500)}"
            )
        return "\n".join(parts)

    def agent_logs(self) -> dict[str, AgentDisk]:
        """Every agent's log, each checked with ``assert_log_consistent``."""
        return {role: assert_log_consistent(self.root, role) for role in ROLES}


def freeze_inside_tool(
    cluster: Cluster, worker: Proc, tool: str | None = None, after_steps: int = 0
) -> tuple[int, dict]:
    """Wait until ``worker``'s pool process runs the tools of a persisted response (of ``tool``,
    once the execute log has ``after_steps`` steps) and SIGSTOP it there: the response is on
    disk, its results are not, and nothing moves until the test kills or resumes it."""

    def inside() -> dict | None:
        if len(cluster.assistant_steps("execute")) < after_steps:
            return None
        return cluster.pending_tool_step("execute", tool)

    def frozen():
        cluster.check_workers()
        if inside() is None:
            return None
        pool = children(worker.pid)
        if len(pool) != 1:
            return None
        signal_pids(pool, signal.SIGSTOP)
        step = inside()  # still inside, now that it cannot move?
        if step is None:
            signal_pids(pool, signal.SIGCONT)
            return None
        return pool[0], step

    return wait_for(
        frozen, f"the execute worker inside a {tool or 'tool'} step", diagnose=cluster.diagnose, interval=0.01
    )


def assert_each_response_once(disks: dict[str, AgentDisk]) -> None:
    """No step number twice, and no persisted response's request fingerprint twice."""
    for role, disk in disks.items():
        steps = [r.step for r in disk.steps]
        assert len(steps) == len(set(steps)), f"{role}: a step was answered twice: {steps}"
        requests = [r.request for r in disk.steps]
        assert all(requests), f"{role}: an assistant record has no request fingerprint"
        repeated = sorted({q for q in requests if requests.count(q) > 1})
        assert not repeated, f"{role}: a persisted response's request was sent again: {repeated}"
        # One "step" event per persisted response (a crash between the two may leave one out).
        model_calls = [e.step for e in disk.events if e.kind == "step"]
        assert len(model_calls) == len(set(model_calls)) and set(model_calls) <= set(steps), (
            f"{role}: step events {model_calls} do not match the log's steps {steps}")

"""Chaos suite (issue 11): the example scenario run distributed while faults are injected, then
each copy compared by what it means with an undisturbed run of the same code (issue 38).

    .venv/bin/python bench/chaos.py --faults 30 --seed 1 [--keep] [--out docs/benchmarks.md]
    .venv/bin/python bench/chaos.py --compare /tmp/baton-chaos-XXXX   (compare and audit a kept run again)

What it does, all on real processes that this script starts and stops by pid (never by name):

1. A private ``redis-server`` on a free port (``tests.workers_harness.RedisServer``).
2. **Undisturbed run**: ``--scenarios`` copies of ``scenarios/refund_desk`` (``chaos_01``...)
   run to ``done`` on two Celery workers per queue (``init``, ``execute``, ``compaction``,
   ``-c 1`` each, ``BATON_PROFILE=demo``), started with ``workers.loop.start(root,
   auto_approve=True)`` and ``workers.tasks.dispatch``. The copies carry the same names as in
   the chaos run because the name is in the agents' prompts (and so in every request
   fingerprint and tool-use id).
3. **Chaos run**: the same copies in another folder, on six fresh workers. Each copy gets its
   share of the ``--faults`` faults; the kinds are dealt from the seed (every kind once before
   any twice), and each fault fires when its copy's logs reach a fraction of the undisturbed
   run's size drawn from the seed, once the copy's previous fault has been recovered from:

   - ``pool_kill``: kill -9 of the pool child running one of the copy's tasks (and of anything it runs);
   - ``worker_kill``: kill -9 of that worker's whole process group; a replacement worker of the
     same queue starts after a delay drawn from the seed (a supervisor's restart policy);
   - ``sigstop``: SIGSTOP of the pool child, or of the whole worker, for a time drawn from the seed
     (half the time longer than the agents' 15 s lock TTL), then SIGCONT;
   - ``redeliver``: a duplicate ``baton.step`` for the step due now (one time in three for an
     older step);
   - ``dup_compaction``: a ``baton.compaction`` with the agent's current last step as after_step.

   Which process runs which task comes from the workers' own task events (``-E``): a
   ``task-started`` names the worker, and each worker has one pool child. A victim is frozen
   with SIGSTOP first and the fault goes ahead only if it is still inside that task, so a
   kill lands inside a task, never between two. A process fault takes a worker only while
   the other worker of its queue is healthy, unless it has waited SOLE_WORKER_AFTER_S for that.
4. Nobody runs ``baton resume``: a copy recovers by itself or not at all. A copy that makes
   no progress for ``--give-up`` seconds while no worker runs any task (and no SIGCONT or
   restart is still to come) is given up and reported as not done; ``--limit`` bounds the rest.
5. **Measures**: recovery = time from the fault to the copy's next progress (a change of its
   run.json, logs or events); duplicates and lost records read from the logs; each copy
   compared with its undisturbed twin by what it means (bench/chaos_compare.py): run.json,
   the reports' figures and findings, handoffs, samples, the agents' logs and events, and the
   gates' Inspect logs read for their samples' messages and scores, with clocks, durations,
   usage and cost, Inspect's log names and the copies' folders set aside, and the fencing
   bookkeeping and bytecode caches not compared. A difference a fault explains is listed
   with its reason and not counted.

The last line is ``faults N, recovered N, duplicates D, lost L, differing files F, recovery
median Xs max Ys`` (with ``(and E differences a fault explains)`` after F when there are
any); the exit status is 1 when anything was duplicated, lost or differs unexplained, a copy
is not ``done``/``succeeded``, or fewer faults than asked could be injected.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import redis  # noqa: E402
from chaos_compare import ROLES, audit, compare, raw_jsonl  # noqa: E402
from common import DEFAULT_DOC, REPO_ROOT, md_table, write_section  # noqa: E402  (puts the repo on sys.path)

from agents.disk import AgentDisk  # noqa: E402
from scenarios.run import copy_scenario  # noqa: E402
from tests.workers_harness import (  # noqa: E402
    QUEUES,
    Cluster,
    Proc,
    RedisServer,
    children,
    descendants,
    signal_pids,
)
from workers.app import make_app  # noqa: E402
from workers.lock_ttl import LOCK_TTL_ENV, lock_ttl_s  # noqa: E402
from workers.loop import SCENARIOS_ENV, Task, start  # noqa: E402

SOURCE = REPO_ROOT / "scenarios" / "refund_desk"
KINDS = ("pool_kill", "worker_kill", "sigstop", "redeliver", "dup_compaction")
PROCESS_KINDS = {"pool_kill", "worker_kill", "sigstop"}
FAULTS_PER_SCENARIO = 5
WORKERS_PER_QUEUE = 2
POLL_S = 0.1
# Triggers lie in the first LAST_TRIGGER of a run's log, leaving the rest for the faults that wait for a victim.
LAST_TRIGGER = 0.5
# A process fault takes a worker only while another worker of its queue is healthy; after waiting this long for
# such a moment (other copies' faults hold the queue's other worker) it takes the copy's worker anyway.
SOLE_WORKER_AFTER_S = 3.0
RESTART_DELAY = (1.0, 4.0)  # from a whole worker's kill -9 to its replacement's start (s)
SHORT_HOLD = (2.0, 8.0)  # SIGSTOP durations (s)
RUN_CODE = ("workers", "agents", "proving", "scenarios", "context")  # the packages the workers run


def long_hold(lock_ttl: float) -> tuple[float, float]:
    """SIGSTOP durations that outlast the agent lock's TTL; the longest (35 s at the default 15 s) also outlast
    the reaper's stall bound plus a scan, so another worker takes the step over while the frozen one sleeps."""
    return lock_ttl + 2.0, 2 * lock_ttl + 5.0


# ---- which worker runs what: the workers' own task events --------------------------------------


@dataclass
class Running:
    uuid: str
    name: str
    args: list[Any]

    @property
    def scenario(self) -> str | None:
        return self.args[0] if self.args else None


class TaskWatch:
    """Follows ``task-received``/``task-started``/terminal events: which task each worker runs now."""

    TERMINAL = {"task-succeeded", "task-failed", "task-retried", "task-rejected", "task-revoked"}

    def __init__(self, url: str):
        self.app = make_app(url)
        self.lock = threading.Lock()
        self.received: dict[str, tuple[str, list[Any]]] = {}
        self.running: dict[str, str] = {}  # node name (before "@") -> task uuid
        self.receiver = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="task-events", daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _run(self) -> None:
        with self.app.connection() as conn:
            self.receiver = self.app.events.Receiver(conn, handlers={"*": self._on_event})
            self.ready.set()
            try:
                self.receiver.capture(limit=None, timeout=None, wakeup=False)
            except Exception:  # the broker went away at the end of the run
                pass

    def _on_event(self, event: dict[str, Any]) -> None:
        kind, uuid = event.get("type", ""), event.get("uuid")
        node = str(event.get("hostname", "")).split("@")[0]
        with self.lock:
            if kind == "task-received":
                try:
                    args = ast.literal_eval(event.get("args") or "[]")
                except (ValueError, SyntaxError):
                    args = []
                self.received[uuid] = (str(event.get("name", "")), list(args))
            elif kind == "task-started":
                self.running[node] = uuid
            elif kind in self.TERMINAL and self.running.get(node) == uuid:
                del self.running[node]

    def current(self, node: str) -> Running | None:
        with self.lock:
            uuid = self.running.get(node)
            if uuid is None or uuid not in self.received:
                return None
            name, args = self.received[uuid]
            return Running(uuid, name, args)

    def forget(self, node: str) -> None:
        with self.lock:
            self.running.pop(node, None)

    def busy(self) -> bool:
        with self.lock:
            return bool(self.running)

    def stop(self) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.thread.join(timeout=5)


# ---- the plan drawn from the seed ---------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    scenario: str
    at_fraction: float  # fires once the copy's logs reach this fraction of the undisturbed run's size
    rng: random.Random
    injected_at: float | None = None  # time.monotonic()
    recovered_at: float | None = None
    snapshot: tuple | None = None
    detail: str = ""
    node: str | None = None
    eligible_since: float | None = None  # when its trigger was reached and its copy free of other faults
    taken_over: bool | None = None  # sigstop: did the copy move on while the process was frozen?

    @property
    def recovery_s(self) -> float | None:
        if self.injected_at is None or self.recovered_at is None:
            return None
        return self.recovered_at - self.injected_at


def plan(faults: int, seed: int, scenarios: int) -> list[Fault]:
    """The kinds dealt round-robin from shuffled decks (every kind once before any twice), spread over the
    copies; each with a trigger point and its own random stream (durations, delays, variants)."""
    rng = random.Random(seed)
    kinds: list[str] = []
    while len(kinds) < faults:
        deck = list(KINDS)
        rng.shuffle(deck)
        kinds += deck
    names = scenario_names(scenarios)
    out = []
    for i, kind in enumerate(kinds[:faults]):
        out.append(Fault(kind, names[i % len(names)], rng.uniform(0.03, LAST_TRIGGER),
                         random.Random(rng.getrandbits(64))))
    for name in names:  # each copy's faults in trigger order
        mine = sorted((f for f in out if f.scenario == name), key=lambda f: f.at_fraction)
        for j, f in enumerate(mine):  # spread them: the j-th of n no earlier than j/n of the way
            f.at_fraction = max(f.at_fraction, LAST_TRIGGER * j / max(1, len(mine)))
    return sorted(out, key=lambda f: (f.scenario, f.at_fraction))


def scenario_names(count: int) -> list[str]:
    return [f"chaos_{i:02d}" for i in range(1, count + 1)]


# ---- the scenario folders -----------------------------------------------------------------------


def run_state(root: Path) -> dict[str, Any]:
    try:
        return json.loads((root / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def finished(state: dict[str, Any]) -> bool:
    return state.get("phase") == "done" or state.get("status") == "error"


def signature(root: Path) -> tuple:
    """What changes whenever the copy makes progress: run.json, and each agent's log and events."""
    out = []
    for rel in ("run.json", "state/init/log.jsonl", "state/execute/log.jsonl", "state/init/events.jsonl",
                "state/execute/events.jsonl"):
        try:
            st = (root / rel).stat()
            out.append((st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def log_bytes(root: Path) -> int:
    total = 0
    for role in ROLES:
        try:
            total += (root / "state" / role / "log.jsonl").stat().st_size
        except OSError:
            pass
    return total


class Fleet:
    """A ``Cluster`` (tests/workers_harness.py) over one scenarios folder, with two workers per queue."""

    def __init__(self, url: str, base: Path, names: list[str], extra_env: dict[str, str]):
        # Only the settings given (extra_env): not the tests' short recovery bounds. The Cluster also copies
        # refund_desk into the folder; that copy is not run.
        self.cluster = Cluster(url, base, recovery=extra_env)
        self.roots = [copy_scenario(SOURCE, self.cluster.scenarios / name) for name in names]
        self.nodes: dict[str, tuple[str, Proc]] = {}  # node name -> (queue, process)
        self.started = 0
        for queue in QUEUES:
            for _ in range(WORKERS_PER_QUEUE):
                self.add_worker(queue)

    def add_worker(self, queue: str) -> str:
        self.started += 1
        node = f"{queue}-{self.started}"
        self.nodes[node] = (queue, self.cluster.worker(queue, node))
        return node

    def start_runs(self) -> None:
        os.environ[SCENARIOS_ENV] = str(self.cluster.scenarios)  # read by dispatch for the tasks' readable names
        for root in self.roots:
            self.cluster.dispatch(start(root, auto_approve=True))

    def stop(self, grace: float = 20.0) -> None:
        """SIGCONT everything (a frozen process would ignore SIGTERM), then a warm shutdown of each worker."""
        for _, proc in self.nodes.values():
            if proc.running():
                try:
                    os.killpg(proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        for _, proc in self.nodes.values():
            proc.stop(grace=grace)
        self.cluster.stop_all()

    def worker_logs(self) -> str:
        return "\n".join(f"--- {p.name} (pid {p.pid})\n{p.tail(1500)}" for _, p in self.nodes.values())


def run_undisturbed(url: str, base: Path, names: list[str], env: dict[str, str],
                    bound: float) -> tuple[list[Path], float]:
    fleet = Fleet(url, base, names, env)
    try:
        t0 = time.monotonic()
        fleet.start_runs()
        while time.monotonic() - t0 < bound:
            if all(finished(run_state(r)) for r in fleet.roots):
                break
            time.sleep(POLL_S)
        wall = time.monotonic() - t0
        time.sleep(1.0)  # anything still in flight (a last phase task) lands before the workers stop
    finally:
        fleet.stop()
    bad = [f"{r.name}: {run_state(r)}" for r in fleet.roots if not done_ok(run_state(r))]
    if bad:
        raise SystemExit("the undisturbed run did not finish (no fault was injected):\n" + "\n".join(bad))
    return fleet.roots, wall


def done_ok(state: dict[str, Any]) -> bool:
    return state.get("phase") == "done" and state.get("status") == "succeeded"


# ---- the chaos run ------------------------------------------------------------------------------


@dataclass
class Pending:
    """Something to do later: SIGCONT a frozen process (group) or start a replacement worker."""

    due: float
    action: str  # "cont" | "cont_group" | "restart"
    pid: int = 0
    queue: str = ""
    node: str = ""
    fault: Fault | None = None


@dataclass
class ChaosRun:
    fleet: Fleet
    watch: TaskWatch
    faults: list[Fault]
    sizes: dict[str, int]  # undisturbed log bytes per copy
    give_up: float
    deadline: float
    lock_ttl: float  # the workers' agent lock TTL (BATON_LOCK_TTL_S)
    log: list[str] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    unhealthy: set[str] = field(default_factory=set)  # nodes frozen, dead or not yet replaced
    given_up: dict[str, str] = field(default_factory=dict)
    crashed: list[str] = field(default_factory=list)  # workers that exited without a fault of ours
    ended: set[str] = field(default_factory=set)  # copies seen finished

    def say(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {text}"
        self.log.append(line)
        print(line, flush=True)

    def roots(self) -> dict[str, Path]:
        return {r.name: r for r in self.fleet.roots}

    # -- faults

    def victim(self, fault: Fault) -> tuple[str, int, Running] | None:
        """A healthy worker now running a task of the fault's copy, its pool child frozen (SIGSTOP) and
        checked to be still inside that task; None when there is none at this moment."""
        waited = time.monotonic() - (fault.eligible_since or time.monotonic())
        for node, (queue, proc) in sorted(self.fleet.nodes.items()):
            if node in self.unhealthy or not proc.running():
                continue
            others = [n for n, (q, p) in self.fleet.nodes.items() if q == queue and n != node]
            healthy = [n for n in others if n not in self.unhealthy and self.fleet.nodes[n][1].running()]
            if not healthy and waited < SOLE_WORKER_AFTER_S:
                continue  # keep one healthy worker per queue
            now = self.watch.current(node)
            if now is None or now.scenario != fault.scenario:
                continue
            pool = children(proc.pid)
            if len(pool) != 1:
                continue
            signal_pids(pool, signal.SIGSTOP)
            time.sleep(0.2)  # events already on their way (the task just ended?) arrive
            again = self.watch.current(node)
            if again is None or again.uuid != now.uuid:
                signal_pids(pool, signal.SIGCONT)
                continue
            return node, pool[0], now
        return None

    def inject(self, fault: Fault, root: Path) -> bool:
        rng = fault.rng
        if fault.kind in PROCESS_KINDS:
            found = self.victim(fault)
            if found is None:
                return False
            node, child, task = found
            queue, proc = self.fleet.nodes[node]
            fault.node = node
            fault.snapshot = signature(root)
            fault.injected_at = time.monotonic()
            what = f"{task.name.split(' ')[0]} {task.args}"
            if fault.kind == "pool_kill":
                signal_pids([child, *descendants(child)], signal.SIGKILL)
                fault.detail = f"kill -9 pool child {child} of {node} inside {what}"
            elif fault.kind == "worker_kill":
                delay = rng.uniform(*RESTART_DELAY)
                self.unhealthy.add(node)
                self.watch.forget(node)
                proc.kill9()
                self.pending.append(Pending(time.monotonic() + delay, "restart", queue=queue, node=node))
                fault.detail = (f"kill -9 worker {node} (pid {proc.pid} and children) inside {what}; "
                                f"replaced after {delay:.1f}s")
            else:
                longer = rng.random() < 0.5
                hold = rng.uniform(*long_hold(self.lock_ttl)) if longer else rng.uniform(*SHORT_HOLD)
                whole = rng.random() < 0.5
                self.unhealthy.add(node)
                until = time.monotonic() + hold
                if whole:
                    os.killpg(proc.pid, signal.SIGSTOP)
                    self.pending.append(Pending(until, "cont_group", proc.pid, node=node, fault=fault))
                else:
                    self.pending.append(Pending(until, "cont", child, node=node, fault=fault))
                fault.detail = (f"SIGSTOP {'worker ' + node if whole else f'pool child {child} of {node}'} for "
                                f"{hold:.1f}s inside {what}")
            return True
        state = run_state(root)
        agent = {"designing": "init", "executing": "execute"}.get(state.get("phase", ""))
        if agent is None:
            return False
        disk = AgentDisk.load(root, agent)  # reads only (a claim would take the lease)
        last = disk.last_step()
        if fault.kind == "redeliver":
            due = disk.due()
            number = rng.randint(1, due - 1) if due > 1 and rng.random() < 1 / 3 else due
            task = Task(kind="step", scenario=root.name, agent=agent, number=number)
            age = "old" if number < due else "due"
            fault.detail = f"duplicate baton.step {root.name}/{agent} step {number} ({age})"
        else:
            if last is None:
                return False
            task = Task(kind="compaction", scenario=root.name, agent=agent, number=last.step)
            fault.detail = f"duplicate baton.compaction {root.name}/{agent} after_step {last.step} (its last step)"
        fault.snapshot = signature(root)
        fault.injected_at = time.monotonic()
        self.fleet.cluster.dispatch([task])
        return True

    def run_pending(self) -> None:
        now = time.monotonic()
        for item in [p for p in self.pending if p.due <= now]:
            self.pending.remove(item)
            if item.action == "restart":
                node = self.fleet.add_worker(item.queue)
                self.fleet.nodes.pop(item.node, None)
                self.unhealthy.discard(item.node)
                self.say(f"started {node} to replace {item.node}")
            else:
                try:
                    if item.action == "cont_group":
                        os.killpg(item.pid, signal.SIGCONT)
                    else:
                        os.kill(item.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                self.unhealthy.discard(item.node)
                moved = item.fault is not None and item.fault.recovered_at is not None
                if item.fault is not None:
                    item.fault.taken_over = moved
                self.say(f"SIGCONT {item.node}" + ("; its copy moved on meanwhile (another worker took over)"
                                                   if moved else "; its copy waited for it"))

    # -- the loop

    def loop(self) -> None:
        roots = self.roots()
        last_progress = {name: (time.monotonic(), signature(root)) for name, root in roots.items()}
        while True:
            now = time.monotonic()
            # A copy's stall clock runs only while no worker runs a task and no SIGCONT or restart is to come: a
            # gate can run for minutes without writing a log line, and the copies share the workers, so one copy's
            # steps may wait in the queue behind another's proving for as long (issue 38's run on a loaded machine).
            busy = self.watch.busy() or any(p.due > now for p in self.pending)
            for name, root in roots.items():
                sig = signature(root)
                if sig != last_progress[name][1] or busy:
                    last_progress[name] = (now, sig)
            for fault in self.faults:
                if fault.injected_at is not None and fault.recovered_at is None:
                    if signature(roots[fault.scenario]) != fault.snapshot:
                        fault.recovered_at = now
                        self.say(f"{fault.scenario} moved on {fault.recovery_s:.1f}s after {fault.kind}")
            self.run_pending()  # after the progress check: a SIGCONT tells whether the copy moved on while frozen
            self.check_workers()
            for name, root in roots.items():
                if name not in self.ended and finished(state := run_state(root)):
                    self.ended.add(name)
                    left = sum(f.scenario == name and f.injected_at is None for f in self.faults)
                    self.say(f"{name} finished: {state.get('phase')}/{state.get('status')}"
                             + (f"; {left} of its faults never found a moment to be injected" if left else ""))
            for name, root in roots.items():
                if name in self.given_up or finished(run_state(root)):
                    continue
                mine = [f for f in self.faults if f.scenario == name]
                if any(f.injected_at is not None and f.recovered_at is None for f in mine):
                    continue  # one fault at a time per copy: its recovery is measured alone
                todo = [f for f in mine if f.injected_at is None]
                if todo and log_bytes(root) >= todo[0].at_fraction * self.sizes[name]:
                    todo[0].eligible_since = todo[0].eligible_since or now
                    if self.inject(todo[0], root):
                        self.say(f"fault {self.faults.index(todo[0]) + 1}: {todo[0].kind}: {todo[0].detail}")
            for name in roots:
                if (name not in self.given_up and not finished(run_state(roots[name]))
                        and now - last_progress[name][0] > self.give_up):
                    self.given_up[name] = f"no progress for {self.give_up:.0f}s while the workers were idle"
                    self.say(f"giving up on {name}: {self.given_up[name]}; {run_state(roots[name])}")
            open_ = [n for n, r in roots.items() if n not in self.given_up and not finished(run_state(r))]
            if not open_ and not self.pending:
                return
            if now > self.deadline:
                for name in open_:
                    self.given_up[name] = "the run's time limit was reached"
                self.say(f"time limit reached with {open_} unfinished")
                return
            time.sleep(POLL_S)

    def check_workers(self) -> None:
        """A worker that exited although no fault of ours ended it is a finding of its own."""
        seen = {line.split(" ", 1)[0] for line in self.crashed}
        for node, (_, proc) in self.fleet.nodes.items():
            if node not in seen and not proc.running() and not proc.expected_exit:
                self.crashed.append(f"{node} exited by itself with code {proc.popen.returncode}: "
                                    + proc.tail(600).replace("\n", " | "))
                self.say(f"worker {node} exited by itself (code {proc.popen.returncode}); see {proc.logfile}")

    def settle(self, quiet: float = 2.0, bound: float = 30.0) -> None:
        """Wait until no worker has run a task for ``quiet`` seconds (a late duplicate or a woken writer)."""
        t0 = time.monotonic()
        calm_since = time.monotonic()
        while time.monotonic() - t0 < bound:
            if self.watch.busy():
                calm_since = time.monotonic()
            elif time.monotonic() - calm_since >= quiet:
                return
            time.sleep(POLL_S)


# ---- report -------------------------------------------------------------------------------------


def summarize(faults: list[Fault], copies: list[Path], twins: dict[str, Path], given_up: dict[str, str],
              requested: int, crashed: list[str] | None = None) -> dict[str, Any]:
    injected = sorted((f for f in faults if f.injected_at is not None), key=lambda f: f.injected_at)
    states = {r.name: run_state(r) for r in copies}
    recovered = [f for f in injected if f.recovered_at is not None and done_ok(states[f.scenario])]
    dups: list[str] = []
    lost: list[str] = []
    diffs: list[tuple[str, str]] = []
    expected: list[tuple[str, str]] = []
    for root in copies:
        d, lo = audit(root, twins[root.name])
        dups += d
        lost += lo
        proving_faulted = any(f.scenario == root.name and re.search(r"inside baton\.(proving|gate) ", f.detail)
                              for f in injected)  # a proving task, or one of the gates' own tasks
        found = compare(twins[root.name], root, proving_faulted)
        diffs += found.diffs
        expected += found.expected
    times = [f.recovery_s for f in recovered]
    kills = [f.recovery_s for f in recovered if f.kind == "worker_kill"]
    not_done = {name: (given_up.get(name) or "") + f" (phase {s.get('phase')}, status {s.get('status')})"
                for name, s in states.items() if not done_ok(s)}
    by_kind = {}
    for k in KINDS:
        mine = [f.recovery_s for f in recovered if f.kind == k]
        by_kind[k] = {"injected": sum(f.kind == k for f in injected), "recovered": len(mine),
                      "asked": sum(f.kind == k for f in faults), "median": statistics.median(mine) if mine else None,
                      "max": max(mine) if mine else None}
    discarded = sum(len(raw_jsonl(p)) for root in copies for p in root.rglob("discarded.jsonl"))
    return {
        "requested": requested, "injected": len(injected), "recovered": len(recovered), "by_kind": by_kind,
        "median": statistics.median(times) if times else None, "max": max(times) if times else None,
        "kill_median": statistics.median(kills) if kills else None, "kill_max": max(kills) if kills else None,
        "duplicates": dups, "lost": lost, "diffs": diffs, "expected": expected, "not_done": not_done,
        "crashed": list(crashed or []),
        "discarded": discarded,
        "faults": [f"{f.scenario}: {f.kind}: {f.detail}; next progress after {secs(f.recovery_s)} s" for f in injected],
        "stops": sum(f.kind == "sigstop" for f in injected),
        "taken_over": sum(bool(f.taken_over) for f in injected),
        "unrecovered": [f"{f.scenario} {f.kind}: {f.detail}" for f in injected if f not in recovered],
        "never_fired": [f"{f.scenario} {f.kind} (at {f.at_fraction:.0%} of the run)" for f in faults
                        if f.injected_at is None],
    }


def secs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def final_line(s: dict[str, Any]) -> str:
    return (f"faults {s['injected']}, recovered {s['recovered']}, duplicates {len(s['duplicates'])}, "
            f"lost {len(s['lost'])}, differing files {len(s['diffs'])}{explained(s)}, "
            f"recovery median {secs(s['median'])}s max {secs(s['max'])}s")


def explained(s: dict[str, Any]) -> str:
    return f" (and {len(s['expected'])} differences a fault explains)" if s.get("expected") else ""


def failed(s: dict[str, Any]) -> bool:
    return bool(s["duplicates"] or s["lost"] or s["diffs"] or s["not_done"] or s["crashed"]
                or s["injected"] < s["requested"])


def details(s: dict[str, Any], limit: int = 30) -> str:
    parts = []
    for title, items in (("code changed while the bench ran, so the two runs may not have run the same code "
                          "(a difference may come from that)", s.get("code_changed") or []),
                         ("not done", [f"{k}: {v}" for k, v in s["not_done"].items()]),
                         ("workers that exited by themselves", s["crashed"]),
                         ("faults never injected", s["never_fired"]), ("faults not recovered from", s["unrecovered"]),
                         ("duplicates", s["duplicates"]), ("lost", s["lost"]),
                         ("differing files (first differing key)", [f"{f}: {k}" for f, k in s["diffs"]]),
                         ("differences a fault explains (not counted)", [f"{f}: {k}" for f, k in s["expected"]])):
        if items:
            shown = items[:limit] + ([f"... and {len(items) - limit} more"] if len(items) > limit else [])
            parts.append(f"{title} ({len(items)}):\n" + "\n".join(f"  - {x}" for x in shown))
    return "\n".join(parts)


def code_version() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *RUN_CODE], cwd=REPO_ROOT, capture_output=True,
                               text=True).stdout
        changed = [line[3:] for line in dirty.splitlines() if line.strip()]
        return head + (f" plus uncommitted changes to {', '.join(changed)}" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def code_files() -> dict[str, bytes]:
    """A digest of every file of the code the runs execute: the workers of the two runs start minutes apart and
    import the checkout as it is then, so a change in between (on a machine others edit) makes them differ."""
    out = {}
    for package in RUN_CODE:
        for path in sorted((REPO_ROOT / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                try:
                    out[str(path.relative_to(REPO_ROOT))] = hashlib.sha1(path.read_bytes()).digest()
                except OSError:
                    pass
    return out


def changed_code(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def render(s: dict[str, Any], res: dict[str, Any]) -> str:
    rows = [[k, v["injected"], v["recovered"], secs(v["median"]), secs(v["max"])] for k, v in s["by_kind"].items()]
    rows.append(["**all**", s["injected"], s["recovered"], secs(s["median"]), secs(s["max"])])
    table = md_table(["fault kind", "injected", "recovered", "recovery median s", "recovery max s"], rows, "lrrrr")
    summary = md_table(["measure", "value"], [
        ["faults asked / injected / recovered", f"{s['requested']} / {s['injected']} / {s['recovered']}"],
        ["recovery median / max (all faults)", f"{secs(s['median'])} s / {secs(s['max'])} s"],
        ["recovery median / max (whole-worker kills)", f"{secs(s['kill_median'])} s / {secs(s['kill_max'])} s"],
        ["SIGSTOPs during which the copy moved on (another worker took over)", f"{s['taken_over']} of {s['stops']}"],
        ["stale writes discarded by fencing (`discarded.jsonl` records)", s["discarded"]],
        ["duplicates", len(s["duplicates"])], ["lost records", len(s["lost"])],
        ["differing files", len(s["diffs"])],
        ["differences a fault explains (listed, not counted)", len(s["expected"])],
        ["copies done and succeeded", f"{res['copies'] - len(s['not_done'])} of {res['copies']}"],
        ["wall time (whole script)", f"{res['wall']:.0f} s (undisturbed run {res['baseline_wall']:.0f} s, "
                                     f"chaos run {res['chaos_wall']:.0f} s)"],
        ["seed", res["seed"]],
        ["code", res["code"] + (f"; changed while the bench ran: {', '.join(s['code_changed'])}"
                                if s.get("code_changed") else "")],
        ["reaper settings passed to the workers", res["reaper_env"] or "none (the workers' defaults)"],
    ], "ll")
    text = [
        "## Chaos", "",
        f"`{res['command']}`", "",
        f"{res['copies']} copies of `refund_desk` run at once on {WORKERS_PER_QUEUE} workers per queue "
        "(`init`, `execute`, `compaction`, prefork `-c 1`, `BATON_PROFILE=demo`, simulated model) on a private "
        "`redis-server`, while faults are injected on a schedule drawn from the seed: kill -9 of the pool child "
        f"running a copy's task, kill -9 of its whole worker (a replacement starts {RESTART_DELAY[0]:g}-"
        f"{RESTART_DELAY[1]:g} s later), SIGSTOP of the "
        f"pool child or of the whole worker for {SHORT_HOLD[0]:g}-{SHORT_HOLD[1]:g} s or "
        f"{long_hold(res['lock_ttl'])[0]:g}-{long_hold(res['lock_ttl'])[1]:g} s "
        f"(the agent lock's TTL is {res['lock_ttl']:g} s), a duplicate "
        "`baton.step` (the step due, or an older one), a duplicate `baton.compaction` after the agent's last step. "
        "No `baton resume`: the system recovers by itself or not at all. Then each copy is compared with an "
        "undisturbed run of the same copies by the same code, by what the run means (`bench/chaos_compare.py`): "
        "run.json, the reports' figures, findings and quality, the handoffs, samples, traces, tools and design, the "
        "agents' logs (every message) and events, the gates' runs files, and each Inspect log read for its task "
        "arguments, samples' messages and scores and metrics, matched by gate rather than by its file name. Set "
        "aside: timestamps, durations, usage and cost, what the clocks quoted in tool results change (file mtimes, "
        "request fingerprints, token estimates) as two undisturbed runs differ there and nowhere else, the copy's "
        "folder quoted in a file (solver.json's log path), Inspect's log names (a start time and a random id); not "
        "compared: the fencing bookkeeping (`lease.json`, `phase.lease.json`, `discarded.jsonl`, `.lock`, `.tmp` "
        "files) and bytecode caches (`__pycache__`). A difference a fault explains (a gate's earlier attempt left "
        "its Inspect log when a fault hit the copy's proving task) is listed with its reason, not counted. "
        "Duplicates: two log "
        "records with one seq, two assistant or results records for one step, two step events for one step, two "
        "compaction records for one after_step. Lost: gaps in seq, an answered step without its step event, a "
        "file with fewer records than undisturbed. "
        "*Recovery*: from the fault to the copy's next progress (a change of its run.json, logs or events); a "
        "fault counts as recovered when that came and the copy ended `done`/`succeeded`.", "",
        table, "", summary, "",
    ]
    if failed(s):
        text += ["What went wrong:", "", "```", details(s, limit=15), "```", ""]
    text += ["<details><summary>The faults, in the order they were injected</summary>", "",
             *[f"{i}. {line}" for i, line in enumerate(s["faults"], 1)], "", "</details>", "",
             f"Last line: `{final_line(s)}`"]
    return "\n".join(text)


# ---- main ---------------------------------------------------------------------------------------


def chaos(faults: int, seed: int, scenarios: int | None = None, workdir: Path | None = None,
          give_up: float = 90.0, limit: float = 900.0, reaper_env: dict[str, str] | None = None,
          quiet: bool = False) -> dict[str, Any]:
    """The whole bench: undisturbed run, chaos run, comparison. Returns the summary (see ``summarize``)."""
    count = scenarios or max(1, -(-faults // FAULTS_PER_SCENARIO))
    names = scenario_names(count)
    faults_plan = plan(faults, seed, count)
    own = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="baton-chaos-")) if own else workdir
    env = dict(reaper_env or {})
    res: dict[str, Any] = {"copies": count, "seed": seed, "code": code_version(), "lock_ttl": lock_ttl_s(env),
                           "reaper_env": " ".join(f"{k}={v}" for k, v in env.items())}
    t0 = time.monotonic()
    server = RedisServer(workdir / "redis")
    fleet = watch = None
    keep = True  # an exception keeps the folder (workers' logs) for a look
    code_before = code_files()
    try:
        if not quiet:
            print(f"redis {server.url}; workdir {workdir}; {count} copies; plan: "
                  + ", ".join(f"{f.scenario}:{f.kind}@{f.at_fraction:.0%}" for f in faults_plan), flush=True)
        twins, res["baseline_wall"] = run_undisturbed(server.url, workdir / "undisturbed", names, env, limit)
        twins_by = {t.name: t for t in twins}
        if not quiet:
            print(f"undisturbed run: {count} copies done in {res['baseline_wall']:.1f}s", flush=True)
        redis.Redis.from_url(server.url).flushdb()
        watch = TaskWatch(server.url)
        fleet = Fleet(server.url, workdir / "chaos", names, env)
        sizes = {t.name: log_bytes(t) for t in twins}
        run = ChaosRun(fleet, watch, faults_plan, sizes, give_up, time.monotonic() + limit, res["lock_ttl"])
        if quiet:
            run.say = lambda text: run.log.append(text)  # type: ignore[method-assign]
        t1 = time.monotonic()
        fleet.start_runs()
        run.loop()
        res["chaos_wall"] = time.monotonic() - t1
        run.settle()
        fleet.stop()
        fleet = None
        res["log"] = run.log
        run.check_workers()
        summary = summarize(faults_plan, run.fleet.roots, twins_by, run.given_up, faults, run.crashed)
        summary["code_changed"] = changed_code(code_before, code_files())
        keep = failed(summary)
    finally:
        if fleet is not None:
            fleet.stop(grace=5)
        if watch is not None:
            watch.stop()
        server.stop()
        if own and (keep or os.environ.get("BATON_CHAOS_KEEP")):
            print(f"kept {workdir} (workers' logs, both runs' scenario copies)", flush=True)
        elif own:
            shutil.rmtree(workdir, ignore_errors=True)
    res["wall"] = time.monotonic() - t0
    return summary | {"res": res}


def compare_kept(workdir: Path) -> int:
    """The comparison and audit of a kept run's copies, again (the faults are not known here: an extra attempt of a
    gate counts as a difference). Exit status 1 when anything differs, was duplicated or lost."""
    copies = sorted((workdir / "chaos" / "scenarios").glob("chaos_*"))
    if not copies:
        raise SystemExit(f"{workdir} holds no kept chaos run (no chaos/scenarios/chaos_* folder)")
    bad = 0
    for root in copies:
        twin = workdir / "undisturbed" / "scenarios" / root.name
        dups, lost = audit(root, twin)
        found = compare(twin, root)
        state = run_state(root)
        print(f"{root.name}: {state.get('phase')}/{state.get('status')} (undisturbed {run_state(twin).get('status')}); "
              f"duplicates {len(dups)}, lost {len(lost)}, differing files {len(found.diffs)}")
        for line in [*dups, *lost, *(f"{f}: {k}" for f, k in found.diffs)]:
            print(f"  - {line}")
        bad += len(dups) + len(lost) + len(found.diffs)
    return 1 if bad else 0


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--faults", type=int, default=30, help="faults to inject in all")
    ap.add_argument("--seed", type=int, default=1, help="seed of the schedule (kinds, trigger points, durations)")
    ap.add_argument("--scenarios", type=int, default=None,
                    help=f"copies run at once (default: one per {FAULTS_PER_SCENARIO} faults)")
    ap.add_argument("--give-up", type=float, default=90.0,
                    help="a copy with no progress for this long (s) is reported not done")
    ap.add_argument("--limit", type=float, default=900.0, help="time limit of the chaos run (s)")
    ap.add_argument("--stall-after", type=float, default=None,
                    help="pass BATON_STALL_AFTER_S to the workers (default: not set, the workers' own default)")
    ap.add_argument("--reaper-interval", type=float, default=None,
                    help="pass BATON_REAPER_INTERVAL_S to the workers (default: not set)")
    ap.add_argument("--lock-ttl", type=float, default=None,
                    help=f"pass {LOCK_TTL_ENV} to the workers (default: not set, the workers' own default)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, scenario copies)")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"write the Chaos section of this file (e.g. {DEFAULT_DOC.relative_to(REPO_ROOT)})")
    ap.add_argument("--compare", type=Path, default=None, metavar="KEPT",
                    help="run nothing: compare and audit again the copies of a folder an earlier run kept (--keep)")
    args = ap.parse_args(argv)
    if args.compare is not None:
        return compare_kept(args.compare)
    signal.signal(signal.SIGTERM, _interrupted)  # a kill of this script still stops every process it started
    env = {}
    if args.stall_after is not None:
        env["BATON_STALL_AFTER_S"] = f"{args.stall_after:g}"
    if args.reaper_interval is not None:
        env["BATON_REAPER_INTERVAL_S"] = f"{args.reaper_interval:g}"
    if args.lock_ttl is not None:
        env[LOCK_TTL_ENV] = f"{args.lock_ttl:g}"
    if args.keep:
        os.environ["BATON_CHAOS_KEEP"] = "1"
    s = chaos(args.faults, args.seed, args.scenarios, None, args.give_up, args.limit, env)
    res = s["res"]
    cmd = f".venv/bin/python bench/chaos.py --faults {args.faults} --seed {args.seed}"
    for flag, value in (("--scenarios", args.scenarios), ("--stall-after", args.stall_after),
                        ("--reaper-interval", args.reaper_interval), ("--lock-ttl", args.lock_ttl)):
        if value is not None:
            cmd += f" {flag} {value:g}"
    if args.out:
        cmd += f" --out {os.path.relpath(args.out, REPO_ROOT)}"
    res["command"] = cmd
    print()
    for kind, v in s["by_kind"].items():
        print(f"{kind:15} injected {v['injected']}/{v['asked']}, recovered {v['recovered']}")
    print(f"SIGSTOPs during which the copy moved on: {s['taken_over']} of {s['stops']}")
    print(f"whole-worker kills: recovery median {secs(s['kill_median'])}s max {secs(s['kill_max'])}s")
    print(f"wall {res['wall']:.0f}s (undisturbed {res['baseline_wall']:.0f}s, chaos {res['chaos_wall']:.0f}s); "
          f"code {res['code']}")
    text = details(s)
    if text:
        print(text)
    if args.out:
        write_section(args.out, "chaos", render(s, res))
        print(f"wrote {args.out}")
    print(final_line(s))
    return 1 if failed(s) else 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # the finally blocks above stopped every process this script started
        raise SystemExit(130) from None

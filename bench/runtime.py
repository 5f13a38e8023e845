"""Runtime benchmark on real Redis: step dispatch latency, compaction wait behind a
backlog, and steps per second of the real workers on the simulated model.

    .venv/bin/python bench/runtime.py [--out docs/benchmarks.md] [--quick]

Run on demand, never from the tests. The script starts its own private
``redis-server`` on a free port (no persistence) and its own Celery worker
processes, each in a new session, and stops exactly those (by pid / process
group) when it is done or interrupted. No ``ANTHROPIC_API_KEY`` reaches the
workers: every agent step uses the offline simulated model.

1. **Dispatch**: a no-op probe task on the ``execute`` queue, one prefork worker
   ``-c 1`` with the configuration of ``workers.app.make_app`` (acks late,
   prefetch 1, events, priorities). The probe records ``time.time()`` when its
   body starts next to the enqueue timestamp it was given. *idle*: the driver
   sends one probe at a time to an idle worker. *chained*: each probe enqueues
   its successor at the end of its body, as ``baton.step`` does, so the
   latency includes finishing the task (result, ack) before the next starts.
2. **Compaction wait**: 200 probe steps of 50 ms CPU each are queued on
   ``execute`` (priority 5); while they drain, compaction probes are sent at
   regular intervals and their enqueue-to-start wait is recorded, with (a) the
   dedicated ``compaction`` queue and worker (baton's layout), (b) one shared
   queue and worker, compaction at priority 0, (c) the same without priority
   (compaction at 5, like the steps), (d) one worker consuming both queues.
3. **Throughput**: copies of ``scenarios/refund_desk`` run end to end
   (``workers.loop.start(root, auto_approve=True)`` sent with
   ``workers.tasks.dispatch``) by the three real workers
   (``celery -A workers.app worker -Q <role> -c 1 -n <role>@%h -E``,
   ``BATON_PROFILE=demo``); steps = assistant records in ``state/*/log.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_DOC, REPO_ROOT, md_table, write_section

from agents.disk import AgentDisk
from agents.events import CompactionRecord, StepEvent
from scenarios.run import copy_scenario

PROBE_URL_ENV = "BATON_BENCH_BROKER_URL"  # set only in the probe workers' environment
CELERY = REPO_ROOT / ".venv" / "bin" / "celery"
SCENARIO_SOURCE = REPO_ROOT / "scenarios" / "refund_desk"
STEP_PRIORITY = 5  # workers.app.STEP_PRIORITY / COMPACTION_PRIORITY (not imported here: see main)
COMPACTION_PRIORITY = 0

# What the workers run (scenario folders' own run outputs excluded: another session may run one).
CODE_FILES = (("workers", "**/*.py"), ("agents", "**/*.py"), ("context", "**/*.py"), ("scenarios", "*.py"),
              ("prompts", "**/*.md"))
CODE_DIRS = tuple(dict.fromkeys(d for d, _ in CODE_FILES))
TASK_DONE = re.compile(r"Task baton\.\w+\[[^\]]+\] succeeded in ([0-9.eE+-]+)s")
TASK_RETRY = re.compile(r"Task baton\.\w+\[[^\]]+\] retry:")

TARGET_DISPATCH_P50_MS = 10.0
TARGET_COMPACTION_P99_MS = 100.0


# ---- the probe tasks (imported by the probe workers as bench.runtime:probe_app) ----------


def build_probe_app(url: str):
    """``workers.app.make_app(url)`` plus three probe tasks; same queues and settings as baton."""
    import redis

    from workers.app import make_app

    app = make_app(url)

    @cache
    def store() -> redis.Redis:
        return redis.Redis.from_url(url)

    @app.task(name="bench.probe.mark")
    def mark(enqueued: float, key: str, chain: int = 0, queue: str = "execute", priority: int = STEP_PRIORITY) -> None:
        started = time.time()
        store().rpush(key, json.dumps([enqueued, started]))
        if chain > 0:  # enqueue the successor at the end of the body, as baton.step does
            app.send_task("bench.probe.mark", args=[time.time(), key, chain - 1, queue, priority],
                          queue=queue, priority=priority)

    @app.task(name="bench.probe.spin")
    def spin(ms: float) -> None:
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:  # CPU, like a simulated-model step (a real model call would sleep)
            pass

    return app


probe_app = build_probe_app(os.environ[PROBE_URL_ENV]) if os.environ.get(PROBE_URL_ENV) else None


# ---- processes -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_stats() -> dict[int, list[str]]:
    """Every live process's /proc/PID/stat fields after the command name (Linux): [0] state,
    [1] parent, [2] process group, [11:15] utime, stime, cutime, cstime in clock ticks."""
    stats = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            stats[int(stat.parent.name)] = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError, ValueError):
            continue
    return stats


def process_groups() -> dict[int, list[int]]:
    """Every live process group's pids, by group id, from one scan of /proc (Linux)."""
    groups: dict[int, list[int]] = {}
    for pid, fields in proc_stats().items():
        if len(fields) > 2:
            groups.setdefault(int(fields[2]), []).append(pid)
    return groups


def group_members(pgid: int) -> list[int]:
    """Pids whose process group is ``pgid`` (Linux /proc)."""
    return process_groups().get(pgid, [])


class Procs:
    """Processes this script started, each leading its own session; stopped by pid only."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.live: list[tuple[subprocess.Popen, Path]] = []
        self.started = 0

    def start(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
        self.started += 1
        log = self.workdir / f"{self.started:02d}-{name}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.live.append((proc, log))
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 20.0) -> None:
        """SIGTERM to the process we started (a Celery worker finishes its task: warm shutdown),
        SIGKILL to its process group (its own session) if it does not exit in time, then to any
        member of that group still alive, by pid."""
        if proc.poll() is None:
            try:
                proc.terminate()
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the leader is alive: the group is ours
                proc.wait(5)
        for pid in group_members(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.live = [(p, log) for p, log in self.live if p is not proc]

    def stop_all(self, keep: subprocess.Popen | None = None) -> None:
        for proc, _ in list(self.live):
            if proc is not keep:
                self.stop(proc)

    def log_path(self, proc: subprocess.Popen) -> Path:
        return next(log for p, log in self.live if p is proc)

    def log_tail(self, proc: subprocess.Popen, lines: int = 30) -> str:
        for p, log in self.live:
            if p is proc:
                return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        return ""


def start_redis(procs: Procs) -> tuple[subprocess.Popen, str]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server not found on PATH (apt-get install redis-server)")
    port = free_port()
    proc = procs.start("redis", [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                 "--dir", str(procs.workdir), "--loglevel", "warning"], dict(os.environ))
    import redis

    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            return proc, f"redis://127.0.0.1:{port}/0"
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    raise SystemExit(f"redis-server did not start:\n{procs.log_tail(proc)}")


def worker_env(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "CELERY_BROKER_URL")}
    env.update(BATON_BROKER_URL=url, PYTHONPATH=str(REPO_ROOT), **extra)
    return env


def start_workers(procs: Procs, app, specs: list[tuple[str, str, int]], env: dict[str, str], app_ref: str,
                  extra: tuple[str, ...] = ()) -> list:
    """``specs``: (node name, queues, concurrency). Returns once every node answers a ping."""
    started = {}
    for node, queues, conc in specs:
        cmd = [str(CELERY), "-A", app_ref, "worker", "-Q", queues, "-c", str(conc), "-n", f"{node}@%h", "-E", *extra]
        started[node] = procs.start(f"worker-{node}", cmd, env)
    wait_for_workers(app, started, procs)
    return list(started.values())


def wait_for_workers(app, workers: dict[str, subprocess.Popen], procs: Procs) -> None:
    """Return once every worker (by node name, the part before "@") answers a ping; exit if one dies."""
    deadline = time.time() + 90
    while time.time() < deadline:
        for node, proc in workers.items():
            if proc.poll() is not None:
                raise SystemExit(f"the {node} worker exited (rc {proc.returncode}):\n{procs.log_tail(proc)}")
        replies = app.control.ping(timeout=0.5) or []
        if set(workers) <= {name.split("@", 1)[0] for reply in replies for name in reply}:
            return
    raise SystemExit("workers did not answer a ping within 90 s:\n"
                     + "\n".join(procs.log_tail(p) for p in workers.values()))


# ---- statistics ----------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if q < 100 else max(values)


def summary(ms: list[float]) -> dict[str, float]:
    return {"n": len(ms), "p50": statistics.median(ms), "p90": pct(ms, 90), "p99": pct(ms, 99),
            "max": max(ms), "mean": statistics.fmean(ms)}


def collect(client, key: str, count: int, timeout: float) -> list[float]:
    """Wait for ``count`` [enqueued, started] records; returns the waits in ms."""
    waits, deadline = [], time.time() + timeout
    while len(waits) < count:
        left = deadline - time.time()
        if left <= 0:
            break
        item = client.blpop([key], timeout=max(1, int(left)))
        if item is None:
            continue
        enq, started = json.loads(item[1])
        waits.append((started - enq) * 1000)
    return waits


def cpu_sample() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs, from /proc/stat (Linux)."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def cpu_busy(a: tuple[float, float], b: tuple[float, float]) -> float | None:
    return None if b[1] <= a[1] else 100 * (b[0] - a[0]) / (b[1] - a[1])


def code_version() -> str:
    """The commit, whether the code the workers run differs from it, and a hash of that code
    (to notice an edit during the run)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(p for d, pattern in CODE_FILES for p in (REPO_ROOT / d).glob(pattern)):
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *CODE_DIRS], cwd=REPO_ROOT,
                               check=False).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", False
    return f"commit {commit}{' + uncommitted changes' if dirty else ''} (code hash {digest.hexdigest()[:10]})"


def machine_busy(seconds: float) -> float:
    a = cpu_sample()
    time.sleep(seconds)
    return cpu_busy(a, cpu_sample()) or 0.0


def background_load(wait_s: float, quiet_pct: float = 30.0, window_s: float = 3.0) -> str:
    """What else is running: machine CPU busy over a few seconds before the benchmark starts
    anything; waits up to ``wait_s`` for a quieter machine."""
    deadline = time.time() + wait_s
    busy = machine_busy(window_s)
    while busy > quiet_pct and time.time() < deadline:
        print(f"machine {busy:.0f}% busy before the run; waiting for < {quiet_pct:g}% "
              f"(up to {max(0, deadline - time.time()):.0f} s more)", flush=True)
        time.sleep(5)
        busy = machine_busy(window_s)
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    text = (f"before the run, with nothing of this benchmark running, the machine was {busy:.0f}% busy over "
            f"{window_s:g} s (load average {load})")
    if busy > quiet_pct:
        text += ": other processes competed for the same cores during this run, so the timings are pessimistic"
    return text + "."


# ---- 1. dispatch ---------------------------------------------------------------------------


def bench_dispatch(procs: Procs, app, client, url: str, n: int) -> dict[str, Any]:
    env = worker_env(url, **{PROBE_URL_ENV: url})
    workers = start_workers(procs, app, [("probe-execute", "execute", 1)], env, "bench.runtime:probe_app")
    try:
        for _ in range(20):  # warm up: first-task imports, connections
            app.send_task("bench.probe.mark", args=[time.time(), "bench:warm"], queue="execute", priority=STEP_PRIORITY)
        collect(client, "bench:warm", 20, 30)
        time.sleep(0.2)

        idle, send_ms = [], []
        for _ in range(n):
            t0 = time.time()
            app.send_task("bench.probe.mark", args=[t0, "bench:idle"], queue="execute", priority=STEP_PRIORITY)
            send_ms.append((time.time() - t0) * 1000)
            idle += collect(client, "bench:idle", 1, 30)
            time.sleep(0.02)  # let the worker finish the task and wait on the queue again

        t0 = time.time()
        app.send_task("bench.probe.mark", args=[t0, "bench:chain", n], queue="execute", priority=STEP_PRIORITY)
        chained = collect(client, "bench:chain", n + 1, 120)[1:]  # the first was sent by the driver
        chain_s = time.time() - t0
    finally:
        for w in workers:
            procs.stop(w)
        client.flushdb()
    if len(idle) < n or len(chained) < n:
        raise SystemExit(f"dispatch: only {len(idle)}/{n} idle and {len(chained)}/{n} chained probes started")
    return {"idle": summary(idle), "chained": summary(chained), "send": summary(send_ms),
            "chain_tasks_per_s": n / chain_s}


# ---- 2. compaction wait --------------------------------------------------------------------

LAYOUTS = {
    # name: (worker specs, compaction queue, compaction priority, description)
    "dedicated": (
        [("probe-execute", "execute", 1), ("probe-compaction", "compaction", 1)],
        "compaction",
        COMPACTION_PRIORITY,
        "dedicated `compaction` queue + its own worker (baton)",
    ),
    "dedicated-2-cores-busy": (
        [("probe-execute", "execute", 2), ("probe-compaction", "compaction", 1)],
        "compaction",
        COMPACTION_PRIORITY,
        "dedicated queue + worker, execute `-c 2` (both cores busy with steps)",
    ),
    "shared-priority": (
        [("probe-execute", "execute", 1)],
        "execute",
        COMPACTION_PRIORITY,
        "one shared queue, one worker; compaction priority 0, steps 5",
    ),
    "shared-fifo": (
        [("probe-execute", "execute", 1)],
        "execute",
        STEP_PRIORITY,
        "one shared queue, one worker; no priority (compaction 5 like the steps)",
    ),
    "one-worker-two-queues": (
        [("probe-both", "execute,compaction", 1)],
        "compaction",
        COMPACTION_PRIORITY,
        "one worker `-Q execute,compaction`; compaction priority 0",
    ),
}


def bench_compaction(procs: Procs, app, client, url: str, layout: str, steps: int, step_ms: float,
                     compactions: int) -> dict[str, Any]:
    specs, queue, priority, _ = LAYOUTS[layout]
    env = worker_env(url, **{PROBE_URL_ENV: url})
    workers = start_workers(procs, app, specs, env, "bench.runtime:probe_app")
    try:
        app.send_task("bench.probe.mark", args=[time.time(), "bench:warm"], queue="execute", priority=STEP_PRIORITY)
        app.send_task("bench.probe.mark", args=[time.time(), "bench:warm"], queue=queue, priority=priority)
        collect(client, "bench:warm", 2, 30)
        time.sleep(0.2)
        t_start = time.time()
        for _ in range(steps):
            app.send_task("bench.probe.spin", args=[step_ms], queue="execute", priority=STEP_PRIORITY)
        # Spread the compactions over ~80% of the backlog's nominal drain time.
        execute_c = sum(c for _, queues, c in specs if "execute" in queues.split(","))
        interval = 0.8 * steps * step_ms / 1000 / execute_c / compactions
        for _ in range(compactions):
            time.sleep(interval)
            app.send_task("bench.probe.mark", args=[time.time(), "bench:compaction"], queue=queue, priority=priority)
        waits = collect(client, "bench:compaction", compactions, 120 + steps * step_ms / 1000)
        elapsed = time.time() - t_start
    finally:
        for w in workers:
            procs.stop(w)
        client.flushdb()
    if len(waits) < compactions:
        raise SystemExit(f"compaction {layout}: only {len(waits)}/{compactions} compaction probes started")
    return {"layout": layout, **summary(waits), "elapsed_s": elapsed}


# ---- 3. throughput -------------------------------------------------------------------------


def copy_scenarios(dest: Path, count: int) -> list[Path]:
    return [copy_scenario(SCENARIO_SOURCE, dest / f"refund_desk_{i:02d}") for i in range(1, count + 1)]


def count_run(roots: list[Path]) -> dict[str, int]:
    steps = compactions = 0
    for root in roots:
        for role in ("init", "execute"):
            disk = AgentDisk.load(root, role)
            steps += len(disk.steps)
            compactions += sum(isinstance(e, CompactionRecord) for e in disk.events)
    return {"steps": steps, "compactions": compactions}


def count_evaluations(roots: list[Path]) -> int:
    events = [e for root in roots for e in AgentDisk.load(root, "execute").events]
    return sum(isinstance(e, StepEvent) and "RunEvaluation" in e.tools for e in events)


def run_state(root: Path) -> dict[str, Any]:
    try:
        return json.loads((root / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def bench_throughput(procs: Procs, app, client, url: str, workdir: Path, scenarios: int, execute_c: int,
                     timeout: float, tag: str = "") -> dict[str, Any]:
    from workers.loop import start
    from workers.tasks import dispatch

    sdir = workdir / f"scenarios_{scenarios}_c{execute_c}{tag}"
    sdir.mkdir()
    roots = copy_scenarios(sdir, scenarios)
    os.environ["BATON_SCENARIOS_DIR"] = str(sdir)  # read by scenario_root in the workers; set here too
    env = worker_env(url, BATON_SCENARIOS_DIR=str(sdir), BATON_PROFILE="demo")
    specs = [("init", "init", 1), ("execute", "execute", execute_c), ("compaction", "compaction", 1)]
    # INFO only to read each task's run time ("succeeded in") and retries from the logs afterwards.
    workers = start_workers(procs, app, specs, env, "workers.app", ("--loglevel", "INFO"))
    logs = {node: procs.log_path(w) for (node, _, _), w in zip(specs, workers)}
    try:
        cpu0, t0 = cpu_sample(), time.time()
        for root in roots:
            dispatch(start(root, auto_approve=True))
        finished: dict[str, float] = {}
        while len(finished) < len(roots) and time.time() - t0 < timeout:
            for root in roots:
                if root.name not in finished:
                    state = run_state(root)
                    if state.get("phase") == "done" or state.get("status") == "error":
                        finished[root.name] = time.time() - t0
            for w in workers:
                if w.poll() is not None:
                    raise SystemExit(f"a baton worker exited (rc {w.returncode}):\n{procs.log_tail(w)}")
            time.sleep(0.1)
        wall = (max(finished.values()) if len(finished) == len(roots) else time.time() - t0)
        cpu = cpu_busy(cpu0, cpu_sample())
    finally:
        for w in workers:
            procs.stop(w)
        client.flushdb()
    counts = count_run(roots)
    states = [run_state(r) for r in roots]
    busy, tasks, times, retries = {}, {}, {}, 0
    for (node, _, conc), log in zip(specs, logs.values()):
        text = log.read_text(errors="replace")
        times[node] = [float(x) for x in TASK_DONE.findall(text)]
        tasks[node] = len(times[node])
        busy[node] = 100 * sum(times[node]) / (wall * conc)
        retries += len(TASK_RETRY.findall(text))
    evals = count_evaluations(roots)
    return {
        "busy_pct": busy, "tasks": tasks, "retries": retries, "evaluations": evals,
        "execute_task_s": sum(times["execute"]),
        # the execute worker's longest tasks, as many as there were RunEvaluation calls
        "longest_execute_s": sum(sorted(times["execute"], reverse=True)[:evals]),
        "first_task_ms": {node: 1000 * t[0] for node, t in times.items() if t},
        "task_ms": {node: 1000 * wall * conc * busy[node] / 100 / max(1, tasks[node]) for node, _, conc in specs},
        "scenarios": scenarios, "execute_c": execute_c, "wall_s": wall, **counts,
        "steps_per_s": counts["steps"] / wall, "compactions_per_s": counts["compactions"] / wall,
        "done": sum(s.get("phase") == "done" for s in states),
        "succeeded": sum(s.get("status") == "succeeded" for s in states),
        "errors": [f"{r.name}: {s.get('last_error')}" for r, s in zip(roots, states) if s.get("status") == "error"],
        "timed_out": len(finished) < len(roots),
        "first_done_s": min(finished.values()) if finished else None, "cpu_busy_pct": cpu,
    }


def bench_embedded(workdir: Path, tag: str = "") -> dict[str, Any]:
    """The same scenario in this process (no broker, no workers): the loop's own cost."""
    from workers.embedded import run_embedded
    from workers.loop import Team, start

    sdir = workdir / f"scenarios_embedded{tag}"
    sdir.mkdir()
    roots = copy_scenarios(sdir, 1)
    os.environ["BATON_SCENARIOS_DIR"] = str(sdir)
    t0 = time.time()
    run_embedded(start(roots[0], auto_approve=True), Team(roots[0], profile="demo"),
                 env={**os.environ, "BATON_SCENARIOS_DIR": str(sdir), "BATON_PROFILE": "demo"})
    wall = time.time() - t0
    counts = count_run(roots)
    return {"scenarios": 1, "execute_c": "-", "wall_s": wall, **counts, "steps_per_s": counts["steps"] / wall,
            "compactions_per_s": counts["compactions"] / wall, "done": int(run_state(roots[0]).get("phase") == "done"),
            "succeeded": int(run_state(roots[0]).get("status") == "succeeded"), "errors": [], "timed_out": False,
            "first_done_s": wall, "cpu_busy_pct": None}


# ---- report --------------------------------------------------------------------------------


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median wall time, with every run's wall time under ``walls``."""
    ordered = sorted(runs, key=lambda r: r["wall_s"])
    return {**ordered[(len(ordered) - 1) // 2], "walls": [r["wall_s"] for r in runs]}


def f1(x: float) -> str:
    return f"{x:,.1f}"


def met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def render(res: dict[str, Any], args: argparse.Namespace, cmd: str, elapsed: float) -> tuple[str, str]:
    d = res["dispatch"]
    d_rows = [[label, d[key]["n"], f1(d[key]["p50"]), f1(d[key]["p90"]), f1(d[key]["p99"]), f1(d[key]["max"])]
              for key, label in (("idle", "idle worker (driver sends one at a time)"),
                                 ("chained", "chained (each task enqueues the next at its end, like `baton.step`)"),
                                 ("send", "`send_task` call alone (producer side)"))]
    dispatch_table = md_table(["measure", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"], d_rows, "lrrrrr")

    c_rows = [[LAYOUTS[c["layout"]][3], c["n"], f1(c["p50"]), f1(c["p90"]), f1(c["p99"]), f1(c["max"])]
              for c in res["compaction"]]
    compaction_table = md_table(["layout", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"], c_rows, "lrrrrr")

    t_rows = []
    for t in res["throughput"]:
        mode = (
            "embedded (one process, no broker)" if t["execute_c"] == "-" else f"3 workers, execute -c {t['execute_c']}"
        )
        busy = (
            "-"
            if "busy_pct" not in t
            else " / ".join(f"{t['busy_pct'][n]:.0f}%" for n in ("init", "execute", "compaction"))
        )
        task_ms = (
            "-"
            if "task_ms" not in t
            else " / ".join(f"{t['task_ms'][n]:.0f}" for n in ("init", "execute", "compaction"))
        )
        t_rows.append(
            [
                t["scenarios"],
                mode,
                f"{t['done']}/{t['scenarios']}",
                t["steps"],
                t["compactions"],
                f1(t["wall_s"])
                + (
                    ""
                    if len(t["walls"]) < 2
                    else f" (median of {len(t['walls'])}: {f1(min(t['walls']))}–{f1(max(t['walls']))})"
                ),
                f1(t["steps_per_s"]),
                f"{t['compactions_per_s']:.2f}",
                busy,
                task_ms,
                t.get("retries", "-"),
                "-" if t["cpu_busy_pct"] is None else f"{t['cpu_busy_pct']:.0f}%",
            ]
        )
    throughput_table = md_table(["scenarios", "runtime", "done", "agent steps", "compactions", "wall s", "steps/s",
                                 "compactions/s", "worker busy init / execute / compaction",
                                 "mean task ms init / execute / compaction", "lock retries", "CPU busy (machine)"],
                                t_rows, "rlrrrrrrrrrr")

    ded = next(c for c in res["compaction"] if c["layout"] == "dedicated")
    target_rows = [
        ["step dispatch p50 ≤ 10 ms (chained, as in a run)", f"{f1(d['chained']['p50'])} ms",
         met(d["chained"]["p50"] <= TARGET_DISPATCH_P50_MS)],
        ["step dispatch p50 ≤ 10 ms (idle worker)", f"{f1(d['idle']['p50'])} ms",
         met(d["idle"]["p50"] <= TARGET_DISPATCH_P50_MS)],
        ["compaction wait p99 ≤ 100 ms, dedicated worker", f"{f1(ded['p99'])} ms (n={ded['n']})",
         met(ded["p99"] <= TARGET_COMPACTION_P99_MS)],
    ]
    targets = md_table(["target", "measured", "met?"], target_rows, "lll")

    problems = [e for t in res["throughput"] for e in t["errors"]]
    problems += [f"{t['scenarios']} scenario(s), execute -c {t['execute_c']}: timed out after {args.timeout:.0f} s"
                 for t in res["throughput"] if t["timed_out"]]
    cpus = os.cpu_count()
    v = res["versions"]
    setup = (
        f"Command: `{cmd}` ({elapsed:.0f} s; {cpus} CPU cores, {platform.machine()}, Linux {platform.release()}; "
        f"Python {platform.python_version()}, Celery {v['celery']}, kombu {v['kombu']}, redis-py {v['redis']}, "
        f"{v['server']}; {res['code']}). The script starts a private `redis-server` on a free port "
        "and its own worker processes, "
        "and stops them when done. Every worker is a prefork `celery worker -c 1` (unless noted) built from "
        "`workers.app.make_app`: acks late, prefetch 1, task events on, `track_started`, results in Redis, Redis "
        f"priority queues (steps 0–9, 0 highest). All processes share the same {cpus} cores; {res['background']}"
    )
    dispatch_text = (
        f"Enqueue-to-start latency of a no-op probe task on the `execute` queue ({args.dispatch} tasks each; "
        "timestamp taken before `send_task`, start = first line of the task body, in the worker's pool process; "
        "same host clock)."
    )
    compaction_text = (
        f"{args.steps} probe steps of {args.step_ms:g} ms CPU each queued on `execute` (priority 5); while they "
        f"drain (~{args.steps * args.step_ms / 1000:.0f} s with one execute process), {args.compactions} compaction "
        "probes are sent at regular intervals; wait = enqueue to start of each compaction."
    )
    throughput_text = (
        "Copies of `scenarios/refund_desk` (`refund_desk_01`…) in a temporary `BATON_SCENARIOS_DIR`, all started at "
        "once with `workers.loop.start(root, auto_approve=True)` + `workers.tasks.dispatch`, run to `phase: done` by "
        "the three real workers (`celery -A workers.app worker -Q <role> -c 1 -n <role>@%h -E`, "
        "`BATON_PROFILE=demo`, no API key: simulated model, tools and evaluations real). *agent steps* = assistant "
        "records in `state/*/log.jsonl`; *compactions* = compaction events; *wall* = first dispatch to the last "
        "`run.json` at `done`; *worker busy* = sum of the worker's task run times (Celery's `succeeded in`) / "
        "(wall x concurrency); *mean task ms* = mean run time of that worker's tasks (steps on init/execute; "
        "compactions and phase transitions on compaction); *lock retries* = tasks retried because the agent's lock "
        "was busy; *CPU busy* = all cores of the machine, from `/proc/stat`. The embedded row runs the same loop in "
        "one process for comparison."
    )
    doc = [
        "## Runtime (Celery on Redis)", "", setup, "",
        "### Step dispatch", "", dispatch_text, "", dispatch_table, "",
        f"Chained probes ran at {d['chain_tasks_per_s']:.0f} tasks/s through one `-c 1` worker.", "",
        "### Compaction wait behind a step backlog", "", compaction_text, "", compaction_table, "",
        "### Throughput on the simulated model", "", throughput_text, "", throughput_table, "",
        "### Targets", "", targets,
    ]
    if problems:
        doc += ["", f"Problems during the run: {'; '.join(problems)}."]
    notes = res.get("notes")
    if notes:
        doc += ["", notes]
    text = "\n".join(doc)
    console = f"{dispatch_table}\n\n{compaction_table}\n\n{throughput_table}\n\n{targets}"
    return text, console


def observations(res: dict[str, Any]) -> str:
    """A short paragraph derived from the numbers (no hand-written claims about this run)."""
    out = []
    by = {c["layout"]: c for c in res["compaction"]}
    if "dedicated" in by and "shared-fifo" in by:
        out.append(f"Compaction p99: dedicated {f1(by['dedicated']['p99'])} ms, shared queue with priority "
                   f"{f1(by['shared-priority']['p99'])} ms, shared queue without priority "
                   f"{f1(by['shared-fifo']['p99'])} ms. With one worker, priority 0 lets a compaction pass the "
                   "queued steps but it still waits for the step in progress (up to one step's duration; a real "
                   "step with a model call or an evaluation takes seconds to minutes), so only the dedicated "
                   "worker bounds the wait by the dispatch latency.")
    tp = {(t["scenarios"], t["execute_c"]): t for t in res["throughput"]}
    n = res["max_scenarios"]
    emb, one, many, c2 = tp.get((1, "-")), tp.get((1, 1)), tp.get((n, 1)), tp.get((n, 2))
    if emb and one:
        first = " / ".join(f"{one['first_task_ms'].get(k, 0):.0f}" for k in ("init", "execute", "compaction"))
        out.append(f"One scenario is strictly sequential (one task at a time): {f1(one['steps_per_s'])} steps/s on "
                   f"the workers vs {f1(emb['steps_per_s'])} embedded; the difference is the dispatch of every "
                   f"task, the first task of each worker process ({first} ms for init / execute / compaction: "
                   "imports and caches filled on first use) and the load of the moment.")
    if one and many:
        out.append(f"{n} scenarios at once: {f1(many['steps_per_s'])} steps/s vs {f1(one['steps_per_s'])} for one "
                   f"(x{many['steps_per_s'] / one['steps_per_s']:.1f}).")
    for t in (many, c2):
        if not t:
            continue
        busiest = max(t["busy_pct"], key=t["busy_pct"].get)
        out.append(f"With execute -c {t['execute_c']} the busiest worker is {busiest} "
                   f"({t['busy_pct'][busiest]:.0f}% of its capacity; machine CPU {t['cpu_busy_pct'] or 0:.0f}%): "
                   f"the {t['evaluations']} longest execute tasks (as many as RunEvaluation calls, each running "
                   f"every sample in a fresh Python subprocess) take {f1(t['longest_execute_s'])} s of the execute "
                   f"worker's {f1(t['execute_task_s'])} s.")
    if many and c2:
        gain = c2["steps_per_s"] / many["steps_per_s"]
        out.append(f"`execute -c 2`: {f1(c2['steps_per_s'])} steps/s, x{gain:.2f} of -c 1"
                   + (" (the two execute processes then share 2 cores with the other workers: CPU-bound)."
                      if (c2["cpu_busy_pct"] or 0) > 85 else "."))
    return " ".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"write the runtime section of this file (e.g. {DEFAULT_DOC.relative_to(REPO_ROOT)})",
    )
    ap.add_argument("--dispatch", type=int, default=500, help="probe tasks per dispatch measure")
    ap.add_argument("--steps", type=int, default=200, help="probe steps in the compaction backlog")
    ap.add_argument("--step-ms", type=float, default=50.0, help="CPU time of one probe step")
    ap.add_argument("--compactions", type=int, default=40, help="compaction probes per layout")
    ap.add_argument("--scenarios", type=int, default=20, help="scenarios run at once")
    ap.add_argument("--timeout", type=float, default=300.0, help="limit for one throughput run (s)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each one-scenario case (median kept)")
    ap.add_argument("--skip-c2", action="store_true", help="do not try execute -c 2")
    ap.add_argument("--quiet-wait", type=float, default=120.0,
                    help="wait up to this long (s) for other load on the machine to drop before starting")
    ap.add_argument("--quick", action="store_true", help="small sizes, to check the script works")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, scenario folders)")
    args = ap.parse_args(argv)
    if args.quick:
        args.dispatch, args.steps, args.compactions, args.scenarios, args.repeat = 50, 40, 8, 3, 2

    t_all = time.time()
    workdir = Path(tempfile.mkdtemp(prefix="baton-runtime-"))
    procs = Procs(workdir)
    res: dict[str, Any] = {"max_scenarios": args.scenarios}
    try:
        redis_proc, url = start_redis(procs)
        # Before any import of workers.*: workers.app builds its module-level app from this.
        os.environ["BATON_BROKER_URL"] = url
        os.environ.pop("CELERY_BROKER_URL", None)
        os.environ.pop("ANTHROPIC_API_KEY", None)
        os.environ["BATON_PROFILE"] = "demo"
        import celery
        import kombu
        import redis

        import workers.app as wapp

        assert (wapp.STEP_PRIORITY, wapp.COMPACTION_PRIORITY) == (STEP_PRIORITY, COMPACTION_PRIORITY)
        client = redis.Redis.from_url(url)
        res["versions"] = {"celery": celery.__version__, "kombu": kombu.__version__, "redis": redis.__version__,
                           "server": "Redis " + client.info("server")["redis_version"]}
        app = build_probe_app(url)

        print(f"redis {url}; workdir {workdir}", flush=True)
        res["background"] = background_load(args.quiet_wait)
        res["code"] = code_version()
        print(res["background"], flush=True)
        res["dispatch"] = bench_dispatch(procs, app, client, url, args.dispatch)
        d = res["dispatch"]
        print(f"dispatch idle p50 {f1(d['idle']['p50'])} ms p99 {f1(d['idle']['p99'])}; chained p50 "
              f"{f1(d['chained']['p50'])} p99 {f1(d['chained']['p99'])}", flush=True)

        res["compaction"] = []
        for layout in LAYOUTS:
            c = bench_compaction(procs, app, client, url, layout, args.steps, args.step_ms, args.compactions)
            res["compaction"].append(c)
            print(f"compaction {layout}: p50 {f1(c['p50'])} ms p99 {f1(c['p99'])} max {f1(c['max'])}", flush=True)

        # The one-scenario runs are short and noisy: run each --repeat times, keep the median.
        res["throughput"] = [median_run([bench_embedded(workdir, f"_{i}") for i in range(args.repeat)])]
        print(f"embedded 1 scenario: {f1(res['throughput'][0]['wall_s'])} s", flush=True)
        runs = [(1, 1), (args.scenarios, 1)] + ([] if args.skip_c2 else [(args.scenarios, 2)])
        for scenarios, conc in runs:
            k = args.repeat if scenarios == 1 else 1
            t = median_run([bench_throughput(procs, app, client, url, workdir, scenarios, conc, args.timeout, f"_{i}")
                            for i in range(k)])
            res["throughput"].append(t)
            print(f"throughput {scenarios} scenario(s) execute -c {conc}: {t['steps']} steps, {t['compactions']} "
                  f"compactions in {f1(t['wall_s'])} s = {f1(t['steps_per_s'])} steps/s; done {t['done']}; "
                  f"CPU {t['cpu_busy_pct'] or 0:.0f}%", flush=True)
        procs.stop(redis_proc)
    finally:
        procs.stop_all()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    elapsed = time.time() - t_all
    if code_version() != res["code"]:
        res["code"] += ("; **the code changed during the run** (the workers of later cases may have run the newer "
                        "version): run again")
        print("WARNING: the code under", ", ".join(CODE_DIRS), "changed during the run", flush=True)
    res["background"] += f" Load average at the end: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}."
    res["notes"] = observations(res)
    shown = ["--out", str(args.out)] if args.out else []
    cmd = ".venv/bin/python bench/runtime.py" + ("" if not shown else " " + " ".join(
        os.path.relpath(x, REPO_ROOT) if x == str(args.out) else x for x in shown))
    if args.quick:
        cmd += " --quick"
    text, console = render(res, args, cmd, elapsed)
    print()
    print(console)
    print()
    print(res["notes"])
    if args.out:
        write_section(args.out, "runtime", text)
        print(f"\nwrote {args.out} ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Scale benchmark: S copies of the example in flight at once, through the API double with a
model latency L, on the real distributed runtime.

    .venv/bin/python bench/scale.py --scenarios S --latency L [--concurrency C] [--sweep 1,10,50,100]
                                    [--json FILE] [--out docs/benchmarks.md]

Run on demand, never from the tests (a test runs a small S). The script starts its own
private ``redis-server``, ``baton fake-api --latency L`` (the simulated model behind the real
SDK, each reply held back as a real model's would be) and ``baton worker ROLE --concurrency C``
processes for each queue (``--processes``, ``--compaction-processes``; by default one per core),
each in its own session, and stops exactly those.

First one copy warms the workers up, then one runs alone: its wall time is the *ideal*
(identical copies, so the slowest single scenario alone). Then S copies start at once. Reported per run:

- **wall/ideal**: the last copy's finish against the ideal;
- **steps/s**: agent steps (assistant records) of all copies per second of wall time;
- **step wait**: from a step task's ``task-sent`` event to its ``task-started`` (median, p95,
  max), as the workers' own events say; **compaction wait**: the same for compaction tasks;
- **worker RSS**: the largest resident size of each worker process seen (sampled each second);
- **Redis**: commands processed during the run, and memory used (peak, and at the end);
- **integrity**: every copy done and succeeded, no duplicated or lost log record, step event or
  compaction (the chaos suite's audit), and every copy took the course of the copy that ran alone
  (the same steps, compactions and iteration results).

The last line is ``scale S=<S> L=<L>s: wall/ideal <x>, steps/s <y>, step wait p95 <z>s,
compaction wait p99 <w>ms, integrity ok|FAILED``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos import audit, code_version  # noqa: E402
from common import DEFAULT_DOC, REPO_ROOT, md_table, write_section  # noqa: E402
from runtime import (  # noqa: E402
    Procs,
    count_run,
    cpu_busy,
    cpu_sample,
    free_port,
    pct,
    proc_stats,
    process_groups,
    run_state,
    start_redis,
    wait_for_workers,
)

from agents.disk import AgentDisk  # noqa: E402
from agents.events import CompactionRecord, StepEvent  # noqa: E402
from proving.priority import follow_autogroup  # noqa: E402
from scenarios.run import copy_scenario  # noqa: E402

EXAMPLE = REPO_ROOT / "scenarios" / "refund_desk"
BATON = Path(sys.executable).with_name("baton")
KEY = "sk-ant-scale-bench"  # the double accepts any key; no real one is ever read
PROFILE = "demo"
# The API double and this script stand in for what a deployment does not run on its workers' machine (the
# Claude API, an observer): they run as nice as the step workers, so they never take the CPU from the
# compaction worker, which a deployment gives the best priority (``baton worker``'s WORKER_NICE). The double
# leads its own session, so its autogroup takes that niceness too (proving/priority.py); this script runs in
# the caller's session and leaves that session's group alone.
SCAFFOLD_NICE = 10
# A threads pool runs its Python on one core at a time: one process of each role per core lets a burst of one
# kind of work (all copies compacting at once) use every core (docs/deployment.md, "Sizing").
PER_CORE = min(os.cpu_count() or 1, 4)
PER_CORE_WHY = "one per core, at most 4"
BORDERLINE_SHARE = 0.02  # of the threshold: how close a compaction decision may be and still fall either way


# ---- what the workers' events say ---------------------------------------------------------------


class QueueWaits:
    """``task-sent`` to ``task-started`` per task id, from the Celery events (Flower's source)."""

    def __init__(self, url: str):
        from workers.app import make_app

        self.app = make_app(url)
        self.lock = threading.Lock()
        self.sent: dict[str, tuple[str, float]] = {}
        self.received: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.runtime: dict[str, float] = {}  # a task's own time, started to succeeded, as its worker measured it
        self.receiver: Any = None
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name="queue-waits", daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        with self.app.connection() as conn:
            self.receiver = self.app.events.Receiver(conn, handlers={"*": self._on_event})
            ready.set()
            try:
                self.receiver.capture(limit=None, timeout=None, wakeup=False)
            except Exception:  # noqa: BLE001 - the broker went away at the end
                pass

    def _on_event(self, event: dict[str, Any]) -> None:
        kind, uuid, at = event.get("type"), event.get("uuid"), float(event.get("timestamp", 0.0))
        with self.lock:
            if kind == "task-sent" and uuid not in self.sent:  # a retry is sent again: the first send counts
                self.sent[uuid] = (str(event.get("name", "")), at)
            elif kind == "task-received" and uuid not in self.received:
                self.received[uuid] = at
            elif kind == "task-started" and uuid not in self.started:
                self.started[uuid] = at
            elif kind == "task-succeeded" and "runtime" in event:
                self.runtime[uuid] = float(event["runtime"])

    def waits(self, prefix: str, until: str = "started") -> list[float]:
        """Seconds from ``task-sent`` to ``until`` (``received``: the worker's consumer took the message;
        ``started``: a pool thread began it) per task whose name starts with ``prefix``."""
        ends = self.started if until == "started" else self.received
        with self.lock:
            return [ends[u] - at for u, (name, at) in self.sent.items() if name.startswith(prefix) and u in ends]

    def timeline(self, prefix: str, t0: float) -> list[tuple[float, float | None, float | None]]:
        """(sent, received, started) per task whose name starts with ``prefix``, in seconds since ``t0``:
        to match a long wait with what else happened then (a worker's log, a garbage collection)."""
        def since(at: float | None) -> float | None:
            return None if at is None else round(at - t0, 4)

        with self.lock:
            return sorted((since(at), since(self.received.get(u)), since(self.started.get(u)))
                          for u, (name, at) in self.sent.items() if name.startswith(prefix))

    def runtimes(self, prefix: str) -> list[float]:
        """Seconds each task whose name starts with ``prefix`` ran, by its worker's clock (its last run)."""
        with self.lock:
            return [self.runtime[u] for u, (name, _) in self.sent.items() if name.startswith(prefix)
                    and u in self.runtime]

    def clear(self) -> None:
        with self.lock:
            self.sent.clear()
            self.received.clear()
            self.started.clear()
            self.runtime.clear()

    def stop(self) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.thread.join(timeout=5)


class RssWatch:
    """The largest resident size seen of each worker (its process group), sampled each second."""

    def __init__(self, workers: dict[str, Any]):
        self.workers = workers
        self.peak_mb: dict[str, float] = dict.fromkeys(workers, 0.0)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rss", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(1.0):
            groups = process_groups()  # one scan of /proc per tick for all workers: this script's CPU counts too
            for role, proc in self.workers.items():
                self.peak_mb[role] = max(self.peak_mb[role], sum(map(rss_mb, groups.get(proc.pid, []))))

    def stop(self) -> dict[str, float]:
        self.stopped.set()
        self.thread.join(timeout=5)
        return self.peak_mb


class CpuUse:
    """CPU seconds spent by each process this script started and by all its descendants (the live ones'
    own time plus what they reaped: a worker's sample server and the samples it forked count as that
    worker's ``children``), and by this script itself. Read at the start and the end of a run; the
    difference is the run's."""

    def __init__(self, procs: dict[str, Any]):
        self.procs = procs
        self.start = self._read()

    def _read(self) -> dict[str, tuple[float, float]]:
        tick = os.sysconf("SC_CLK_TCK")
        stats = proc_stats()
        kids: dict[int, list[int]] = {}
        for pid, fields in stats.items():
            kids.setdefault(int(fields[1]), []).append(pid)
        seen: dict[str, tuple[float, float]] = {}
        for name, proc in self.procs.items():
            own = children = 0.0
            todo = [proc.pid]
            while todo:
                pid = todo.pop()
                todo += kids.get(pid, [])
                if pid in stats:
                    fields = stats[pid]
                    if pid == proc.pid:
                        own += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
                    else:
                        children += (int(fields[11]) + int(fields[12])) / tick
                    children += (int(fields[13]) + int(fields[14])) / tick  # cutime, cstime: reaped children
            seen[name] = (own, children)
        me = resource.getrusage(resource.RUSAGE_SELF)
        seen["bench"] = (me.ru_utime + me.ru_stime, 0.0)
        return seen

    def spent(self) -> dict[str, dict[str, float]]:
        end = self._read()
        return {name: {"own": end[name][0] - self.start.get(name, (0.0, 0.0))[0],
                       "children": end[name][1] - self.start.get(name, (0.0, 0.0))[1]} for name in end}


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


# ---- one run: S copies at once ------------------------------------------------------------------


def start_copies(roots: list[Path], url: str) -> None:
    """What ``baton run NAME --auto-approve --profile demo --broker --no-follow`` does, for each copy."""
    from workers import loop
    from workers.tasks import dispatch

    for root in roots:
        loop.check_settings(root, PROFILE)
        tasks = loop.start(root, auto_approve=True, profile=PROFILE)
        loop.Team(root, profile=PROFILE)  # pins the models through the double, as `baton run` does
        dispatch(tasks)


def wait_done(roots: list[Path], workers: dict[str, Any], procs: Procs, timeout: float) -> dict[str, float]:
    t0, finished, seen = time.time(), {}, {}
    while len(finished) < len(roots) and time.time() - t0 < timeout:
        for root in roots:
            if root.name in finished:
                continue
            try:  # read run.json only when it changed: this script shares the machine it measures
                stamp = (root / "run.json").stat().st_mtime_ns
            except OSError:
                continue
            if seen.get(root.name) == stamp:
                continue
            seen[root.name] = stamp
            state = run_state(root)
            if state.get("phase") == "done" or state.get("status") == "error":
                finished[root.name] = time.time() - t0
        for role, proc in workers.items():
            if proc.poll() is not None:
                raise SystemExit(f"the {role} worker exited (rc {proc.returncode}):\n{procs.log_tail(proc)}")
        time.sleep(0.25)
    return finished


def integrity(roots: list[Path], alone: Path) -> dict[str, list[str]]:
    """Duplicated and lost records (the chaos suite's audit, against the copy that ran alone), and any
    copy whose run took another course than that copy's: other steps, compactions or iteration results.
    (A byte comparison, as the chaos suite makes with a twin of the same name, cannot work here: the
    scenario's name is in every request, so token counts and tool-call ids differ between copies.)"""
    found: dict[str, list[str]] = {"not_done": [], "duplicates": [], "lost": [], "other_course": [], "borderline": []}
    reference = course(alone)
    for root in roots:
        state = run_state(root)
        if (state.get("phase"), state.get("status")) != ("done", "succeeded"):
            found["not_done"].append(f"{root.name}: {state.get('phase')} {state.get('status')} "
                                     f"{state.get('last_error') or ''}".strip())
        dups, lost = audit(root, alone)
        found["duplicates"] += dups
        found["lost"] += lost
        mine = course(root)
        for key in (k for k in reference if mine[k] != reference[k]):
            split = borderline_split(root, alone, key.split()[0]) if key.endswith("compactions") else None
            line = f"{root.name}: {key} {mine[key]}, alone {reference[key]}"
            if split and all(mine[k] == reference[k] for k in reference if not k.endswith("compactions")):
                found["borderline"].append(f"{line} ({split})")
            else:
                found["other_course"].append(line)
    return found


def borderline_split(root: Path, alone: Path, role: str) -> str | None:
    """Where ``root``'s compactions part from the lone copy's, if the decision there was at the threshold.

    A copy's name is in every request and its tool-call ids are hashed from it, so copies differ by a few
    tokens a step: a decision within ``BORDERLINE_SHARE`` of the threshold may fall on either side of it,
    and every later compaction moves with it. That is a different course, not a lost or duplicated record;
    it is reported as *borderline* and does not fail integrity. None when the split was not that close."""
    events = {r.name: AgentDisk.load(r, role).events for r in (root, alone)}
    points = [[e.after_step for e in found if isinstance(e, CompactionRecord)] for found in events.values()]
    first = next((min(a, b) for a, b in zip(*points) if a != b), None)
    if first is None and len(points[0]) != len(points[1]):
        first = max(points, key=len)[min(map(len, points))]
    if first is None:
        return None
    seen = []
    for name, found in events.items():
        compaction = next((e for e in found if isinstance(e, CompactionRecord) and e.after_step == first), None)
        step = next((e for e in found if isinstance(e, StepEvent) and e.step == first + 1), None)
        if step is None:
            return None
        # The copy that compacted: what it saw before; the other: its exact count (or estimate) of that step.
        tokens = compaction.tokens_before if compaction else step.counted_input or step.estimated_input
        seen.append((name, tokens, step.threshold))
    if all(abs(tokens - limit) <= BORDERLINE_SHARE * limit for _, tokens, limit in seen):
        return f"the decision before step {first + 1} was at the threshold: " + ", ".join(
            f"{name} {tokens:,} of {limit:,}" for name, tokens, limit in seen)
    return None


def course(root: Path) -> dict[str, Any]:
    """What a run did, apart from clocks and names: steps and compactions per agent, and each
    iteration's success rate."""
    shape: dict[str, Any] = {}
    for role in ("init", "execute"):
        disk = AgentDisk.load(root, role)
        shape[f"{role} steps"] = len(disk.steps)
        shape[f"{role} compactions"] = [e.after_step for e in disk.events if isinstance(e, CompactionRecord)]
    shape["success rates"] = [r.get("success_rate") for r in run_state(root).get("results", [])]
    return shape


def one_run(tag: str, count: int, folder: Path, url: str, workers: dict[str, Any], procs: Procs,
            waits: QueueWaits, redis: Any, timeout: float, alone: Path | None,
            services: dict[str, Any]) -> dict[str, Any]:
    """``count`` copies named ``<tag>_<i>`` in the workers' scenarios folder, started at once."""
    roots = [copy_scenario(EXAMPLE, folder / f"{tag}_{i:03d}") for i in range(1, count + 1)]
    waits.clear()
    memory_before = redis.info("memory")["used_memory"]
    redis.config_resetstat()  # the command count starts at 0 (the memory peak is not reset)
    redis_before = redis.info("stats")["total_commands_processed"]
    rss = RssWatch(workers)
    cpu_use = CpuUse(services)
    t0, cpu0 = time.time(), cpu_sample()
    start_copies(roots, url)
    finished = wait_done(roots, workers, procs, timeout)
    wall = max(finished.values()) if len(finished) == len(roots) else time.time() - t0
    cpu = cpu_busy(cpu0, cpu_sample())
    peaks = rss.stop()
    cpu_s = cpu_use.spent()
    time.sleep(1.0)  # the last events reach the receiver
    counts = count_run(roots)
    steps, compactions = waits.waits("baton.step"), waits.waits("baton.compaction")
    memory = redis.info("memory")
    result = {
        "scenarios": count, "wall_s": wall, "finished": len(finished), "timed_out": len(finished) < len(roots),
        "steps": counts["steps"], "compactions": counts["compactions"], "steps_per_s": counts["steps"] / wall,
        "step_wait_s": spread(steps),
        # How long a step itself ran: against the copy alone, what sharing the workers' processes cost.
        "step_run_s": spread(waits.runtimes("baton.step")),
        "compaction_wait_ms": spread_ms(compactions),
        # The part of it before the compaction worker's consumer took the message off Redis.
        "compaction_receive_ms": spread_ms(waits.waits("baton.compaction", "received")),
        "started_at": t0, "compaction_timeline": waits.timeline("baton.compaction", t0),
        "worker_rss_mb": peaks, "redis_commands": redis.info("stats")["total_commands_processed"] - redis_before,
        "redis_peak_mb": memory["used_memory_peak"] / 2**20,
        "redis_per_scenario_kb": max(0, memory["used_memory"] - memory_before) / 1024 / count,
        "cpu_count": os.cpu_count(), "cpu_busy_pct": cpu, "cpu_s": cpu_s,
        "cpu_s_per_scenario": sum(v["own"] + v["children"] for v in cpu_s.values()) / count,
    }
    result["integrity"] = integrity(roots, alone or roots[0])
    result["integrity_ok"] = not any(v for k, v in result["integrity"].items() if k != "borderline") \
        and not result["timed_out"]
    return result


def spread_ms(seconds: list[float]) -> dict[str, float]:
    """``spread`` of waits in seconds, told in milliseconds (the count stays a count)."""
    return {k: v if k == "n" else v * 1000 for k, v in spread(seconds).items()}


def spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0, "median": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    return {"n": len(values), "median": statistics.median(values), "p95": pct(values, 95), "p99": pct(values, 99),
            "max": max(values)}


# ---- the whole bench ----------------------------------------------------------------------------


def worker_nodes(processes: int, compaction_processes: int = 1) -> list[tuple[str, str]]:
    """(node, role) of each worker process: ``processes`` each for init and execute (a threads pool runs its
    Python on one core at a time), ``compaction_processes`` for compaction. The first of a role keeps the
    default node name."""
    counts = {"init": processes, "execute": processes, "compaction": compaction_processes}
    return [(role if i == 1 else f"{role}-{i}", role) for role, n in counts.items() for i in range(1, n + 1)]


def bench(sweep: list[int], latency: float, jitter: float, concurrency: int, timeout: float,
          workdir: Path, processes: int = 1, compaction_processes: int = 1) -> dict[str, Any]:
    procs = Procs(workdir)
    try:
        redis_proc, url = start_redis(procs)
        os.environ.update(BATON_BROKER_URL=url, ANTHROPIC_API_KEY=KEY)  # before workers.app is imported
        port = free_port()
        double = procs.start("fake-api", ["nice", "-n", str(SCAFFOLD_NICE), str(BATON), "fake-api", "--port",
                                          str(port), "--latency", f"{latency}s,{jitter}s", "--seed", "1", "--play",
                                          "refund_desk"], dict(os.environ))
        follow_autogroup(SCAFFOLD_NICE, double.pid)  # it leads its own session: `nice` alone would rank nothing
        os.environ["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{port}"
        wait_for_port(port, double, procs)
        folder = workdir / "scenarios"
        folder.mkdir()
        os.environ["BATON_SCENARIOS_DIR"] = str(folder)  # the workers find every copy here by its name
        workers = {node: procs.start(f"worker-{node}", [str(BATON), "worker", role, "--concurrency", str(concurrency),
                                                        "--name", f"{node}@%h"], dict(os.environ))
                   for node, role in worker_nodes(processes, compaction_processes)}
        services = {"redis": redis_proc, "fake-api": double, **{f"worker-{r}": p for r, p in workers.items()}}
        import redis as redis_lib

        redis = redis_lib.Redis.from_url(url)
        waits = QueueWaits(url)
        wait_for_workers(waits.app, workers, procs)
        os.nice(SCAFFOLD_NICE)  # only now: the workers and Redis took this script's niceness when they started
        print("warming up the workers with one copy, then running one copy alone (the ideal) ...", flush=True)
        # The warm-up fills imports and first connections.
        one_run("warm", 1, folder, url, workers, procs, waits, redis, timeout, None, services)
        alone = one_run("alone", 1, folder, url, workers, procs, waits, redis, timeout, None, services)
        print(f"one copy alone: {alone['wall_s']:.0f} s, {alone['steps']} steps", flush=True)
        print(cpu_line(alone), flush=True)
        runs = []
        for i, count in enumerate(sweep):
            print(f"running S={count} ...", flush=True)
            again = sweep[:i].count(count)  # a sweep may repeat an S (to see its spread): each run its own folders
            tag = f"s{count}" + (f"r{again + 1}" if again else "")
            run = one_run(tag, count, folder, url, workers, procs, waits, redis, timeout, folder / "alone_001",
                          services)
            run["ideal_s"] = alone["wall_s"]
            run["wall_over_ideal"] = run["wall_s"] / alone["wall_s"]
            print(cpu_line(run), flush=True)
            print(wait_line(run), flush=True)
            print(run_line(run, alone), flush=True)
            print(final_line(run, latency), flush=True)
            runs.append(run)
        waits.stop()
        return {"alone": alone, "runs": runs, "latency_s": latency, "jitter_s": jitter, "concurrency": concurrency,
                "processes": processes, "compaction_processes": compaction_processes}
    finally:
        procs.stop_all()


def wait_for_port(port: int, proc: Any, procs: Procs) -> None:
    import socket

    for _ in range(200):
        if proc.poll() is not None:
            raise SystemExit(f"baton fake-api exited:\n{procs.log_tail(proc)}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"baton fake-api did not listen on {port}:\n{procs.log_tail(proc)}")


# ---- report -------------------------------------------------------------------------------------


def final_line(run: dict[str, Any], latency: float) -> str:
    return (f"scale S={run['scenarios']} L={latency:g}s: wall/ideal {run['wall_over_ideal']:.2f}, "
            f"steps/s {run['steps_per_s']:.2f}, step wait p95 {run['step_wait_s']['p95']:.2f}s, "
            f"compaction wait p99 {run['compaction_wait_ms']['p99']:.0f}ms, "
            f"integrity {'ok' if run['integrity_ok'] else 'FAILED'}")


def wait_line(run: dict[str, Any]) -> str:
    """The compaction wait split at the consumer: sent to received, and the whole wait (sent to started)."""
    got, whole = run["compaction_receive_ms"], run["compaction_wait_ms"]
    return (f"  compaction wait ms, sent to received / to started: median {got['median']:.0f} / "
            f"{whole['median']:.0f}, p95 {got['p95']:.0f} / {whole['p95']:.0f}, p99 {got['p99']:.0f} / "
            f"{whole['p99']:.0f}, max {got['max']:.0f} / {whole['max']:.0f}")


def run_line(run: dict[str, Any], alone: dict[str, Any]) -> str:
    """A step's own run time with S copies against the copy alone: the slowdown inside the tasks, apart
    from the queues (a threads pool's steps share one interpreter)."""
    now, then = run["step_run_s"], alone["step_run_s"]
    return (f"  step run s, this run / alone: median {now['median']:.2f} / {then['median']:.2f}, "
            f"p95 {now['p95']:.2f} / {then['p95']:.2f}, max {now['max']:.2f} / {then['max']:.2f}")


def cpu_line(run: dict[str, Any]) -> str:
    """Where the CPU went, per scenario: each process's own time, and what its children spent."""
    parts = []
    for name, spent in run["cpu_s"].items():
        part = f"{name} {spent['own'] / run['scenarios']:.2f}"
        if spent["children"] > 0.005:
            part += f" (+{spent['children'] / run['scenarios']:.2f} children)"
        parts.append(part)
    return f"  CPU s per scenario: {run['cpu_s_per_scenario']:.2f} in all: " + ", ".join(parts)


def chart(res: dict[str, Any], img_dir: Path) -> Path:
    """wall/ideal and steps/s against S: the plot beside the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = res["runs"]
    sizes = [r["scenarios"] for r in runs]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    ax.plot(sizes, [r["wall_over_ideal"] for r in runs], "o-", color="tab:blue", label="wall / ideal")
    ax.axhline(1.25, color="tab:blue", linestyle=":", linewidth=1, label="1.25x (the target)")
    ax.set_xlabel("scenarios in flight at once (S)")
    ax.set_ylabel("wall time / one copy alone")
    ax.set_xscale("log")
    ax.set_xticks(sizes, [str(s) for s in sizes])
    other = ax.twinx()
    other.plot(sizes, [r["steps_per_s"] for r in runs], "s--", color="tab:orange", label="steps/s")
    other.set_ylabel("agent steps per second")
    lines = ax.get_legend_handles_labels()[0] + other.get_legend_handles_labels()[0]
    ax.legend(lines, [line.get_label() for line in lines], loc="upper left")
    ax.set_title(f"bench/scale.py: copies of refund_desk, model latency {res['latency_s']:g} s, "
                 f"{runs[0].get('cpu_count') or '?'} cores")
    fig.tight_layout()
    img_dir.mkdir(parents=True, exist_ok=True)
    path = img_dir / "scale.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def cpu_cell(run: dict[str, Any]) -> str:
    """baton's own CPU per scenario (its workers; in brackets what their samples took) against all of it
    (the API double, Redis and this script too). Runs measured before the bench counted CPU show "-"."""
    spent = run.get("cpu_s")
    if not spent:
        return "-"
    workers = {k: v for k, v in spent.items() if k.startswith("worker-")}
    own = sum(v["own"] + v["children"] for v in workers.values()) / run["scenarios"]
    samples = sum(v["children"] for v in workers.values()) / run["scenarios"]
    return f"{own:.2f} ({samples:.2f}) / {run['cpu_s_per_scenario']:.2f}"


def integrity_cell(run: dict[str, Any]) -> str:
    near = len(run["integrity"].get("borderline", []))
    return ("ok" if run["integrity_ok"] else "**FAILED**") + (f" ({near} borderline)" if near else "")


def render(res: dict[str, Any], command: str, elapsed: float) -> str:
    rows = []
    for r in res["runs"]:
        rss = ", ".join(f"{role} {mb:.0f}" for role, mb in r["worker_rss_mb"].items())
        rows.append([r["scenarios"], f"{r['wall_s']:.0f}", f"{r['ideal_s']:.0f}", f"{r['wall_over_ideal']:.2f}",
                     f"{r['steps_per_s']:.2f}", f"{r['step_wait_s']['median']:.2f} / {r['step_wait_s']['p95']:.2f} / "
                     f"{r['step_wait_s']['max']:.2f}", f"{r['compaction_wait_ms']['p99']:.0f}", rss,
                     cpu_cell(r), f"{r['redis_commands']:,}", f"{r['redis_peak_mb']:.1f}",
                     f"{r['redis_per_scenario_kb']:.0f}",
                     integrity_cell(r)])
    table = md_table(["S", "wall s", "ideal s", "wall/ideal", "steps/s", "step wait s (median / p95 / max)",
                      "compaction wait p99 ms", "worker RSS MB (peak)", "CPU s per scenario: workers (samples) / all",
                      "Redis commands", "Redis peak MB", "Redis KB/scenario", "integrity"], rows, "rrrrrlrllrrrl")
    return ("## Scale (many scenarios at once)\n\n"
            f"Measured with `{command}` ({elapsed / 60:.0f} min in all) on {platform.node()}: "
            f"{os.cpu_count()} cores, Python {platform.python_version()}, "
            f"code {res.get('code') or code_version()}. Model latency "
            f"{res['latency_s']:g} s ± {res['jitter_s']:g} s per call (`baton fake-api --latency`), workers "
            f"`baton worker ROLE --concurrency {res['concurrency']}` ({res.get('processes', 1)} process(es) each "
            f"for init and execute, {res.get('compaction_processes', 1)} for compaction). The ideal is one copy "
            "run alone "
            f"({res['alone']['wall_s']:.0f} s, {res['alone']['steps']} steps).\n\n{table}\n\n"
            "![wall/ideal and steps/s against S](img/scale.png)\n" + borderline_note(res))


def borderline_note(res: dict[str, Any]) -> str:
    lines = [f"- S={r['scenarios']}: {line}" for r in res["runs"] for line in r["integrity"].get("borderline", [])]
    if not lines:
        return ""
    return ("\n*Borderline* copies took another course than the copy alone only because a compaction decision fell "
            "within 2% of the threshold (a copy's name, in every request and in its tool-call ids, moves its "
            "counts by a few tokens a step); nothing was lost or duplicated:\n\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", type=int, default=10, help="copies in flight at once")
    parser.add_argument("--sweep", default=None, help="several S, e.g. 1,10,50,100 (instead of --scenarios)")
    parser.add_argument("--latency", type=float, default=2.0, help="model latency per call, seconds")
    parser.add_argument("--jitter", type=float, default=None, help="± seconds [default: a quarter of the latency]")
    parser.add_argument("--processes", type=int, default=PER_CORE,
                        help=f"worker processes each for init and execute [default: {PER_CORE}, {PER_CORE_WHY}]")
    parser.add_argument("--compaction-processes", type=int, default=PER_CORE,
                        help=f"compaction worker processes [default: {PER_CORE}, as many]")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="steps each worker serves at once [default: S of the largest run]")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per run, seconds")
    parser.add_argument("--json", type=Path, default=None, help="write the measurements here")
    parser.add_argument("--out", type=Path, nargs="?", const=DEFAULT_DOC, default=None,
                        help=f"write the 'Scale' section of this page and img/scale.png beside it [{DEFAULT_DOC}]")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="no run: write --out from the measurements an earlier --json saved")
    args = parser.parse_args(argv)
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        if args.out:
            write_section(args.out, "Scale", render(saved, saved["command"], saved["elapsed_s"]))
            chart(saved, args.out.parent / "img")
        for run in saved["runs"]:
            print(final_line(run, saved["latency_s"]))
        return 0
    sweep = [int(s) for s in args.sweep.split(",")] if args.sweep else [args.scenarios]
    if any(s < 1 for s in sweep):
        parser.error("every S must be at least 1")
    jitter = args.latency / 4 if args.jitter is None else args.jitter
    concurrency = args.concurrency or max(sweep)
    started, code = time.time(), code_version()  # the code the workers import now, not what HEAD is at the end
    workdir = Path(tempfile.mkdtemp(prefix="baton-scale-"))
    res: dict[str, Any] = {}
    try:
        res = bench(sweep, args.latency, jitter, concurrency, args.timeout, workdir, args.processes,
                    args.compaction_processes)
    finally:
        if res and all(r["integrity_ok"] for r in res["runs"]):
            shutil.rmtree(workdir, ignore_errors=True)
        else:  # what the failure left is evidence
            print(f"kept {workdir} (the workers' logs, every copy's folder)", flush=True)
    command = "python bench/scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
    res.update(command=command, elapsed_s=time.time() - started, code=code)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str))
    if args.out:
        write_section(args.out, "Scale", render(res, command, res["elapsed_s"]))
        chart(res, args.out.parent / "img")
    for run in res["runs"]:
        for kind, found in run["integrity"].items():
            for line in found[:10]:
                print(f"  {kind}: {line}")
    return 0 if all(r["integrity_ok"] for r in res["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())

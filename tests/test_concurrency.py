"""Many steps at once in one worker (issue 14): ``baton worker ROLE --concurrency N`` serves the
steps of several scenarios together while they wait on the model, each agent still one step at a
time; CPU-heavy work takes a slot of ``proving.cpu_slots`` first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from agents.events import StepEvent
from agents.simulated import SimulatedModel
from proving import cpu_slots
from proving.cpu_slots import SLOTS_ENV, slots_from_env
from scenarios.run import copy_scenario
from tests.export_support import EXAMPLE, baton
from tests.workers_harness import Proc, load_scaled, spawn
from workers import loop
from workers.fake_api.latency import Latency
from workers.fake_api.server import FakeApi, Running, start

KEY = "sk-ant-concurrency-test"
BATON = Path(sys.executable).with_name("baton")


# ---- the CPU slots ----------------------------------------------------------------------------


def test_cpu_slots_default_to_the_cores_and_refuse_nonsense() -> None:
    assert slots_from_env({}) == (os.cpu_count() or 1)
    assert slots_from_env({SLOTS_ENV: "3"}) == 3
    for bad in ("0", "-1", "two"):
        with pytest.raises(ValueError, match=f"{SLOTS_ENV}='{bad}' must be a whole number of 1 or more"):
            slots_from_env({SLOTS_ENV: bad})


def test_no_more_cpu_work_runs_at_once_than_there_are_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_slots, "_slots", threading.BoundedSemaphore(2))
    seen, release = [], threading.Event()

    def job() -> None:
        with cpu_slots.cpu_slot():
            seen.append(cpu_slots.busy())
            release.wait(5)

    threads = [threading.Thread(target=job) for _ in range(6)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while cpu_slots.busy() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # the other four are blocked on the semaphore, not counted
    assert cpu_slots.busy() == 2 and len(seen) == 2
    release.set()
    for t in threads:
        t.join(5)
    assert len(seen) == 6 and max(seen) <= 2 and cpu_slots.busy() == 0


# ---- the worker command ---------------------------------------------------------------------


@pytest.fixture
def worker_command(monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[str]], list[int]]:
    """``baton worker`` run in this process up to Celery's start: the argv it would start Celery with and the
    niceness it would take, each recorded instead; nothing of this test process changes (its niceness, its
    garbage collector's callbacks)."""
    from workers import app as app_module
    from workers import cli

    calls: list[list[str]] = []
    nices: list[int] = []
    monkeypatch.setattr(cli, "check_broker", lambda url: None)
    monkeypatch.setattr(app_module.app, "worker_main", calls.append)
    monkeypatch.setattr(cli, "lower_priority", nices.append)
    monkeypatch.setattr(cli.gc_pauses, "install", lambda: None)
    return calls, nices


def test_a_threads_compaction_worker_hands_the_gil_on_every_millisecond(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_command: tuple[list[list[str]], list[int]]) -> None:
    """Its consumer thread must not wait 5 ms a turn behind the compaction threads (workers/cli.py)."""
    from workers import cli

    switches: list[float] = []
    monkeypatch.setattr(cli.sys, "setswitchinterval", switches.append)
    broker = {"BATON_BROKER_URL": "redis://127.0.0.1:1/0"}
    assert baton(tmp_path, "worker", "compaction", "--concurrency", "8", **broker).exit_code == 0
    assert baton(tmp_path, "worker", "compaction", **broker).exit_code == 0  # prefork: one task per process
    assert baton(tmp_path, "worker", "execute", "--concurrency", "8", **broker).exit_code == 0
    assert switches == [0.001]


def test_the_worker_passes_its_concurrency_and_picks_threads_above_one(
        tmp_path: Path, worker_command: tuple[list[list[str]], list[int]]) -> None:
    calls, nices = worker_command
    broker = {"BATON_BROKER_URL": "redis://127.0.0.1:1/0"}
    assert baton(tmp_path, "worker", "execute", "--concurrency", "8", **broker).exit_code == 0
    assert baton(tmp_path, "worker", "init", **broker).exit_code == 0
    assert baton(tmp_path, "worker", "compaction", **broker).exit_code == 0
    assert baton(tmp_path, "worker", "compaction", "--nice", "3", "--name", "compaction-2@%h", **broker).exit_code == 0
    assert nices == [10, 10, 0, 3]  # step workers yield the CPU to the compaction worker on a busy machine
    assert baton(tmp_path, "worker", "init", "--nice", "20", **broker).exit_code == 2
    many, one, compaction, second = calls
    assert compaction[compaction.index("-n") + 1] == "compaction@%h"  # one process of a role per host by default
    assert second[second.index("-n") + 1] == "compaction-2@%h"  # a second one names itself
    assert many[many.index("-c") + 1] == "8" and many[many.index("--pool") + 1] == "threads"
    assert one[one.index("-c") + 1] == "1" and one[one.index("--pool") + 1] == "prefork"
    # Workers never consult each other (gossip, mingle); heartbeats stay, Flower shows workers online by them.
    assert all({"--without-gossip", "--without-mingle"} <= set(argv) and "--without-heartbeat" not in argv
               for argv in calls)
    solo = baton(tmp_path, "worker", "init", "--pool", "solo", "--concurrency", "2", **broker)
    assert solo.exit_code == 2 and "the solo pool runs one task at a time" in solo.output
    assert baton(tmp_path, "worker", "init", "--concurrency", "0", **broker).exit_code == 2


# ---- real workers, many scenarios ------------------------------------------------------------


@pytest.fixture
def double() -> Iterator[Running]:
    """The API double playing the example for every copy, each reply held back 0.3 s as a model's is."""
    running = start(FakeApi(model=SimulatedModel("refund_desk"), latency=Latency(base_s=0.3, jitter_s=0.05, seed=1)))
    yield running
    running.stop()


def steps_of(root: Path, role: str) -> list[tuple[float, float]]:
    """(start, end) of each step's model call, from its event: ``at`` is when it was written."""
    spans = []
    for line in (root / "state" / role / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == "step":
            step = StepEvent.model_validate(event)
            end = datetime.fromisoformat(step.at).timestamp()
            spans.append((end - step.duration_s, end))
    return spans


def most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    now = peak = 0
    for _, change in edges:
        now += change
        peak = max(peak, now)
    return peak


@pytest.mark.slow
def test_one_worker_per_queue_serves_several_scenarios_steps_at_once(tmp_path: Path, redis_server,
                                                                     double: Running) -> None:
    scenarios = tmp_path / "scenarios"
    roots = [copy_scenario(EXAMPLE, scenarios / f"desk{i}") for i in range(1, 4)]
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "BATON_PROFILE")}
    env.update(BATON_BROKER_URL=redis_server.url, ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=double.url,
               BATON_SCENARIOS_DIR=str(scenarios), BATON_REAPER_INTERVAL_S="0")
    (tmp_path / "logs").mkdir()
    workers: list[Proc] = [spawn(f"worker-{role}", [str(BATON), "worker", role, "--concurrency", "4"], env,
                                 tmp_path / "logs") for role in ("init", "execute", "compaction")]
    try:
        for root in roots:
            started = subprocess.run([str(BATON), "run", root.name, "--auto-approve", "--profile", "demo",
                                      "--broker", "--no-follow"], env=env, capture_output=True, text=True,
                                     timeout=load_scaled(120))
            assert started.returncode == 0, started.stdout + started.stderr
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not all(loop.load_run(r).finished for r in roots):
            assert all(w.running() for w in workers), "\n".join(w.tail() for w in workers)
            time.sleep(0.5)
    finally:
        for w in workers:
            w.stop()
    records = [loop.load_run(r) for r in roots]
    assert [(r.phase, r.status) for r in records] == [("done", "succeeded")] * 3, [r.last_error for r in records]
    # One init worker process served the three scenarios' Init steps with overlapping model calls ...
    assert most_at_once([s for root in roots for s in steps_of(root, "init")]) >= 2
    assert most_at_once([s for root in roots for s in steps_of(root, "execute")]) >= 2
    # ... while each agent stayed at one step at a time, and every copy took the same course.
    for root in roots:
        for role in ("init", "execute"):
            assert most_at_once(steps_of(root, role)) == 1, (root.name, role)
    counts = {tuple(len(steps_of(root, role)) for role in ("init", "execute")) for root in roots}
    assert len(counts) == 1, counts

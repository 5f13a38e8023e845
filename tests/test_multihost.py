"""More than one machine (issue 14, docs/deployment.md "Several machines"): two groups of workers
under different hostnames (each group in its own UTS namespace, as on two hosts), one Redis, one
shared scenarios folder. A run starts on both groups, one group is stopped mid-run, and the run
finishes on the other, with each step done once."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.simulated import SimulatedModel
from scenarios.run import copy_scenario
from tests.export_support import EXAMPLE
from tests.workers_harness import FAST_RECOVERY, Proc, load_scaled, spawn
from workers import loop
from workers.fake_api.latency import Latency
from workers.fake_api.server import FakeApi, Running, start

pytestmark = pytest.mark.slow  # real workers, a whole run

KEY = "sk-ant-multihost-test"
BATON = Path(sys.executable).with_name("baton")
HOSTS = ("host-a", "host-b")
STEP_DONE = re.compile(r"Task baton\.step .* succeeded")


def _uts_reason() -> str | None:
    unshare = shutil.which("unshare")
    if unshare is None:
        return "unshare (util-linux) is not installed: the test gives each worker group its own hostname with it"
    probe = subprocess.run([unshare, "--uts", "sh", "-c", "hostname probe-host && hostname"], capture_output=True,
                           text=True, timeout=30)
    if probe.returncode != 0 or probe.stdout.strip() != "probe-host":
        return f"cannot make a UTS namespace here ({probe.stderr.strip() or probe.stdout.strip()}); needs root"
    return None


@pytest.fixture
def double() -> Iterator[Running]:
    running = start(FakeApi(model=SimulatedModel("refund_desk"), latency=Latency(base_s=0.2, seed=1)))
    yield running
    running.stop()


def group(host: str, env: dict[str, str], logs: Path) -> list[Proc]:
    """The three workers of one 'machine': their own hostname, so Celery names them role@host."""
    as_host = ["unshare", "--uts", "sh", "-c", f'hostname {host} && exec "$0" "$@"']
    return [spawn(f"{host}-{role}", [*as_host, str(BATON), "worker", role], env, logs)
            for role in ("init", "execute", "compaction")]


def steps_done(workers: list[Proc]) -> int:
    return sum(len(STEP_DONE.findall(w.tail(10**7))) for w in workers)


def test_a_run_moves_to_the_other_group_when_one_is_stopped(tmp_path: Path, redis_server, double: Running) -> None:
    reason = _uts_reason()
    if reason:
        pytest.skip(reason)
    shared = tmp_path / "shared" / "scenarios"  # the one folder both "machines" mount
    root = copy_scenario(EXAMPLE, shared / "refund_desk")
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "BATON_PROFILE")}
    env.update(BATON_BROKER_URL=redis_server.url, ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=double.url,
               BATON_SCENARIOS_DIR=str(shared), **FAST_RECOVERY)
    first, second = group(HOSTS[0], env, logs), group(HOSTS[1], env, logs)
    try:
        started = subprocess.run([str(BATON), "run", "refund_desk", "--auto-approve", "--profile", "demo",
                                  "--broker", "--no-follow"], env=env, capture_output=True, text=True,
                                 timeout=load_scaled(120))
        assert started.returncode == 0, started.stdout + started.stderr
        deadline = time.monotonic() + 120
        while steps_done(first) < 3 and time.monotonic() < deadline:  # the first group has done some of it
            assert all(w.running() for w in first + second), "\n".join(w.tail() for w in first + second)
            time.sleep(0.2)
        assert steps_done(first) >= 3, "\n".join(w.tail() for w in first + second)
        for worker in first:
            worker.stop()  # a warm shutdown: the machine is taken out of service
        before = steps_done(second)
        deadline = time.monotonic() + 400
        while not loop.load_run(root).finished and time.monotonic() < deadline:
            assert all(w.running() for w in second), "\n".join(w.tail() for w in second)
            time.sleep(0.5)
    finally:
        for worker in first + second:
            worker.stop()
    record = loop.load_run(root)
    assert (record.phase, record.status) == ("done", "succeeded"), record.last_error
    assert steps_done(second) > before  # the rest of the run happened on the second machine
    # Each step once: as many step events as log steps, whichever machine wrote them.
    for role in ("init", "execute"):
        events = [json.loads(line) for line in (root / "state" / role / "events.jsonl").read_text().splitlines()]
        numbers = [e["step"] for e in events if e["kind"] == "step"]
        assert sorted(numbers) == list(range(1, len(numbers) + 1)), (role, numbers)
    # Celery named each group's workers after its machine.
    assert all(f"{w.name.split('-', 2)[-1]}@{HOSTS[0]}" in w.tail(10**7) for w in first)
    assert all(f"{w.name.split('-', 2)[-1]}@{HOSTS[1]}" in w.tail(10**7) for w in second)

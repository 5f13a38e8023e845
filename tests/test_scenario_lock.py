"""One embedded run of a scenario at a time (``workers.scenario_lock``), checked with real processes.

A ``baton run`` is frozen (SIGSTOP) while it holds the scenario, so a second one meets the lock
however fast the simulated run is; then the holder is killed with SIGKILL and the lock is free.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.agent_run import assert_log_consistent, copy_example
from tests.suite_gates import suite_gates
from tests.workers_harness import Cluster, RedisServer, load_scaled, wait_for
from workers.scenario_lock import Holder, ScenarioBusy, holder, lock_path, scenario_lock, shared_scenario_lock

BATON = Path(sys.executable).parent / "baton"

pytestmark = pytest.mark.timeout(180)


def baton_argv(scenarios: Path, *args: str) -> list[str]:
    if not BATON.exists():
        pytest.skip("the baton entry point is not installed (pip install -e .)")
    return [str(BATON), "--scenarios-dir", str(scenarios), *args]


def minimal_env(home: Path) -> dict[str, str]:
    # No broker and no API key, whatever the developer's shell holds: embedded and simulated. bwrap's folder
    # stays on PATH: the run's evaluation samples run only in its sandbox.
    bwrap = shutil.which("bwrap")
    path = [str(BATON.parent), *([str(Path(bwrap).parent)] if bwrap else [])]
    return {"PATH": os.pathsep.join(path), "HOME": str(home), "COLUMNS": "200", **suite_gates()}


def test_no_lock_file_means_nobody_holds_the_scenario(tmp_path: Path) -> None:
    assert holder(tmp_path) is None


def test_the_lock_names_its_holder_and_is_gone_after_release(tmp_path: Path) -> None:
    with scenario_lock(tmp_path, command="baton run demo") as me:
        assert me.pid == os.getpid() and me.command == "baton run demo"
        assert holder(tmp_path) == me  # seen through another open file, as another process sees it
        with pytest.raises(ScenarioBusy, match=f"pid {me.pid}") as busy:
            with scenario_lock(tmp_path):
                pass
        assert busy.value.holder == me
    assert holder(tmp_path) is None
    assert not lock_path(tmp_path).exists()  # the scenario folder is left as it was


@pytest.mark.slow  # real baton processes
def test_a_second_baton_run_exits_2_naming_the_holder_and_a_killed_holder_frees_it(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    run = baton_argv(tmp_path, "run", "refund_desk", "--auto-approve", "--profile", "demo")
    env = minimal_env(tmp_path)
    first = subprocess.Popen(run, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def holding() -> Holder | None:
            if first.poll() is not None:
                pytest.fail(f"the first run ended ({first.returncode}) before it was seen holding the lock")
            found = holder(root)
            # Held, and the run started (the lock comes before the first change, run.json a moment later):
            # resuming below needs a run to resume.
            started = (root / "run.json").exists()
            return found if found is not None and found.pid == first.pid and started else None

        held = wait_for(holding, "the first run to hold the scenario", timeout=60, interval=0.005)
        os.kill(first.pid, signal.SIGSTOP)  # frozen mid-run, lock held
        assert "baton" in held.command and "refund_desk" in held.command

        second = subprocess.run(run, env=env, capture_output=True, text=True, timeout=load_scaled(120), check=False)
        output = " ".join((second.stdout + second.stderr).split())  # rich wraps long lines
        assert second.returncode == 2, output
        assert f"pid {first.pid}" in output and held.host in output and held.since in output, output
        assert "baton resume refund_desk" in output, output

        os.kill(first.pid, signal.SIGKILL)  # no finally, no release: the kernel frees the flock
        first.wait(timeout=30)
        assert holder(root) is None

        resumed = subprocess.run(baton_argv(tmp_path, "resume", "refund_desk", "--profile", "demo"), env=env,
                                 capture_output=True, text=True, timeout=load_scaled(120), check=False)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
    assert holder(root) is None and not lock_path(root).exists()
    for role in ("init", "execute"):
        assert_log_consistent(root, role)  # no step written twice


def test_holder_is_none_once_the_holding_process_is_killed(tmp_path: Path) -> None:
    code = ("import sys, time; from pathlib import Path; from workers.scenario_lock import scenario_lock\n"
            "with scenario_lock(Path(sys.argv[1]), command='holder'):\n"
            "    print('held', flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parent.parent, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        assert holder(tmp_path) == Holder(pid=proc.pid, host=os.uname().nodename,
                                          since=holder(tmp_path).since, command="holder")  # type: ignore[union-attr]
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while holder(tmp_path) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert holder(tmp_path) is None  # the stale file stays, but nobody holds it
        with scenario_lock(tmp_path):
            pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


@pytest.mark.slow  # real baton processes
def test_an_embedded_run_with_a_broker_also_excludes_the_workers(tmp_path: Path, redis_server: RedisServer) -> None:
    server = redis_server
    root = copy_example(tmp_path)
    run = baton_argv(tmp_path, "run", "refund_desk", "--embedded", "--auto-approve", "--profile", "demo")
    env = {**minimal_env(tmp_path), "BATON_BROKER_URL": server.url}
    client = redis.Redis.from_url(server.url)
    try:
        # A worker in the middle of one of Init's steps holds this lock (workers.tasks.agent_lock).
        worker_step = client.lock("baton:lock:refund_desk:init", timeout=60)
        assert worker_step.acquire(blocking=False)
        busy = subprocess.run(run, env=env, capture_output=True, text=True, timeout=load_scaled(120), check=False)
        output = " ".join((busy.stdout + busy.stderr).split())
        assert busy.returncode == 2 and "being run by workers" in output, output
        # nothing is written: the workers' locks are taken before the command's first change
        assert not (root / "run.json").exists() and not (root / "state" / "init").exists()
        worker_step.release()

        done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=load_scaled(120), check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not client.keys("baton:lock:*")  # every lock released at the end of the run
    finally:
        client.close()
    for role in ("init", "execute"):
        assert_log_consistent(root, role)


def test_workers_share_the_lock_and_an_embedded_run_holds_it_alone(tmp_path: Path) -> None:
    with shared_scenario_lock(tmp_path), shared_scenario_lock(tmp_path):  # workers, side by side
        with pytest.raises(ScenarioBusy, match="being run by workers") as busy:
            with scenario_lock(tmp_path, "baton run x"):
                pass
        assert busy.value.by_workers
        assert holder(tmp_path) is None  # no embedded run
    with scenario_lock(tmp_path, "baton run x"):
        with pytest.raises(ScenarioBusy, match="already running in pid") as busy:
            with shared_scenario_lock(tmp_path):
                pass
        assert not busy.value.by_workers and busy.value.holder.command == "baton run x"
    with shared_scenario_lock(tmp_path):  # free again
        pass


@pytest.mark.slow  # real workers on a real broker
def test_workers_elsewhere_wait_while_an_embedded_run_holds_the_folder(tmp_path: Path,
                                                                       redis_server: RedisServer) -> None:
    cluster = Cluster(redis_server.url, tmp_path)
    try:
        workers = cluster.workers()
        with scenario_lock(cluster.root, "baton run refund_desk --embedded (another host)"):
            cluster.start_run()
            wait_for(lambda: "another host" in workers["init"].tail(), "the init worker retrying its step")
            assert not (cluster.root / "state" / "init" / "events.jsonl").exists()  # not one step meanwhile
        record = cluster.wait_done()
        assert (record["phase"], record["status"]) == ("done", "succeeded"), record
    finally:
        cluster.stop_all()
    for role in ("init", "execute"):
        assert_log_consistent(cluster.root, role)


def test_archiving_a_run_leaves_the_lock_with_its_holder(tmp_path: Path) -> None:
    from scenarios.run import archive_run

    (tmp_path / "state" / "init").mkdir(parents=True)
    (tmp_path / "state" / "init" / "log.jsonl").write_text("{}\n")
    (tmp_path / "run.json").write_text('{"scenario": "x", "phase": "done", "status": "succeeded"}')
    with scenario_lock(tmp_path, "baton run x"):  # `baton run` archives the finished run under its lock
        archived = archive_run(tmp_path)
        assert archived is not None and (archived / "state" / "init" / "log.jsonl").is_file()
        assert not (archived / "state" / ".lock").exists() and lock_path(tmp_path).is_file()
        with pytest.raises(ScenarioBusy):  # still held: a second command is refused
            with scenario_lock(tmp_path, "baton run x"):
                pass
    assert archive_run(tmp_path) is None  # a state/ with nothing but the lock is no run to archive

"""The reaper (workers/reaper.py): a run whose worker died, or froze, goes on with no human `resume`.

The unit tests decide "stalled" on a fakeredis client; the process tests kill or freeze real
workers on a private redis-server and wait for the run to finish by itself.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import fakeredis
import pytest

from scenarios.folder import Folder
from scenarios.store import StoreError
from tests.agent_run import EXAMPLE
from tests.workers_harness import (
    SCENARIO,
    Cluster,
    alive,
    assert_each_response_once,
    freeze_inside_tool,
    signal_pids,
    wait_for,
)
from workers import reaper
from workers.loop import Task, start
from workers.reaper import SCAN_KEY, ReaperSettings, reap
from workers.tasks import lock_key

SETTINGS = ReaperSettings(interval_s=5, stall_after_s=20)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    from scenarios.run import copy_scenario

    copy_scenario(EXAMPLE, tmp_path / SCENARIO)
    start(tmp_path / SCENARIO, auto_approve=True)  # run.json and init's opening, nothing dispatched
    return tmp_path


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Task]:
    tasks: list[Task] = []
    monkeypatch.setattr(reaper, "dispatch", tasks.extend)
    return tasks


def _age(root: Path, seconds: float) -> None:
    """Make every file of the run look ``seconds`` old."""
    past = time.time() - seconds
    for path in root.rglob("*"):
        os.utime(path, (past, past))


def _scan(folder: Path, client) -> dict[str, list[Task]]:
    client.delete(SCAN_KEY)  # a test scans again at once; workers wait for the interval
    return reap(folder, client, SETTINGS)


def test_a_run_idle_past_the_bound_with_no_lock_is_resumed_once(folder: Path, sent: list[Task]) -> None:
    client = fakeredis.FakeRedis()
    _age(folder / SCENARIO, 25)
    assert _scan(folder, client) == {SCENARIO: [Task(kind="step", scenario=SCENARIO, agent="init", number=1)]}
    assert sent == [Task(kind="step", scenario=SCENARIO, agent="init", number=1)]
    assert _scan(folder, client) == {}  # not again within the bound: the step needs time to show progress
    client.delete(f"baton:reaped:{SCENARIO}")
    assert _scan(folder, client) == {SCENARIO: sent[:1]}


def test_only_one_worker_scans_per_interval(folder: Path, sent: list[Task]) -> None:
    client = fakeredis.FakeRedis()
    _age(folder / SCENARIO, 25)
    assert reap(folder, client, SETTINGS) and not reap(folder, client, SETTINGS)


@pytest.mark.parametrize("held", ["init", "execute", "phase"])
def test_a_held_lock_means_someone_works_on_it(folder: Path, sent: list[Task], held: str) -> None:
    client = fakeredis.FakeRedis()
    _age(folder / SCENARIO, 600)  # a long model call: the lock is renewed, the files are old
    client.set(lock_key(SCENARIO, held), "token", px=15_000)
    assert _scan(folder, client) == {} and sent == []


def test_recent_progress_waiting_runs_and_errors_are_left_alone(folder: Path, sent: list[Task]) -> None:
    client = fakeredis.FakeRedis()
    root = folder / SCENARIO
    _age(root, 5)
    assert _scan(folder, client) == {}
    for update in ({"phase": "awaiting_approval", "status": "waiting"}, {"status": "error", "last_error": "x"},
                   {"phase": "done", "status": "succeeded"}):
        record = json.loads((root / "run.json").read_text()) | update
        (root / "run.json").write_text(json.dumps(record))
        _age(root, 25)
        assert _scan(folder, client) == {}, update  # a human must look, or nothing is left to do
    assert sent == []


@pytest.mark.parametrize(("env", "said"), [({"BATON_REAPER_INTERVAL_S": "soon"}, "interval_s"),
                                           ({"BATON_STALL_AFTER_S": "10"}, "stall_after_s")])
def test_bad_reaper_settings_are_named(env: dict[str, str], said: str) -> None:
    with pytest.raises(StoreError, match=said) as caught:
        ReaperSettings.from_env(env)
    assert "BATON_STALL_AFTER_S" in str(caught.value)
    assert ReaperSettings.from_env({"BATON_REAPER_INTERVAL_S": "0"}).interval_s == 0  # off


# ---- real workers ------------------------------------------------------------------------------


@pytest.fixture
def cluster(request, redis_server, tmp_path) -> Cluster:
    cluster = Cluster(redis_server.url, tmp_path)
    request.addfinalizer(cluster.stop_all)
    return cluster


def _finished(cluster: Cluster, record: dict) -> None:
    assert record["phase"] == "done" and record["status"] == "succeeded", record
    assert_each_response_once(cluster.agent_logs())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_worker_killed_mid_step_and_no_human_resume(cluster: Cluster) -> None:
    workers = cluster.workers()
    cluster.start_run()
    freeze_inside_tool(cluster, workers["execute"], after_steps=3)
    for proc in workers.values():
        proc.kill9()  # the step in flight sits unacked in Redis for the 4 h visibility timeout
    cluster.workers(suffix="-new")  # a supervisor restarts the workers; nobody runs `baton resume`
    _finished(cluster, cluster.wait_done(timeout=180))


def _holds_a_flock(pid: int) -> bool:
    """An exclusive flock (a lease file's, while writing): the scenario lock every worker holds while it runs
    a task is shared (READ in /proc/locks) and keeps no other worker out."""
    return any(line.split()[1] == "FLOCK" and line.split()[3] == "WRITE" and line.split()[4] == str(pid)
               for line in Path("/proc/locks").read_text().splitlines())


def _freeze_the_writer(cluster: Cluster, tool: str) -> tuple[int, dict] | None:
    """SIGSTOP the process running execute's step while it is inside ``tool``, whichever of the workers
    that is: the lease names its pid."""
    if cluster.pending_tool_step("execute", tool) is None:
        return None
    owner = json.loads((cluster.root / "state" / "execute" / "lease.json").read_text())["owner"]
    pid = int(owner.split(":")[1])
    signal_pids([pid], signal.SIGSTOP)
    step = cluster.pending_tool_step("execute", tool)  # still inside, now that it cannot move?
    owner_now = json.loads((cluster.root / "state" / "execute" / "lease.json").read_text())["owner"]
    # Frozen inside a write, it would hold the lease file's lock and nobody could take over until it thaws
    # (docs/deployment.md); this test wants the frozen writer that can be taken over.
    if step is None or owner_now != owner or _holds_a_flock(pid):
        signal_pids([pid], signal.SIGCONT)
        return None
    return pid, step


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_frozen_worker_is_taken_over_and_its_late_writes_discarded(cluster: Cluster) -> None:
    """The issue's case: two execute workers; the one inside RunEvaluation is frozen past its lock; the
    reaper re-dispatches, the other worker finishes the run; the frozen one thaws and writes nothing."""
    cluster.workers()
    cluster.worker("execute", "execute-second")
    cluster.start_run()
    child, step = wait_for(lambda: _freeze_the_writer(cluster, "RunEvaluation"), "a step inside RunEvaluation",
                           diagnose=cluster.diagnose, interval=0.01)
    try:
        record = cluster.wait_done(timeout=180)
    finally:
        signal_pids([child], signal.SIGCONT)
    _finished(cluster, record)
    discarded = cluster.root / "state" / "execute" / "discarded.jsonl"
    wait_for(discarded.exists, "the thawed worker to find its lease taken", timeout=120, diagnose=cluster.diagnose)
    assert alive(child)  # it did not crash: it stopped writing and said so
    noted = Folder(cluster.root).read_jsonl(discarded).records
    assert [n["step"] for n in noted] == [step["step"]] and "refused" in noted[0]["reason"]
    time.sleep(2)  # anything else it would write has had time to land
    _finished(cluster, cluster.run_json())
    report = json.loads((cluster.root / "execution_outputs/iteration_1/report.json").read_text())
    payload = json.loads((cluster.root / "handoffs/iteration_1/execute_to_init_context.json").read_text())
    assert report["success_rate"] == payload["success_rate"] == record["results"][0]["success_rate"]


def test_a_run_whose_worker_died_while_proving_is_resumed(folder: Path, sent: list[Task]) -> None:
    """The proving phase runs the gates as a task under the phase lock; a worker that died there leaves the run
    in "proving" with no lock held, which the reaper once left alone for good."""
    from scenarios.run import claim_run, load_run, save_run

    root = folder / SCENARIO
    record = load_run(root)
    save_run(root, record.model_copy(update={"phase": "proving"}), claim_run(root))
    _age(root, 25)
    healed = _scan(folder, fakeredis.FakeRedis())
    assert SCENARIO in healed and sent == healed[SCENARIO] and sent

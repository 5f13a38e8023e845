"""The Celery runtime with real processes (docs/deployment.md): real workers on a private Redis.

Every test starts its own broker (a real ``redis-server`` on a free port, or fakeredis'
``TcpFakeServer``), real ``celery worker`` processes for the three queues, and runs the
example scenario with the simulated model. Processes are stopped by pid in finalizers.
"""

from __future__ import annotations

import ast
import base64
import json
import re
import signal
import urllib.error
import urllib.request
import uuid

import pytest
import redis

from tests.workers_harness import (
    QUEUES,
    ROLES,
    SCENARIO,
    WAIT_S,
    Cluster,
    FakeRedisServer,
    alive,
    assert_each_response_once,
    descendants,
    free_port,
    freeze_inside_tool,
    signal_pids,
    wait_for,
)
from workers.app import STEP_PRIORITY
from workers.loop import start

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # real Celery workers


@pytest.fixture
def fake_redis_server():
    server = FakeRedisServer()
    yield server
    server.stop()


@pytest.fixture(params=["redis-server", "fakeredis"])
def broker(request):
    return request.getfixturevalue("redis_server" if request.param == "redis-server" else "fake_redis_server")


def _cluster(request, url, tmp_path) -> Cluster:
    cluster = Cluster(url, tmp_path)
    request.addfinalizer(cluster.stop_all)  # runs before the broker's own finalizer
    return cluster


@pytest.fixture
def cluster(request, redis_server, tmp_path) -> Cluster:
    return _cluster(request, redis_server.url, tmp_path)


def assert_finished_cleanly(cluster: Cluster, record: dict) -> None:
    assert record["phase"] == "done" and record["status"] == "succeeded", record
    assert record["iteration"] == 2 and [r["iteration"] for r in record["results"]] == [1, 2], record
    assert record["last_error"] is None
    disks = cluster.agent_logs()  # assert_log_consistent for every agent
    assert_each_response_once(disks)
    for role, disk in disks.items():
        assert disk.turn_over(), f"{role}'s last turn did not end with a handoff"
        assert {r.iteration for r in disk.steps} == {1, 2}, role
    for n in (1, 2):
        for kind in ("init_to_execute", "execute_to_init"):
            assert (cluster.root / "handoffs" / f"iteration_{n}" / f"{kind}_context.json").is_file()


def stale_locks(url: str, longer_than: float) -> dict[str, int]:
    """Agent locks whose time to live is longer than ``longer_than`` seconds."""
    client = redis.Redis.from_url(url)
    try:
        ttls = {key.decode(): client.ttl(key) for key in client.scan_iter("baton:lock:*")}
    finally:
        client.close()
    return {key: ttl for key, ttl in ttls.items() if ttl > longer_than}


def assert_killed_locks_expire(url: str) -> None:
    """A lock held by a process killed with SIGKILL is never released; unless it expires soon,
    every later task for that agent retries on LockBusy and the run cannot go on."""
    stuck = stale_locks(url, longer_than=90)
    assert not stuck, (
        f"the killed worker's agent lock lives on (key: seconds left) {stuck}: every task of that agent "
        "retries on LockBusy until it expires, so the run cannot go on. workers/tasks.py agent_lock takes "
        "it for LOCK_TIMEOUT_S (4 h); it needs a short TTL renewed while the step runs.")


# ---- 1. a whole run on three real workers ------------------------------------------------


def test_run_to_done_on_three_workers(broker, request, tmp_path):
    cluster = _cluster(request, broker.url, tmp_path)
    every_gate = request.node.callspec.params["broker"] == "redis-server"
    if every_gate:  # the example's own five gates, the blind solver included, proven on workers (issue 31, item 7)
        cluster.env.pop("BATON_PROVING_GATES", None)
    cluster.workers()
    cluster.start_run()
    record = cluster.wait_done()
    assert_finished_cleanly(cluster, record)
    if every_gate:
        for n in (1, 2):
            report = json.loads((cluster.root / f"execution_outputs/iteration_{n}/report.json").read_text())
            assert sorted(report["quality"]["ran"]) == ["coverage", "duplicate", "floor", "gold", "mutation", "policy",
                                                        "solver"], n
        assert report["quality"]["figures"]["floor"] == {"do_nothing": 0.0, "reckless": 0.0, "refuse_all": 0.0}
        assert report["quality"]["figures"]["solver"]["solvable_share"] == 1.0
    # Each queue's own worker served it, and only it.
    logs = {q: next(p for p in cluster.procs if p.name == f"worker-{q}").tail(10**7) for q in QUEUES}
    for role in ROLES:
        assert f"'agent': '{role}', 'step': 1, 'status': 'continue'" in logs[role], (
            f"the {role} worker ran no {role} step"
        )
        # (a phase or proving task the execute worker ran may name the next Init step it sent: that is no step run)
        ran = re.findall(r"Task baton\.step [^ ]+/(\w+) ", logs[role])
        assert ran and set(ran) == {role}, f"the {role} worker ran steps of {sorted(set(ran) - {role})}"
    # Tasks carry readable shadow names (workers/tasks.py): "baton.step refund_desk/init iteration 1 step 4".
    assert "Task baton.compaction " in logs["compaction"] and "Task baton.step " not in logs["compaction"]


# ---- 2. kill -9 inside a step, a new worker finishes the run ------------------------------


def test_kill9_inside_a_step_then_a_new_worker_finishes(cluster):
    workers = cluster.workers()
    cluster.start_run()
    old = workers["execute"]
    # The pool process (the one executing the task) dies inside iteration 1's first evaluation:
    # its model response is persisted, the RunEvaluation tool is half way, no results yet.
    child, step = freeze_inside_tool(cluster, old, "RunEvaluation")
    victims = [child, *descendants(child)]
    signal_pids(victims, signal.SIGKILL)
    wait_for(lambda: not any(alive(p) for p in victims), "the killed processes to be gone", timeout=30)
    pending = cluster.pending_tool_step("execute")
    assert pending is not None and pending["step"] == step["step"], "the kill did not land inside the step"

    assert_killed_locks_expire(cluster.broker_url)
    # The worker's main process saw its child die (task_reject_on_worker_lost puts the message
    # back); stop it, and let a brand-new worker process take over the execute queue.
    old.stop(grace=60)
    assert "signal 9" in old.tail(10**7) or "WorkerLostError" in old.tail(10**7), old.tail()
    cluster.worker("execute", "execute-new")

    record = cluster.wait_done()
    assert_finished_cleanly(cluster, record)
    disk = cluster.agent_logs()["execute"]
    killed = [r for r in disk.records if r.step == step["step"] and r.kind in ("assistant", "results")]
    assert [r.kind for r in killed] == ["assistant", "results"], killed  # answered once, results once
    assert killed[0].request == step["request"]  # the persisted response was kept, not asked again
    assert any(r.step == step["step"] + 1 for r in disk.steps), "the run did not go on after the killed step"


# ---- 3. duplicated and re-delivered tasks ----------------------------------------------------


def stored_results(url: str) -> dict[str, dict]:
    """task id -> stored result of every finished task in the result backend."""
    client = redis.Redis.from_url(url)
    try:
        out = {}
        for key in client.scan_iter("celery-task-meta-*"):
            meta = json.loads(client.get(key))
            if meta.get("status") == "SUCCESS":
                out[meta["task_id"]] = meta["result"]
        return out
    finally:
        client.close()


def test_duplicated_and_redelivered_tasks_do_nothing_twice(cluster):
    app = cluster.client
    due = start(cluster.root, auto_approve=True)
    assert [(t.kind, t.agent, t.number) for t in due] == [("step", "init", 1)]
    step_1 = [SCENARIO, "init", 1]
    # The same step sent twice, served by two init workers at once (the lock, then the step number).
    copies = [app.send_task("baton.step", args=step_1, queue="init", priority=STEP_PRIORITY) for _ in range(2)]
    cluster.workers()
    cluster.worker("init", "init-second")
    outcomes = [c.get(timeout=WAIT_S) for c in copies]
    assert sorted(o["status"] for o in outcomes) == ["continue", "skipped"], outcomes
    assert "already done" in next(o for o in outcomes if o["status"] == "skipped")["reason"]
    assert_finished_cleanly(cluster, cluster.wait_done())

    # Re-deliveries after the work is done: the same message (same task id, same arguments)
    # arrives again, for an ordinary step, for each agent's handoff step, for a compaction and
    # for a phase transition.
    logs_before = {role: (cluster.root / "state" / role / "log.jsonl").read_bytes() for role in ROLES}
    events_before = {role: (cluster.root / "state" / role / "events.jsonl").read_bytes() for role in ROLES}
    run_before = (cluster.root / "run.json").read_bytes()
    finished = stored_results(cluster.broker_url)
    steps = {(r["agent"], r["step"], r["status"]): tid for tid, r in finished.items() if "step" in r}
    compactions = {tid: r for tid, r in finished.items() if "after_step" in r}
    phases = [tid for tid, r in finished.items() if set(r) == {"scenario", "next"}]
    assert compactions and phases, finished
    last = {role: max(s for (a, s, _) in steps if a == role) for role in ROLES}
    ordinary = min(s for (a, s, status) in steps if a == "execute" and status == "continue")
    again = [("baton.step", steps[("execute", ordinary, "continue")], [SCENARIO, "execute", ordinary], "execute")]
    again += [
        ("baton.step", steps[(role, last[role], "handoff")], [SCENARIO, role, last[role]], role) for role in ROLES
    ]
    again += [
        ("baton.compaction", tid, [SCENARIO, r["agent"], r["after_step"]], "compaction")
        for tid, r in compactions.items()
    ]
    again += [("baton.phase", tid, [SCENARIO], "compaction") for tid in phases]
    for name, task_id, args, queue in again:
        app.AsyncResult(task_id).forget()
        app.send_task(name, args=args, queue=queue, task_id=task_id)
    for name, task_id, args, _ in again:
        result = app.AsyncResult(task_id).get(timeout=WAIT_S)
        if name == "baton.step":
            assert result["status"] == "skipped" and "already done" in result["reason"], (args, result)
        else:  # nothing follows from a stale compaction or a finished run's phase
            assert result["next"] == [], (name, args, result)

    for role in ROLES:
        assert (cluster.root / "state" / role / "log.jsonl").read_bytes() == logs_before[role], f"{role}'s log changed"
        assert (cluster.root / "state" / role / "events.jsonl").read_bytes() == events_before[role], (
            f"{role}'s events changed"
        )
    assert (cluster.root / "run.json").read_bytes() == run_before
    disks = cluster.agent_logs()
    assert_each_response_once(disks)
    for role, disk in disks.items():  # one assistant record per step number
        assert [r.step for r in disk.steps] == list(range(1, last[role] + 1)), role


# ---- 4. everything killed mid-iteration, resumed from disk --------------------------------


def test_all_workers_killed_mid_iteration_then_resume(cluster):
    workers = cluster.workers()
    cluster.start_run()
    # Frozen inside a step (after three execute steps), then every process dies at once:
    # workers, pool processes, anything they ran; no warm shutdown, nothing acknowledged.
    _, step = freeze_inside_tool(cluster, workers["execute"], after_steps=3)
    for proc in workers.values():
        proc.kill9()
    record = cluster.run_json()
    assert record["phase"] == "executing" and record["iteration"] == 1, record
    assert cluster.pending_tool_step("execute")["step"] == step["step"]
    killed_at = step["step"]

    assert_killed_locks_expire(cluster.broker_url)
    cluster.workers(suffix="-new")
    cluster.resume_run()  # the step in flight is stuck in the dead worker's unacked set: resume re-sends it
    record = cluster.wait_done()
    assert_finished_cleanly(cluster, record)
    disk = cluster.agent_logs()["execute"]
    killed = [r for r in disk.records if r.step == killed_at and r.kind in ("assistant", "results")]
    assert [r.kind for r in killed] == ["assistant", "results"] and killed[0].request == step["request"], killed
    assert disk.steps[-1].step > killed_at


# ---- 5. Flower lists the tasks -------------------------------------------------------------


def flower_get(port: int, path: str, auth: str | None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def test_flower_lists_step_and_compaction_tasks(cluster):
    port, auth = free_port(), f"baton:{uuid.uuid4().hex}"
    flower = cluster.flower(port, auth)
    wait_for(lambda: flower_get(port, "/healthcheck", None) == (200, b"OK"), "Flower to serve",
             diagnose=flower.tail)
    cluster.workers()

    def workers_seen():  # Flower's metrics come from worker events: it is receiving them
        _, body = flower_get(port, "/metrics", auth)
        return all(f'flower_worker_online{{worker="{q}@' in body.decode() for q in QUEUES)

    wait_for(workers_seen, "Flower to see the three workers' events", diagnose=cluster.diagnose)
    assert flower_get(port, "/api/tasks", None)[0] == 401  # the API needs the credentials
    cluster.start_run()
    cluster.wait_done()
    disks = cluster.agent_logs()
    want_steps = {(role, r.step) for role, disk in disks.items() for r in disk.steps}
    want_compactions = {(role, e.after_step) for role, disk in disks.items() for e in disk.events
                        if e.kind == "compaction"}
    assert want_compactions, "the demo profile should compact"

    def listed():
        status, body = flower_get(port, "/api/tasks", auth)
        if status != 200:
            return None
        tasks = list(json.loads(body).values())
        finished = [t for t in tasks if t.get("state") == "SUCCESS"]
        steps = {tuple(ast.literal_eval(t["args"])) for t in finished if kind(t) == "baton.step"}
        compactions = {tuple(ast.literal_eval(t["args"])) for t in finished if kind(t) == "baton.compaction"}
        ok = {(SCENARIO, *s) for s in want_steps} <= steps and {(SCENARIO, *c) for c in want_compactions} <= compactions
        return tasks if ok else None

    tasks = wait_for(listed, "Flower to list every step and compaction task", timeout=60,
                     diagnose=lambda: flower_get(port, "/api/tasks", auth)[1].decode()[:3000])
    finished = [t for t in tasks if t.get("state") == "SUCCESS"]
    names = {kind(t) for t in finished}
    assert {"baton.step", "baton.compaction", "baton.phase"} <= names, names
    step_names = {t["name"] for t in finished if kind(t) == "baton.step"}
    # Flower shows whose step each task is (the harness sends the first step itself, under its plain name)
    assert f"baton.step {SCENARIO}/init iteration 1 step 2" in step_names, step_names
    workers_by_name = {name: set() for name in names}
    for t in finished:
        workers_by_name[kind(t)].add(t["worker"].split("@")[0])
    assert workers_by_name["baton.compaction"] == {"compaction"}
    assert workers_by_name["baton.step"] == {"init", "execute"}


def kind(task: dict) -> str:
    """A task's registered name, in front of the shadow name it is listed under."""
    return task["name"].split()[0]

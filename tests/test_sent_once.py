"""Each step is sent once (real Celery workers on a private redis-server).

What is sent is counted from the ``task-sent`` events every sender publishes (``task_send_sent_event``
in workers/app.py), the events Flower lists tasks from: one per message put on the broker, whichever
process sent it (a worker, the CLI, the test). A step sent twice is one the agent's step number fences
(harmless), but it is a task run for nothing and a step listed twice in Flower.
"""

from __future__ import annotations

import ast
import sys
import threading
import time
from collections import Counter
from typing import Any

import pytest

from tests.workers_harness import SCENARIO, WAIT_S, Cluster, Proc, spawn, wait_for
from workers.loop import Task, Team, run_task, start

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # real Celery workers

# No reaper: these tests count what the loop sends, and a reaper that found a run idle (a test that stops it
# at a compaction on purpose) would send its due step once more.
NO_REAPER = {"BATON_REAPER_INTERVAL_S": "0"}


class SentTasks:
    """Every ``task-sent`` event on the test's broker, from the moment ``listening`` returns."""

    def __init__(self, cluster: Cluster):
        self.app = cluster.client
        self.events: list[dict[str, Any]] = []
        self.seen = threading.Event()  # any event at all: the receiver is subscribed
        self.receiver = None
        self.thread = threading.Thread(target=self._listen, name="task-sent events", daemon=True)
        self.thread.start()

    def _listen(self) -> None:
        with self.app.connection_for_read() as connection:
            self.receiver = self.app.events.Receiver(connection, handlers={"*": self._on})
            self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def _on(self, event: dict[str, Any]) -> None:
        self.seen.set()
        if event.get("type") == "task-sent":
            self.events.append(event)

    def listening(self) -> None:
        """Return once the receiver gets events (Redis delivers them only to subscribers already there)."""
        with self.app.events.default_dispatcher() as dispatcher:
            def answered() -> bool:
                dispatcher.send("baton-test-ping")
                return self.seen.wait(0.2)

            wait_for(answered, "the event receiver to subscribe", timeout=30)

    def stop(self) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.thread.join(timeout=10)

    def sent(self, name: str) -> Counter[tuple[Any, ...]]:
        """How many tasks ``name`` were sent with each argument list: distinct task ids, as Flower lists them (a
        retry, LockBusy say, sends its message again under the same id)."""
        tasks = {e["uuid"]: tuple(ast.literal_eval(e["args"])) for e in self.events if e.get("name") == name}
        return Counter(tasks.values())

    def ids(self, name: str) -> list[str]:
        return [e["uuid"] for e in self.events if e.get("name") == name]


@pytest.fixture
def cluster(request, redis_server, tmp_path) -> Cluster:
    cluster = Cluster(redis_server.url, tmp_path)
    cluster.env |= NO_REAPER
    request.addfinalizer(cluster.stop_all)  # runs before the broker's own finalizer
    return cluster


@pytest.fixture
def sent(cluster) -> SentTasks:
    listener = SentTasks(cluster)
    yield listener
    listener.stop()  # before the cluster's finalizer closes the client and the broker stops


def twice(counts: Counter[tuple[Any, ...]]) -> dict[tuple[Any, ...], int]:
    return {args: n for args, n in sorted(counts.items()) if n > 1}


def test_each_step_and_compaction_is_sent_once_in_a_whole_run(cluster, sent):
    sent.listening()
    cluster.workers()
    cluster.start_run()
    cluster.wait_done()
    disks = cluster.agent_logs()
    steps = {(SCENARIO, role, r.step) for role, disk in disks.items() for r in disk.steps}
    compactions = {(SCENARIO, role, e.after_step) for role, disk in disks.items() for e in disk.events
                   if e.kind == "compaction"}
    assert compactions, "the demo profile should compact"

    def all_heard() -> bool:  # each task was sent before the run could end; its event may still be on its way
        return steps <= set(sent.sent("baton.step")) and compactions <= set(sent.sent("baton.compaction"))

    wait_for(all_heard, "a task-sent event for every step and compaction on disk", timeout=30)
    time.sleep(1)  # and for any second copy
    assert not twice(sent.sent("baton.step")), f"steps sent more than once: {twice(sent.sent('baton.step'))}"
    assert set(sent.sent("baton.step")) == steps, "a step was sent that the run never took"
    assert not twice(sent.sent("baton.compaction")), twice(sent.sent("baton.compaction"))
    assert set(sent.sent("baton.compaction")) == compactions


# ---- the compaction's step under redelivery ---------------------------------------------------


def up_to_first_compaction(cluster: Cluster) -> Task:
    """Init's first steps run here, in the test (nothing sent), up to the first compaction they ask for."""
    tasks = start(cluster.root, auto_approve=True, profile="demo")
    team = Team(cluster.root, profile="demo", env=cluster.env)
    while tasks:
        task = tasks.pop(0)
        if task.kind == "compaction":
            return task
        _, following = run_task(task, team, cluster.root)
        tasks += following
    raise AssertionError("init's turn asked for no compaction")


def dying_compaction_worker(cluster: Cluster) -> Proc:
    """The compaction queue's worker, whose process dies once before it sends a compaction's step."""
    env = cluster.env | {"BATON_TEST_DIED": str(cluster.base / "died")}
    argv = [sys.executable, "-m", "celery", "-A", "tests.dying_worker", "worker", "-Q", "compaction", "-c", "1",
            "-n", "compaction@%h", "-P", "prefork", "-E", "--without-mingle", "--loglevel=INFO"]
    proc = spawn("worker-compaction", argv, env, cluster.logs)
    cluster.procs.append(proc)
    return proc


def test_a_compaction_whose_worker_died_before_sending_its_step_sends_it_once(cluster, sent):
    compaction = up_to_first_compaction(cluster)
    step = (SCENARIO, "init", compaction.number + 1)
    sent.listening()
    worker = dying_compaction_worker(cluster)
    cluster.dispatch([compaction])
    (task_id,) = wait_for(lambda: sent.ids("baton.compaction"), "the compaction to be sent")
    # The first delivery compacted and died before sending the step; the broker delivered it again.
    cluster.client.AsyncResult(task_id).get(timeout=WAIT_S)
    said = worker.tail(10**7)
    assert (cluster.base / "died").exists() and ("signal 9" in said or "WorkerLostError" in said), said[-3000:]
    wait_for(lambda: sent.sent("baton.step")[step], f"step {step} to be sent")
    time.sleep(1)
    assert sent.sent("baton.step") == {step: 1}, sent.sent("baton.step")
    # It is the step that runs next: an init worker takes it.
    cluster.worker("init")
    wait_for(lambda: compaction.number + 1 in cluster.assistant_steps("init"), f"init's step {step[2]} on disk",
             diagnose=cluster.diagnose)


def test_a_compaction_delivered_again_after_sending_its_step_sends_nothing(cluster, sent):
    compaction = up_to_first_compaction(cluster)
    step = (SCENARIO, "init", compaction.number + 1)
    sent.listening()
    cluster.worker("compaction")  # no init worker: the step waits in its queue, so nothing moves the log on
    cluster.dispatch([compaction])
    (task_id,) = wait_for(lambda: sent.ids("baton.compaction"), "the compaction to be sent")
    first = cluster.client.AsyncResult(task_id).get(timeout=WAIT_S)
    assert [(t["kind"], t["number"]) for t in first["next"]] == [("step", step[2])], first
    # The same message again (same task id, same arguments), as the broker redelivers one whose worker
    # died after it had sent its step, before the message was acknowledged.
    cluster.client.AsyncResult(task_id).forget()
    cluster.client.send_task("baton.compaction", args=list(compaction_args(compaction)), queue="compaction",
                             task_id=task_id)
    cluster.client.AsyncResult(task_id).get(timeout=WAIT_S)
    time.sleep(1)
    assert sent.sent("baton.step") == {step: 1}, f"the step was sent again: {sent.sent('baton.step')}"


def compaction_args(task: Task) -> tuple[str, str, int]:
    assert task.agent is not None and task.number is not None
    return task.scenario, task.agent, task.number

"""``baton.gate``: one shard of an iteration's gates, on any execute worker, below the steps in priority
(workers/gate_loop.py says how a shard is done exactly once). Flower shows it as ``baton.gate refund_desk
iteration 1 floor shard 2``, with a progress event after each sample (``floor shard 2/3: 4/10 samples``).

A shard holds a lock of its own while it runs (renewed, so a killed worker's frees itself within its TTL): a
duplicate waits for it and then finds the shard done, and the reaper does not take a run whose shards are being
worked on for a stalled one.
"""

from __future__ import annotations

from celery import Task as CeleryTask

from scenarios.lease import LeaseBusy
from workers.app import app
from workers.gate_loop import do_gate, shard_name
from workers.loop import Task, scenario_root
from workers.scenario_lock import ScenarioBusy, shared_scenario_lock
from workers.task_trace import finish, received, task_span
from workers.tasks import LockBusy, agent_lock, checked, dispatch_once, iteration_of, retry


def gate_lock_name(gate: str, shard: int) -> str:
    """The lock's name beside the agents' (``workers.tasks.lock_key``): the reaper looks for ``gate:*``."""
    return f"gate:{gate}:{shard}"


@app.task(name="baton.gate", bind=True, max_retries=None)
def gate_task(self: CeleryTask, scenario: str, gate: str, shard: int) -> dict:
    checked("gate", scenario, number=shard, gate=gate)
    root = scenario_root(scenario)
    what = Task(kind="gate", scenario=scenario, gate=gate, number=shard)
    iteration = iteration_of(scenario)
    name = shard_name(root, gate, shard)

    def progress(done: int) -> None:
        line = f"{name}: {done} sample(s) done"
        self.send_event("task-progress", scenario=scenario, kind="gate", iteration=iteration, gate=gate,
                        shard=shard, samples_done=done, status="running", result=line)

    try:
        with agent_lock(scenario, gate_lock_name(gate, shard)), shared_scenario_lock(root), \
                task_span(what, root, received(self.request)) as live:
            self.send_event("task-progress", scenario=scenario, kind="gate", iteration=iteration, gate=gate,
                            shard=shard, samples_done=0, status="running", result=f"{name}: started")
            following = do_gate(root, gate, shard, on_progress=progress)
            headers = finish(live, None, following, root)
    except (LockBusy, LeaseBusy, ScenarioBusy) as exc:  # a duplicate of a running shard waits for it
        raise retry(self, exc, what) from None
    self.send_event("task-progress", scenario=scenario, kind="gate", iteration=iteration, gate=gate, shard=shard,
                    status="done", result=f"{name}: done" + ("; every shard done, merging" if following else ""))
    sent = dispatch_once(self, following, headers)
    return {"scenario": scenario, "iteration": iteration, "gate": gate, "shard": shard,
            "next": [t.model_dump() for t in sent]}

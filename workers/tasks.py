"""Celery tasks: one agent step, one compaction, one phase transition.

Each task runs one unit of ``workers.loop`` under a per-agent Redis lock, then
enqueues what comes next; no task waits on another task's result. Arguments
are ids only (scenario, agent, step number). A duplicate or re-delivered task
finds its work done by step number and does nothing twice.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import redis
import redis.lock
from celery import Task as CeleryTask

from scenarios.run import load_run
from workers.app import COMPACTION_PRIORITY, STEP_PRIORITY, app
from workers.loop import Task, Team, do_compaction, do_phase, do_step, scenario_root
from workers.spend import call_cost

log = logging.getLogger(__name__)
# A lock lives LOCK_TTL_S and is renewed every LOCK_RENEW_S while its step runs, so the lock
# of a worker killed with SIGKILL (no finally, no release) frees itself within LOCK_TTL_S.
LOCK_TTL_S = 15
LOCK_RENEW_S = LOCK_TTL_S / 3


class LockBusy(RuntimeError):
    """Another worker holds this agent; the task is retried shortly."""


def _team(root: Path) -> Team:
    record = load_run(root)
    return _team_for(root, record.profile if record else None)


@cache
def _team_for(root: Path, profile: str | None) -> Team:
    return Team(root, profile=profile)


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(app.conf.broker_url)


def _renew(lock: redis.lock.Lock, stop: threading.Event, name: str) -> None:
    while not stop.wait(LOCK_RENEW_S):
        try:
            lock.reacquire()
        except redis.exceptions.LockNotOwnedError:
            log.warning("the lock for %s expired while its step ran (process frozen?)", name)
            return
        except redis.exceptions.RedisError as exc:  # a blip: try again at the next beat
            log.warning("could not renew the lock for %s: %s", name, exc)


@contextmanager
def agent_lock(scenario: str, agent: str):
    # One step of an agent at a time; the step number fences whatever slips past (a worker
    # frozen longer than the lock's TTL, a duplicate that runs after the lock was freed).
    name = f"{scenario}/{agent}"
    # thread_local=False: the renewing thread must see the token this thread acquired.
    lock = _redis().lock(f"baton:lock:{scenario}:{agent}", timeout=LOCK_TTL_S, blocking_timeout=2, thread_local=False)
    if not lock.acquire():
        raise LockBusy(f"{name} is busy")
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(lock, stop, name), name=f"lock-{name}", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        try:
            lock.release()
        except redis.exceptions.LockError:
            log.warning("lock for %s expired before release", name)


def dispatch(tasks: list[Task]) -> None:
    for task in tasks:
        if task.kind == "step":
            app.send_task(
                "baton.step", args=[task.scenario, task.agent, task.number], queue=task.agent, priority=STEP_PRIORITY
            )
        elif task.kind == "compaction":
            app.send_task("baton.compaction", args=[task.scenario, task.agent, task.number], queue="compaction",
                          priority=COMPACTION_PRIORITY)
        else:
            app.send_task("baton.phase", args=[task.scenario], queue="compaction", priority=COMPACTION_PRIORITY)


@app.task(name="baton.step", bind=True, max_retries=None)
def step_task(self: CeleryTask, scenario: str, agent: str, step: int) -> dict:
    root = scenario_root(scenario)
    try:
        with agent_lock(scenario, agent):
            outcome, following = do_step(root, _team(root), agent, step)
    except LockBusy as exc:
        raise self.retry(exc=exc, countdown=1) from None
    model_id = _team(root)[agent].config.model.name
    self.send_event(
        "task-progress",
        scenario=scenario,
        agent=agent,
        iteration=outcome.iteration,
        step=outcome.step,
        status=outcome.status,
        tokens=outcome.tokens_in_context,
        threshold=outcome.threshold,
        model=outcome.model,
        usage=outcome.usage,  # input, cache writes, cache reads, output of this step's call
        cost_usd=call_cost(root, model_id, outcome.usage),
    )
    dispatch(following)
    return outcome.model_dump(
        include={"agent", "step", "status", "reason", "iteration", "tokens_in_context", "threshold", "model", "usage"}
    )


@app.task(name="baton.compaction", bind=True, max_retries=None)
def compaction_task(self: CeleryTask, scenario: str, agent: str, after_step: int) -> dict:
    root = scenario_root(scenario)
    try:
        with agent_lock(scenario, agent):
            outcome, following = do_compaction(root, _team(root), agent, after_step)
    except LockBusy as exc:
        raise self.retry(exc=exc, countdown=1) from None
    model_id = _team(root)[agent].config.model.name
    self.send_event("task-progress", scenario=scenario, agent=agent, kind="compaction", after_step=after_step,
                    status=outcome.status, fallback=outcome.fallback, usage=outcome.usage,
                    cost_usd=call_cost(root, model_id, outcome.usage))
    dispatch(following)
    return {"scenario": scenario, "agent": agent, "after_step": after_step, "next": [t.model_dump() for t in following]}


@app.task(name="baton.phase", bind=True, max_retries=None)
def phase_task(self: CeleryTask, scenario: str) -> dict:
    root = scenario_root(scenario)
    try:
        with agent_lock(scenario, "phase"):
            following = do_phase(root)
    except LockBusy as exc:
        raise self.retry(exc=exc, countdown=1) from None
    dispatch(following)
    return {"scenario": scenario, "next": [t.model_dump() for t in following]}

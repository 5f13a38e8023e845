"""Celery tasks: one agent step, one compaction, one phase transition.

Each task runs one unit of ``workers.loop`` under a per-agent Redis lock, then
enqueues what comes next; no task waits on another task's result. Arguments
are ids only (scenario, agent, step number). A duplicate or re-delivered task
finds its work done by step number and does nothing twice, and a re-delivered
one does not send again what its first delivery sent (``dispatch_once``).

For monitoring (Flower, docs/deployment.md): each task is sent under a readable
``shadow`` name (``baton.step refund_desk/init iteration 1 step 4``), and a step
reports its progress when it starts, before its model call, as well as after.
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
from celery.signals import worker_process_shutdown
from pydantic import ValidationError

from agents import tracing
from agents.events import StepEvent, read_events
from scenarios.lease import LeaseBusy
from scenarios.run import RunRecord, load_run
from scenarios.store import Layout, StoreError
from workers.app import COMPACTION_PRIORITY, STEP_PRIORITY, VISIBILITY_TIMEOUT_S, app
from workers.lock_ttl import lock_ttl_s
from workers.loop import Task, Team, do_compaction, do_phase, do_proving, do_step, scenario_root
from workers.scenario_lock import ScenarioBusy, shared_scenario_lock
from workers.task_trace import finish, headers_for, received, task_span

log = logging.getLogger(__name__)
GATE_PRIORITY = STEP_PRIORITY + 2  # on Redis a larger number waits longer: the gates' shards after the steps


class LockBusy(RuntimeError):
    """Another worker holds this agent; the task is retried shortly."""


class BadTaskArguments(ValueError):
    """A task arrived with arguments baton never sends: it fails at once (no retry), saying what was wrong."""


SIGNATURES = {
    "step": "(scenario, agent, step): a scenario name, init or execute, and the step number due (>= 0)",
    "compaction": "(scenario, agent, after_step): a scenario name, init or execute, and the last finished step",
    "phase": "(scenario): a scenario name",
    "proving": "(scenario): a scenario name",
    "gate": "(scenario, gate, shard): a scenario name, a gate (floor, mutation, solver, coverage, duplicate) and "
            "the shard number (>= 0)",
}


def checked(kind: str, scenario: object, agent: object = None, number: object = None, gate: object = None) -> Task:
    """The task's arguments as a ``Task``, or ``BadTaskArguments`` naming each bad one and the right form."""
    try:
        return Task(kind=kind, scenario=scenario, agent=agent, number=number, gate=gate)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'task'}: {e['msg'].removeprefix('Value error, ')}"
                             for e in exc.errors())
        sent = ", ".join(repr(a) for a in (scenario, gate, agent, number) if a is not None)
        raise BadTaskArguments(
            f"baton.{kind}({sent}) has bad arguments ({problems}). It takes {SIGNATURES[kind]}. "
            "Let baton send its tasks (`baton run NAME`, `baton resume NAME`) rather than sending them by hand"
        ) from None


def _team(root: Path) -> Team:
    record = load_run(root)
    return _team_for(root, record.profile if record else None)


_teams: dict[tuple[Path, str | None], Team] = {}
_teams_lock = threading.Lock()


def _team_for(root: Path, profile: str | None) -> Team:
    # Built once per scenario and process, under a lock: a threads pool runs many steps at once,
    # and two teams of one scenario would hold two estimators of the same agent.
    with _teams_lock:
        if (root, profile) not in _teams:
            _teams[(root, profile)] = Team(root, profile=profile)
        return _teams[(root, profile)]


@worker_process_shutdown.connect
def _send_spans(**_: object) -> None:
    # A prefork child ends without atexit: what its batch processor holds goes now (nothing when tracing is off).
    # Not after each task: a collector that is down would hold every task up for the exporter's timeout.
    tracing.flush()


@cache
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(app.conf.broker_url)


def lock_key(scenario: str, agent: str) -> str:
    """The Redis key of an agent's lock (``phase`` for the phase transitions): the reaper looks for it too."""
    return f"baton:lock:{scenario}:{agent}"


def _renew(lock: redis.lock.Lock, stop: threading.Event, name: str, every_s: float) -> None:
    while not stop.wait(every_s):
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
    # The lock lives lock_ttl_s() and is renewed every third of it while the step runs, so a killed
    # worker's lock frees itself within one TTL (workers/lock_ttl.py).
    # thread_local=False: the renewing thread must see the token this thread acquired.
    ttl = lock_ttl_s()
    lock = redis_client().lock(lock_key(scenario, agent), timeout=ttl, blocking_timeout=2, thread_local=False)
    if not lock.acquire():
        raise LockBusy(f"{name} is busy")
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(lock, stop, name, ttl / 3), name=f"lock-{name}", daemon=True)
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


def iteration_of(scenario: str) -> int | None:
    try:
        record = load_run(scenario_root(scenario))
    except (StoreError, ValueError, OSError):  # a name only: the task itself reports a broken scenario
        return None
    return record.iteration if record else None


def shadow_name(task: Task, iteration: int | None) -> str:
    """The name workers' logs and Flower show for ``task``: its kind, then scenario, agent, iteration and step.
    It starts with the task's registered name, so ``baton.step`` still finds every step."""
    within = f" iteration {iteration}" if iteration is not None else ""
    if task.kind == "step":
        return f"baton.step {task.scenario}/{task.agent}{within} step {task.number}"
    if task.kind == "compaction":
        return f"baton.compaction {task.scenario}/{task.agent}{within} after step {task.number}"
    if task.kind == "proving":
        return f"baton.proving {task.scenario}{within}"
    if task.kind == "gate":
        return f"baton.gate {task.scenario}{within} {task.gate} shard {(task.number or 0) + 1}"
    return f"baton.phase {task.scenario}{within}"


def dispatch(tasks: list[Task], headers: list[tracing.Carrier] | None = None) -> None:
    """Send ``tasks``, each with its trace headers (``workers.task_trace``; none when tracing is off)."""
    iterations: dict[str, int | None] = {}
    for i, task in enumerate(tasks):
        if task.scenario not in iterations:
            iterations[task.scenario] = iteration_of(task.scenario)
        shadow = shadow_name(task, iterations[task.scenario])
        sent = headers[i] if headers is not None else {}
        if headers is None and tracing.on():  # sent from the CLI: a step hangs from its iteration
            sent = headers_for(task, scenario_root(task.scenario))
        if task.kind == "step":
            app.send_task("baton.step", args=[task.scenario, task.agent, task.number], queue=task.agent,
                          priority=STEP_PRIORITY, shadow=shadow, headers=sent)
        elif task.kind == "compaction":
            app.send_task("baton.compaction", args=[task.scenario, task.agent, task.number], queue="compaction",
                          priority=COMPACTION_PRIORITY, shadow=shadow, headers=sent)
        elif task.kind == "proving":  # the gates may take tens of seconds: on a step queue, never compaction's
            app.send_task("baton.proving", args=[task.scenario], queue="execute", priority=STEP_PRIORITY,
                          shadow=shadow, headers=sent)
        elif task.kind == "gate":  # any execute worker takes a shard, after every step waiting (below in priority)
            app.send_task("baton.gate", args=[task.scenario, task.gate, task.number], queue="execute",
                          priority=GATE_PRIORITY, shadow=shadow, headers=sent)
        else:
            app.send_task("baton.phase", args=[task.scenario], queue="compaction", priority=COMPACTION_PRIORITY,
                          shadow=shadow, headers=sent)


# How long a task's mark that it sent what follows it lives: longer than any redelivery of its message can come
# (the broker hands an unacknowledged message out again within its visibility timeout).
SENT_MARK_S = 2 * VISIBILITY_TIMEOUT_S


def sent_key(task_id: str) -> str:
    """The Redis key that says the task ``task_id`` sent what follows it."""
    return f"baton:sent:{task_id}"


def dispatch_once(task: CeleryTask, following: list[Task], headers: list[tracing.Carrier]) -> list[Task]:
    """Send what follows ``task`` unless a delivery of the same message sent it already; returns what was sent.

    The broker delivers a message again when its worker died before acknowledging it (``task_acks_late``). The
    copy finds the work done, and a compaction's copy still names the step after it: sent again, that step
    would run twice (the second time as a skip). So once a task's followers are sent its id is marked, and a
    copy that finds the mark sends nothing; a copy whose first delivery died before sending finds none, and
    sends. Only a death between the send and the mark sends twice, and the step number fences that copy."""
    if not following:
        return []
    task_id = task.request.id
    if task_id and redis_client().exists(sent_key(task_id)):
        log.info("%s was delivered again: what follows it was sent the first time (%s)", task.request.shadow or
                 task.name, ", ".join(f"{t.kind} {t.agent or ''} {t.number or ''}".strip() for t in following))
        return []
    dispatch(following, headers)
    if task_id:
        redis_client().set(sent_key(task_id), 1, ex=SENT_MARK_S)
    return following


def retry(task: CeleryTask, exc: Exception, what: Task) -> Exception:
    """Try again in a second; the copy keeps its readable name (a retry would otherwise drop the shadow)."""
    return task.retry(exc=exc, countdown=1, shadow=shadow_name(what, iteration_of(what.scenario)))


def report_start(task: CeleryTask, root: Path, scenario: str, agent: str, step: int) -> None:
    """Before the model call: the agent's context at its last step against its threshold, as the task's state
    (``PROGRESS`` in the result backend) and as a ``task-progress`` event. Flower merges the event's fields
    into the task, so its ``result`` column shows this line until the step's own result replaces it."""
    events, _ = read_events(Layout(root).events(agent))
    last = next((e for e in reversed(events) if isinstance(e, StepEvent)), None)
    if last is None:
        context = "none yet"
    else:
        context = f"{last.estimated_input:,}/{last.threshold:,} tokens ({last.estimated_input / last.threshold:.0%})"
    # Context first: Flower cuts a long result cell, and the task's name already says whose step it is.
    line = f"context {context} at the last step; step {step} is calling the model"
    meta = {"scenario": scenario, "agent": agent, "iteration": iteration_of(scenario), "step": step,
            "status": "running", "tokens": last.estimated_input if last else None,
            "threshold": last.threshold if last else None}
    task.update_state(state="PROGRESS", meta=meta | {"line": line})
    task.send_event("task-progress", **meta, result=line)


@app.task(name="baton.step", bind=True, max_retries=None)
def step_task(self: CeleryTask, scenario: str, agent: str, step: int) -> dict:
    checked("step", scenario, agent, step)
    root = scenario_root(scenario)
    what = Task(kind="step", scenario=scenario, agent=agent, number=step)
    try:
        with agent_lock(scenario, agent), shared_scenario_lock(root):
            report_start(self, root, scenario, agent, step)
            with task_span(what, root, received(self.request)) as live:
                outcome, following = do_step(root, team := _team(root), agent, step)
                headers = finish(live, outcome, following, root)
    except (LockBusy, LeaseBusy, ScenarioBusy) as exc:  # ScenarioBusy: an embedded run holds the folder
        raise retry(self, exc, what) from None
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
        cost_usd=team[agent].cost(outcome.usage),
        said=outcome.said,  # the start of what the agent said, redacted
    )
    dispatch_once(self, following, headers)
    return outcome.model_dump(
        include={"agent", "step", "status", "reason", "iteration", "tokens_in_context", "threshold", "model", "usage"}
    )


@app.task(name="baton.compaction", bind=True, max_retries=None)
def compaction_task(self: CeleryTask, scenario: str, agent: str, after_step: int) -> dict:
    checked("compaction", scenario, agent, after_step)
    root = scenario_root(scenario)
    what = Task(kind="compaction", scenario=scenario, agent=agent, number=after_step)
    try:
        with agent_lock(scenario, agent), shared_scenario_lock(root), \
                task_span(what, root, received(self.request)) as live:
            outcome, following = do_compaction(root, team := _team(root), agent, after_step)
            headers = finish(live, outcome, following, root)
    except (LockBusy, LeaseBusy, ScenarioBusy) as exc:  # ScenarioBusy: an embedded run holds the folder
        raise retry(self, exc, what) from None
    self.send_event("task-progress", scenario=scenario, agent=agent, kind="compaction", after_step=after_step,
                    status=outcome.status, fallback=outcome.fallback, usage=outcome.usage,
                    cost_usd=team[agent].cost(outcome.usage))
    sent = dispatch_once(self, following, headers)
    return {"scenario": scenario, "agent": agent, "after_step": after_step, "next": [t.model_dump() for t in sent]}


@app.task(name="baton.phase", bind=True, max_retries=None)
def phase_task(self: CeleryTask, scenario: str) -> dict:
    checked("phase", scenario)
    root = scenario_root(scenario)
    what = Task(kind="phase", scenario=scenario)
    try:
        with agent_lock(scenario, "phase"), shared_scenario_lock(root), \
                task_span(what, root, received(self.request)) as live:
            following = do_phase(root, _team(root))
            headers = finish(live, None, following, root)
    except (LockBusy, LeaseBusy, ScenarioBusy) as exc:  # ScenarioBusy: an embedded run holds the folder
        raise retry(self, exc, what) from None
    sent = dispatch_once(self, following, headers)
    return {"scenario": scenario, "next": [t.model_dump() for t in sent]}


def proving_line(record: RunRecord | None, iteration: int | None) -> tuple[str, dict]:
    """What Flower shows of a proving task: the iteration's figures and the targets it missed (task-progress)."""
    result = next((r for r in (record.results if record else []) if r.iteration == iteration), None)
    if result is None or not result.figures:
        return "gates: no figures (the run moved on or stopped)", {}
    f = result.figures

    def share(key: str) -> str:
        return "-" if f.get(key) is None else f"{f[key]:.0%}"

    line = (f"floor {share('floor')}, mutation {share('mutation_score')}, solvable {share('solvable_share')}, "
            f"coverage {share('coverage')}, duplicates {f.get('duplicates', '-')}, findings {f.get('findings', 0)}; "
            + ("every target met" if not result.unmet else "missed: " + "; ".join(result.unmet)))
    return line, f


@app.task(name="baton.proving", bind=True, max_retries=None)
def proving_task(self: CeleryTask, scenario: str) -> dict:
    """The gates on the iteration Execute handed off, then the decision (``workers.loop.do_proving``). Under the
    ``phase`` lock: the reaper sees a run being proved as held, and no phase task moves it meanwhile."""
    checked("proving", scenario)
    root = scenario_root(scenario)
    what = Task(kind="proving", scenario=scenario)
    iteration = iteration_of(scenario)
    try:
        with agent_lock(scenario, "phase"), shared_scenario_lock(root), \
                task_span(what, root, received(self.request)) as live:
            line = f"iteration {iteration}: planning the gates, or merging them"
            self.update_state(state="PROGRESS", meta={"scenario": scenario, "iteration": iteration, "line": line})
            self.send_event("task-progress", scenario=scenario, kind="proving", iteration=iteration,
                            status="running", result=line)
            following = do_proving(root, _team(root), split=True)
            headers = finish(live, None, following, root)
    except (LockBusy, LeaseBusy, ScenarioBusy) as exc:  # ScenarioBusy: an embedded run holds the folder
        raise retry(self, exc, what) from None
    record = load_run(root)
    shards = [t for t in following if t.kind == "gate"]
    line, figures = proving_line(record, iteration) if not shards else (
        f"iteration {iteration}: {len(shards)} gate shard(s) sent to the workers", {})
    self.send_event("task-progress", scenario=scenario, kind="proving", iteration=iteration,
                    status=record.status if record else None, figures=figures, result=line)
    sent = dispatch_once(self, following, headers)
    return {"scenario": scenario, "iteration": iteration, "figures": figures, "line": line,
            "next": [t.model_dump() for t in sent]}

"""The reaper: a run whose worker died goes on by itself (docs/deployment.md, "Recovery").

A worker killed with SIGKILL leaves its task unacknowledged in Redis, and the
broker hands it to another worker only after the visibility timeout (hours, so
that a long evaluation is never run twice). Until then nothing would dispatch
the run's next task. Every worker process therefore runs this scan on a timer:

- a scenario is *stalled* when its run is ``running`` (designing or executing),
  none of its locks (init, execute, phase) is held, and nothing in its state
  (run.json, the agents' logs, events, state files, leases) changed for
  ``BATON_STALL_AFTER_S`` seconds;
- for each stalled scenario the reaper dispatches what ``resume`` derives from
  the disk (what a human's ``baton resume`` would), at most once per bound.

A Redis key lets one worker scan per interval, whichever is alive. Running a
step twice is harmless: a duplicate finds its step done (step numbers), and the
late redelivery of the original message, or a frozen worker that wakes up,
finds its lease taken (``scenarios.lease``).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import redis
from celery.signals import worker_ready, worker_shutdown
from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator

from proving.evaluation.gate_shards import activity_path
from scenarios.folder import Folder, scenario_folders
from scenarios.run import load_run
from scenarios.store import AGENTS, Layout, StoreError
from workers.lock_ttl import DEFAULT_LOCK_TTL_S, LOCK_TTL_ENV, lock_ttl_s
from workers.loop import Task, resume, scenarios_dir
from workers.scenario_lock import shared_scenario_lock
from workers.tasks import dispatch, lock_key, redis_client

log = logging.getLogger(__name__)
INTERVAL_ENV, STALL_ENV = "BATON_REAPER_INTERVAL_S", "BATON_STALL_AFTER_S"
SCAN_KEY = "baton:reaper"


class ReaperSettings(BaseModel):
    interval_s: float = Field(default=5.0, ge=0)  # 0 turns the reaper off in this worker
    lock_ttl_s: float = DEFAULT_LOCK_TTL_S  # the agent lock's (workers.lock_ttl), before the bound that outlasts it
    # Longer than the lock's TTL: a killed worker's lock must have expired before its run looks stalled.
    # Checked on the default too: a TTL set above 20 s needs a longer bound.
    stall_after_s: float = Field(default=20.0, gt=0, validate_default=True)

    @field_validator("stall_after_s")
    @classmethod
    def _outlasts_the_lock(cls, value: float, info: ValidationInfo) -> float:
        ttl = info.data.get("lock_ttl_s", DEFAULT_LOCK_TTL_S)
        if value <= ttl:
            raise ValueError(f"must be above the agent lock's TTL ({ttl:g} s, {LOCK_TTL_ENV})")
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReaperSettings:
        env = os.environ if env is None else env
        given = {field: env[name] for field, name in (("interval_s", INTERVAL_ENV), ("stall_after_s", STALL_ENV))
                 if env.get(name)}
        try:
            ttl = lock_ttl_s(env)
        except ValueError as exc:
            raise StoreError(f"bad reaper settings ({exc})") from None
        try:
            return cls.model_validate({**given, "lock_ttl_s": ttl})
        except ValidationError as exc:
            problems = "; ".join(f"{e['loc'][0]}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
            raise StoreError(f"bad reaper settings ({problems}): set {INTERVAL_ENV} to seconds >= 0 (0 turns the "
                             f"reaper off) and {STALL_ENV} to seconds above the lock's {ttl:g} s") from None


def last_progress(root: Path) -> float:
    """When the run last changed on disk: the newest of run.json and the agents' state files."""
    layout = Layout(root)
    paths = [layout.run_json, layout.run_lease]
    for agent in AGENTS:
        paths += [layout.log(agent), layout.events(agent), layout.state(agent) / "agent.json", layout.lease(agent)]
    paths.append(activity_path(root))  # the gates' shards, touched after each sample they do
    folder = Folder(root)
    times = [t for p in paths if (t := folder.mtime(p)) is not None]
    return max(times, default=0.0)


def stalled(root: Path, client: redis.Redis, settings: ReaperSettings, now: float) -> bool:
    record = load_run(root)
    if record is None or record.status != "running" or record.phase not in ("designing", "executing", "proving"):
        return False  # finished, waiting for a human, or stopped on an error a human must see
    if now - last_progress(root) < settings.stall_after_s:
        return False
    if any(client.exists(lock_key(root.name, who)) for who in (*AGENTS, "phase")):
        return False
    # A gate shard being worked on holds a lock of its own (workers/gate_tasks.py); glob characters in the name
    # are escaped, so one scenario's shards never count for another's.
    pattern = re.sub(r"([*?\[\]\\])", r"\\\1", lock_key(root.name, "gate:")) + "*"
    return next(iter(client.scan_iter(match=pattern, count=1000)), None) is None


def reap(folder: Path, client: redis.Redis, settings: ReaperSettings,
         now: float | None = None) -> dict[str, list[Task]]:
    """One scan of ``folder``: what was dispatched, per stalled scenario. Only one worker scans per interval."""
    if not client.set(SCAN_KEY, f"{socket.gethostname()}:{os.getpid()}", nx=True, px=int(settings.interval_s * 900)):
        return {}  # another worker scanned moments ago
    now = time.time() if now is None else now
    healed: dict[str, list[Task]] = {}
    for root in scenario_folders(folder, "run.json"):
        try:
            if not stalled(root, client, settings, now):
                continue
            # At most once per bound: the re-dispatched step needs time to show progress.
            if not client.set(f"baton:reaped:{root.name}", "1", nx=True, px=int(settings.stall_after_s * 1000)):
                continue
            with shared_scenario_lock(root):  # an embedded run that holds the folder is skipped (ScenarioBusy)
                tasks = resume(root)
            log.warning("%s made no progress for %.0f s with no worker holding it: dispatching %s", root.name,
                        now - last_progress(root), ", ".join(f"{t.kind} {t.agent or ''} {t.number or ''}".strip()
                                                             for t in tasks) or "nothing")
            dispatch(tasks)
            healed[root.name] = tasks
        except (StoreError, ValueError, OSError, RuntimeError) as exc:  # one broken scenario must not stop the scan
            log.warning("reaper: %s skipped: %s", root.name, exc)
    return healed


class Reaper:
    """The timer thread in a worker's main process."""

    def __init__(self, settings: ReaperSettings, folder: Path):
        self.settings, self.folder = settings, folder
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="baton-reaper", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.settings.interval_s):
            try:
                reap(self.folder, redis_client(), self.settings)
            except redis.exceptions.RedisError as exc:  # the broker is down: the worker says so elsewhere
                log.warning("reaper: no scan (%s)", exc)


_running: list[Reaper] = []


@worker_ready.connect
def _start(**_: object) -> None:
    settings = ReaperSettings.from_env()
    if settings.interval_s == 0:
        log.info("reaper off (%s=0)", INTERVAL_ENV)
        return
    reaper = Reaper(settings, scenarios_dir())
    reaper.thread.start()
    _running.append(reaper)
    log.info("reaper: every %g s, a run idle for %g s with no lock held is resumed", settings.interval_s,
             settings.stall_after_s)


@worker_shutdown.connect
def _stop(**_: object) -> None:
    for reaper in _running:
        reaper.stop.set()


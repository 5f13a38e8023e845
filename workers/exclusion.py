"""An embedded run with a broker configured also holds the workers' Redis locks (one per agent and one for
phase changes), beside the scenario's file lock (``workers.scenario_lock``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import redis

from scenarios.store import AGENTS
from workers.app import broker_url
from workers.scenario_lock import ScenarioBusy


@contextmanager
def workers_excluded(root: Path) -> Iterator[None]:
    """With a broker configured, also hold the Redis locks the workers take (one per agent and
    one for phase changes), so an ``--embedded`` run and workers never step the same agent at
    once: a worker's task finds its agent busy and is retried until this run ends.

    Raises ``ScenarioBusy`` if a worker is in the middle of a task of this scenario. A broker
    that does not answer is passed over: an embedded run needs none."""
    if broker_url() is None:
        yield
        return
    # Imported here: the Celery app reads the broker URL when imported, and a plain embedded run needs no Celery.
    from workers.tasks import LockBusy, agent_lock

    locks = ExitStack()
    try:
        for agent in (*AGENTS, "phase"):
            locks.enter_context(agent_lock(root.name, agent))
    except LockBusy:
        locks.close()
        raise ScenarioBusy(Path(root), None, by_workers=True) from None
    except (redis.exceptions.RedisError, ValueError):  # no answer, or a broker URL redis cannot read
        locks.close()
        locks = ExitStack()
    with locks:
        yield

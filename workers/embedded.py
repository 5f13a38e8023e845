"""Embedded mode: the same tasks, run in this process (no broker, no services).

Compaction tasks run before steps, as the dedicated compaction worker would
serve them first.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping

from agents import tracing
from workers.loop import Task, Team, run_task, scenario_root
from workers.task_trace import finish, task_span

PRIORITY = {"compaction": 0, "phase": 1, "proving": 2, "step": 2, "gate": 3}  # gates below steps, as on Redis


def run_embedded(tasks: Iterable[Task], team: Team, *, env: Mapping[str, str] | None = None,
                 on_task: Callable[[Task, list[Task]], None] | None = None, max_tasks: int = 100_000) -> int:
    """Run ``tasks`` and everything they lead to; returns how many tasks ran."""
    order = itertools.count()
    # Each task with the trace headers it was "sent" with, as the Celery tasks carry them (empty when off).
    queue: list[tuple[int, int, Task, tracing.Carrier]] = []
    for task in tasks:
        heapq.heappush(queue, (PRIORITY[task.kind], next(order), task, {}))
    done = 0
    while queue and done < max_tasks:
        _, _, task, sent = heapq.heappop(queue)
        root = scenario_root(task.scenario, env)
        with task_span(task, root, sent) as live:
            outcome, following = run_task(task, team, root)
            headers = finish(live, outcome, following, root)
        done += 1
        if on_task:
            on_task(task, following)
        for nxt, carrier in zip(following, headers, strict=True):
            heapq.heappush(queue, (PRIORITY[nxt.kind], next(order), nxt, carrier))
    return done

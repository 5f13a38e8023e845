"""Embedded mode: the same tasks, run in this process (no broker, no services).

Compaction tasks run before steps, as the dedicated compaction worker would
serve them first.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping

from workers.loop import Task, Team, run_task

PRIORITY = {"compaction": 0, "phase": 1, "step": 2}


def run_embedded(tasks: Iterable[Task], team: Team, *, env: Mapping[str, str] | None = None,
                 on_task: Callable[[Task, list[Task]], None] | None = None, max_tasks: int = 100_000) -> int:
    """Run ``tasks`` and everything they lead to; returns how many tasks ran."""
    order = itertools.count()
    queue: list[tuple[int, int, Task]] = []
    for task in tasks:
        heapq.heappush(queue, (PRIORITY[task.kind], next(order), task))
    done = 0
    while queue and done < max_tasks:
        _, _, task = heapq.heappop(queue)
        following = run_task(task, team, env)
        done += 1
        if on_task:
            on_task(task, following)
        for nxt in following:
            heapq.heappush(queue, (PRIORITY[nxt.kind], next(order), nxt))
    return done

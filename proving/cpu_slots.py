"""A bound on CPU-heavy work in one worker process.

A worker that serves many steps at once (``baton worker ROLE --concurrency N``, a
threads pool) spends most of each step waiting on the model. What a step runs on this
machine, however, competes for cores: the evaluation's sample processes and the Bash
tool's commands. Each takes a slot here first, so N waiting steps never turn into N
CPU-bound children on a machine with fewer cores. The default is one slot per core
(``os.cpu_count()``); ``BATON_CPU_SLOTS`` sets another.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SLOTS_ENV = "BATON_CPU_SLOTS"


def slots_from_env(env: dict[str, str] | None = None) -> int:
    value = (os.environ if env is None else env).get(SLOTS_ENV, "")
    if not value:
        return os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{SLOTS_ENV}={value!r} must be a whole number of 1 or more (CPU-heavy jobs at once)")
    return int(value)


_slots = threading.BoundedSemaphore(slots_from_env())
_busy = 0
_busy_lock = threading.Lock()


@contextmanager
def cpu_slot() -> Iterator[None]:
    """Hold one of the process's CPU slots while the body runs (waiting for one if none is free)."""
    global _busy
    with _slots:
        with _busy_lock:
            _busy += 1
        try:
            yield
        finally:
            with _busy_lock:
                _busy -= 1


def busy() -> int:
    """How many slots are held now (for tests and the scale bench)."""
    return _busy

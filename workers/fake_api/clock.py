"""The double's clock for cache lifetimes, which a test moves forward instead of sleeping.

``PromptCache`` already takes a clock; a test that holds the ``FakeApi`` object can pass its own.
A test that drives the double over HTTP, or ``baton fake-api`` as a process, cannot: it calls
``POST /clock {"advance_s": N}`` and every TTL sees N more seconds gone. ``GET /clock`` says where
the clock stands. Time only goes forward, as the monotonic clock under it does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MAX_ADVANCE_S = 366 * 24 * 3600.0  # a year: far past any TTL, and a typo of a few zeros is refused


class ClockMove(BaseModel):
    """The body of ``POST /clock``."""

    model_config = ConfigDict(extra="forbid")
    advance_s: float = Field(ge=0, le=MAX_ADVANCE_S)


class MovableClock:
    """``base()`` plus the seconds moved forward so far; safe across the server's threads."""

    def __init__(self, base: Callable[[], float] = time.monotonic) -> None:
        self.base = base
        self._advanced_s = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.base() + self._advanced_s

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._advanced_s += seconds

    def state(self) -> dict[str, Any]:
        """What ``GET /clock`` answers: the clock's reading and how far tests have moved it."""
        with self._lock:
            return {"now_s": self.base() + self._advanced_s, "advanced_s": self._advanced_s}

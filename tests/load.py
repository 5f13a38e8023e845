"""Bounds that scale with the machine's load, for tests that wait on real processes (light: no Celery import)."""

from __future__ import annotations

import os


def load_scaled(seconds: float) -> float:
    """``seconds`` stretched by the machine's load: the one-minute load average per core, at least 1 and at most
    6. A wait for a takeover or a run on a busy machine (six busy processes on two cores, say) must make the
    test slower, not red; on a quiet machine the bound is the one written."""
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return seconds * min(6.0, max(1.0, per_core))

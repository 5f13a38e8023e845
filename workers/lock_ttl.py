"""How long an agent's Redis lock outlives its holder: ``BATON_LOCK_TTL_S`` (default 15 s).

A step holds its agent's lock while it runs and renews it every third of this, so a worker
killed with SIGKILL (no finally, no release) frees its agents within one TTL, and a worker
frozen longer than that loses the lock to whoever takes the step over (the lease fences its
late writes). A shorter TTL means faster takeover, but a holder that cannot renew for a third
of it (a very loaded machine) loses a lock it still uses; its step is then fenced, not doubled.
The reaper's stall bound must exceed it (``workers.reaper``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

LOCK_TTL_ENV = "BATON_LOCK_TTL_S"
DEFAULT_LOCK_TTL_S = 15.0
MIN_LOCK_TTL_S = 1.0  # a third of it is the renewal period: below ~0.3 s a GIL turn could miss one


def lock_ttl_s(env: Mapping[str, str] | None = None) -> float:
    """The lock TTL in seconds from ``env`` (the process environment by default); ``ValueError`` naming the
    variable, its value and what it takes when it is not a number of at least ``MIN_LOCK_TTL_S``."""
    value = (os.environ if env is None else env).get(LOCK_TTL_ENV, "").strip()
    if not value:
        return DEFAULT_LOCK_TTL_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan  # refused below, with the other values that are no number of seconds
    if not (math.isfinite(seconds) and seconds >= MIN_LOCK_TTL_S):
        raise ValueError(f"{LOCK_TTL_ENV}={value!r} must be a number of seconds of at least {MIN_LOCK_TTL_S:g} "
                         f"(how long a dead worker's agent lock lives; default {DEFAULT_LOCK_TTL_S:g})")
    return seconds

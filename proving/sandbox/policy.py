"""Whether evaluation samples run confined: a person's choice, never an agent's.

``BATON_EVAL_SANDBOX`` in the worker's environment: ``bwrap`` (the default) or ``none``.
An agent cannot set it: it is read from the environment the process started with
(proving/startup.py), which neither a tool nor a sample can change (they run in other
processes, with empty environments), nor a ``.env`` a library loads into ``os.environ`` later.
"""

from __future__ import annotations

from collections.abc import Mapping

from proving.startup import EVAL_SANDBOX_ENV, fixed

CHOICES = ("bwrap", "none")


def evaluation_sandbox(env: Mapping[str, str] | None = None) -> str:
    """``bwrap`` or ``none``; anything else is refused with what to write instead."""
    value = (fixed().environ if env is None else env).get(EVAL_SANDBOX_ENV, "bwrap").strip().lower() or "bwrap"
    if value not in CHOICES:
        raise ValueError(f"{EVAL_SANDBOX_ENV}={value!r} must be bwrap (samples run in a bubblewrap sandbox, the "
                         "default) or none (samples run unconfined on the worker's host: only for a machine "
                         "where nothing else matters)")
    return value


def evaluation_confined(env: Mapping[str, str] | None = None) -> bool:
    return evaluation_sandbox(env) == "bwrap"

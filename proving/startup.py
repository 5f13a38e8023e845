"""Settings fixed when a baton process starts (SPEC §8, "Runtime"): the operator's environment as it was then.

Nothing a model writes may configure baton. A library that reads a ``.env`` from its working directory (Inspect
does, from the working directory upwards) or anything else that sets ``os.environ`` later would otherwise change
what baton does for the rest of the process: one iteration's ``.env`` switched the sandboxes off for the next
evaluation in the same worker (issue 39). So the settings that decide confinement are read here, from a copy of
the environment taken once, and every reader asks this module, never ``os.environ``:

- ``BATON_EVAL_SANDBOX``: whether evaluation samples run in bubblewrap (proving/sandbox/policy.py);
- ``BATON_EXPORT_BWRAP``: the bwrap the exported task's sandbox uses, handed to Inspect's child process
  only when the operator set it (proving/export/inspect_child.py).

The CLI fixes the copy when it starts (``fix()``, every invocation: tests invoke it many times in one process);
a program that uses baton as a library gets the environment as it was at its first question.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

EVAL_SANDBOX_ENV = "BATON_EVAL_SANDBOX"
EXPORT_BWRAP_ENV = "BATON_EXPORT_BWRAP"
INSPECT_PROVIDERS_ENV = "BATON_INSPECT_PROVIDERS"  # modules Inspect's process imports for model providers of yours
CONFINEMENT = (EVAL_SANDBOX_ENV, EXPORT_BWRAP_ENV)  # the variables that decide whether a model's code is confined


@dataclass(frozen=True)
class Startup:
    """The environment a baton process started with, read-only."""

    environ: Mapping[str, str]

    def get(self, name: str, default: str = "") -> str:
        return self.environ.get(name, default)


_lock = threading.Lock()
_fixed: Startup | None = None


def fix(environ: Mapping[str, str] | None = None) -> Startup:
    """Take the copy now (a process's start: the CLI's entry); ``environ`` for a program that starts baton with
    settings of its own (a bench switching ways between runs)."""
    global _fixed
    with _lock:
        _fixed = Startup(MappingProxyType(dict(os.environ if environ is None else environ)))
        return _fixed


def fixed() -> Startup:
    """The settings this process started with (the first call takes them, when no entry point fixed them)."""
    with _lock:
        if _fixed is not None:
            return _fixed
    return fix()


@contextlib.contextmanager
def started_with(changes: Mapping[str, str | None]) -> Iterator[Startup]:
    """The settings as if this process had started with ``changes`` to its environment (None: unset), then
    back as they were: for a program (a test, a bench) that plays several starts in one process."""
    global _fixed
    before = fixed()
    environ = {**before.environ, **{k: v for k, v in changes.items() if v is not None}}
    for name in [k for k, v in changes.items() if v is None]:
        environ.pop(name, None)
    try:
        yield fix(environ)
    finally:
        with _lock:
            _fixed = before

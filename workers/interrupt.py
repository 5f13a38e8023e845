"""Ctrl-C ends a baton process with exit code 130 and one line, never a traceback, wherever it lands.

Inside a command the CLI says so itself (``workers.cli``). Before one runs, Ctrl-C lands in the seconds of
imports that start ``baton`` (Celery, the SDKs, pydantic models), where no ``except`` of baton's is around
it yet: ``workers/__init__.py`` calls ``quiet_at_top_level`` first of all, so a KeyboardInterrupt that reaches
the top of the process, there or anywhere else, ends it the same way. Nothing is in progress then that
finishing would save: every write baton makes is atomic, and a step's progress is on disk before it goes on.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import TracebackType
from typing import NoReturn

EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command Ctrl-C ended
LINE = "interrupted (Ctrl-C): everything finished so far is on disk"


def say_interrupted(line: str = LINE) -> None:
    """``line`` on stderr, after whatever stdout holds."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or a pipe nobody reads any more
            pass
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def end_interrupted(line: str = LINE) -> NoReturn:
    """``say_interrupted``, then the end of the process with 130 at once; a second Ctrl-C is ignored meanwhile."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    say_interrupted(line)
    os._exit(EXIT_INTERRUPTED)  # not SystemExit: the interpreter's shutdown would be one more place to land in


def quiet_at_top_level() -> None:
    """A KeyboardInterrupt nobody caught, in the main thread (``sys.excepthook``) or while the interpreter
    shuts down (``sys.unraisablehook``: joining threads), ends the process with ``end_interrupted``."""
    if getattr(sys.excepthook, "baton_quiet", False):
        return
    before, unraisable = sys.excepthook, sys.unraisablehook

    def hook(kind: type[BaseException], value: BaseException, trace: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):
            end_interrupted()
        before(kind, value, trace)

    def unraisable_hook(info: sys.UnraisableHookArgs) -> None:
        if isinstance(info.exc_value, KeyboardInterrupt):
            end_interrupted()
        unraisable(info)

    hook.baton_quiet = True  # type: ignore[attr-defined]
    sys.excepthook, sys.unraisablehook = hook, unraisable_hook

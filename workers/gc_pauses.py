"""Short full garbage collections for a long-lived worker process.

CPython's full (generation 2) collection walks every container object the process holds,
with the GIL held: all of a worker's threads, its Celery consumer among them, stand still
meanwhile. A worker holds 160,000 such objects after its imports and 340,000-410,000 at
S=100 in ``bench/scale.py`` (its caches of parsed logs, messages and token counts), and on
a saturated 2-core machine each full collection then took 0.3-1.6 s, about ten times a run.
A compaction message that arrived during one waited for it.

So after each full collection its survivors move to the permanent generation
(``gc.freeze``), which later collections skip: the next one walks only what survived since.
Reference counting still frees a frozen object as soon as nothing refers to it; only a
*cycle* among frozen objects that became garbage waits. To bound that, once the frozen set
has grown to twice its size at the last complete walk, it is unfrozen and the next full
collection walks everything again (and frees those cycles). That walk is the old pause,
now as rare as the growth of what a worker holds: at start-up and while its caches fill.

``BATON_GC_FREEZE=0`` keeps CPython's own behaviour.
"""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

from agents.settings_layers import parse_bool

log = logging.getLogger(__name__)
SWITCH_ENV = "BATON_GC_FREEZE"
REWALK_GROWTH = 2.0  # the frozen set's growth since the last complete walk that makes the next one complete


def enabled(env: dict[str, str] | None = None) -> bool:
    """Whether workers freeze their full collections' survivors (ValueError names a bad setting)."""
    text = (os.environ if env is None else env).get(SWITCH_ENV, "1")
    try:
        return parse_bool(text)
    except ValueError:
        raise ValueError(f"{SWITCH_ENV}={text!r} must be 1 (freeze what each full garbage collection keeps, the "
                         "default) or 0 (CPython's own collections)") from None


class FreezeSurvivors:
    """A ``gc.callbacks`` entry: freezes what each full collection kept, and unfreezes it all
    once it has doubled, so that the next full collection walks (and frees) everything."""

    def __init__(self, growth: float = REWALK_GROWTH) -> None:
        self.growth = growth
        self.after_complete_walk = 0  # objects frozen right after the last collection that walked everything
        self.walking_all = True  # nothing is frozen yet: the next full collection walks everything
        self.complete_walks = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info["generation"] != 2:
            return
        gc.freeze()  # the collection is over: its survivors, and nothing younger, are what moves
        frozen = gc.get_freeze_count()
        if self.walking_all:
            self.walking_all = False
            self.complete_walks += 1
            self.after_complete_walk = frozen
            log.debug("full garbage collection walked everything: %d objects kept and frozen, %d freed",
                      frozen, info["collected"])
        elif frozen >= self.growth * max(self.after_complete_walk, 1):
            gc.unfreeze()
            self.walking_all = True


def install() -> FreezeSurvivors | None:
    """Freeze survivors in this process from now on (once), unless ``BATON_GC_FREEZE=0``."""
    if not enabled():
        return None
    for callback in gc.callbacks:
        if isinstance(callback, FreezeSurvivors):
            return callback
    callback = FreezeSurvivors()
    gc.callbacks.append(callback)
    return callback

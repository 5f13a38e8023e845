"""Full garbage collections walk only what survived since the last one (workers/gc_pauses.py).

Each case runs in a fresh interpreter: freezing would otherwise reach into pytest's own objects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers_harness import refused_worker
from workers import gc_pauses

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import gc, json, sys, weakref
from workers.gc_pauses import FreezeSurvivors

class Node:
    pass

def walked(collect):
    '''how many objects a full collection had to look at: what sat in its generations'''
    seen = []
    def measure(phase, info):
        if phase == "start" and info["generation"] == 2:
            seen.append(sum(len(gc.get_objects(g)) for g in range(3)))
    gc.callbacks.insert(0, measure)
    collect()
    gc.callbacks.remove(measure)
    return seen[0]

gc.disable()  # only the collections below run: the counts are exact
callback = FreezeSurvivors()
gc.callbacks.append(callback)
gc.collect()
start = out = {"frozen_at_start": gc.get_freeze_count()}
entries = start["frozen_at_start"] // 4  # two containers each: the frozen set grows by half

held = [{"n": i, "items": [i]} for i in range(entries)]  # a cache filling up
out["new"] = 2 * entries
out["walked_with_new"] = walked(gc.collect)
out["walked_after"] = walked(gc.collect)
out["frozen_with_new"] = gc.get_freeze_count()

del held[: entries // 2]  # dropped from a cache: reference counting frees frozen objects as ever
out["frozen_after_drop"] = gc.get_freeze_count()

cycle = Node(); cycle.me = cycle; gone = weakref.ref(cycle)
gc.collect()  # the cycle is live and frozen
del cycle
gc.collect()
out["frozen_cycle_freed_early"] = gone() is None
out["complete_walks_before_growth"] = callback.complete_walks

grown = [[i] for i in range(4 * out["frozen_at_start"])]  # the frozen set more than doubles
gc.collect()  # freezes, sees the growth, unfreezes
out["unfrozen_on_growth"] = gc.get_freeze_count()
gc.collect()  # walks everything, frees the dead cycle, freezes again
out["frozen_cycle_freed_at_rewalk"] = gone() is None
out["complete_walks"] = callback.complete_walks
out["frozen_at_end"] = gc.get_freeze_count()
print(json.dumps(out))
"""


def run_probe() -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_full_collection_walks_only_what_survived_since_the_last() -> None:
    out = run_probe()
    assert out["frozen_at_start"] > 10_000, out  # the interpreter's and the imports' objects
    assert out["new"] <= out["walked_with_new"] < out["new"] + 1_000, out  # new entries are walked once ...
    assert out["walked_after"] < 1_000, out  # ... and then no more
    assert out["frozen_with_new"] >= out["frozen_at_start"] + out["new"], out
    assert out["frozen_after_drop"] <= out["frozen_with_new"] - out["new"] // 2 + 10, out


def test_a_dead_cycle_among_frozen_objects_is_freed_once_the_frozen_set_doubles() -> None:
    out = run_probe()
    assert not out["frozen_cycle_freed_early"]  # the price of freezing: cycles wait for a complete walk
    assert out["complete_walks_before_growth"] == 1
    assert out["unfrozen_on_growth"] == 0
    assert out["frozen_cycle_freed_at_rewalk"]
    assert out["complete_walks"] == 2
    assert out["frozen_at_end"] > 4 * out["frozen_at_start"]


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_a_bad_setting_is_named(value: str) -> None:
    with pytest.raises(ValueError, match=f"{gc_pauses.SWITCH_ENV}='{value}' must be 1"):
        gc_pauses.enabled({gc_pauses.SWITCH_ENV: value})
    assert gc_pauses.enabled({}) and not gc_pauses.enabled({gc_pauses.SWITCH_ENV: "0"})


def test_install_adds_one_callback_and_none_when_turned_off() -> None:
    script = ("import gc, os; from workers import gc_pauses\n"
              "first = gc_pauses.install(); again = gc_pauses.install()\n"
              "os.environ['BATON_GC_FREEZE'] = '0'; gc.callbacks.clear()\n"
              "print(first is again, sum(isinstance(c, gc_pauses.FreezeSurvivors) for c in gc.callbacks),"
              " gc_pauses.install())")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "0", "None"], done.stderr


def test_a_worker_with_a_bad_setting_does_not_start() -> None:
    said = refused_worker("compaction", gc_pauses.SWITCH_ENV, "maybe")
    assert "BATON_GC_FREEZE='maybe' must be 1" in said, said

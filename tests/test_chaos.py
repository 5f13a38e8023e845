"""A small seeded run of the chaos suite (bench/chaos.py, issue 11) on real processes.

Six faults over two copies of the example, every kind at least once: kill -9 of a pool child,
kill -9 of a whole worker (replaced shortly after), SIGSTOP, a duplicate step, a duplicate
compaction. No ``baton resume``: the run must finish by itself, with nothing duplicated, nothing
lost, and each copy meaning what an undisturbed run's means (bench/chaos_compare.py: clocks, usage, estimates,
Inspect's log names and the copies' folders aside).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench
from tests.workers_harness import FAST_RECOVERY

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def load_chaos():
    return load_bench("chaos")


@pytest.mark.skipif(shutil.which("redis-server") is None,
                    reason="redis-server is not installed (apt-get install redis-server; CI provides it)")
def test_seeded_chaos_run_recovers_with_nothing_duplicated_lost_or_different(tmp_path):
    chaos = load_chaos()
    faults = 6
    assert {f.kind for f in chaos.plan(faults, seed=7, scenarios=2)} == set(chaos.KINDS)
    summary = chaos.chaos(faults, seed=7, scenarios=2, workdir=tmp_path, give_up=60.0, limit=150.0,
                          reaper_env=FAST_RECOVERY, quiet=True)
    report = chaos.details(summary) + "\n" + "\n".join(summary["res"]["log"])
    assert summary["injected"] == faults, report
    assert not summary["not_done"], report
    assert summary["duplicates"] == [], report
    assert summary["lost"] == [], report
    assert summary["diffs"] == [], report
    assert summary["recovered"] == faults, report

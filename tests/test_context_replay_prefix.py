"""bench/context_replay.py's thinking columns on synthetic runs: measured from the bodies each policy sends,
so they hold whatever the assembler does with the recap (issue 22 item 8)."""

from __future__ import annotations

import pytest

from tests.bench_scripts import load_bench
from tests.synthetic_trajectories import write_synthetic

BASELINES = ("none", "mask", "mask_1bp", "clear")
pytestmark = pytest.mark.xdist_group("context_replay")  # one replay of the synthetic runs for the module


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    replay = load_bench("context_replay")
    folder = write_synthetic(tmp_path_factory.mktemp("runs"), runs=1)
    results = []
    for path in replay.trajectory_files(folder):
        for index, traj in enumerate(replay.iter_runs(path)):
            results.append(replay.replay_run((replay.dataset_name(path), index, traj, [(5, 2_000), (1, 2_000)], 20)))
    return replay, results


def test_the_full_log_never_breaks_and_keeps_every_thinking_block(replayed):
    _, results = replayed
    for r in results:
        s = r["stats"]["none"]
        assert s["breaks_planned"] == s["breaks_unplanned"] == 0
        assert s["valid_sends"] == s["sends"] > 0
        assert s["valid_next"] == s["produced"] == r["calls"] - 1


def test_masking_every_step_breaks_unplanned_and_invalidates_thinking(replayed):
    _, results = replayed
    long_runs = [r for r in results if r["dataset"] != "tau-bench-airline"]  # tau's runs mask nothing much
    for r in long_runs:
        s = r["stats"]["mask"]
        assert s["breaks_unplanned"] > r["calls"] // 2 and s["breaks_planned"] == 0
        assert s["valid_sends"] < s["sends"] // 2


def test_every_policy_counts_within_bounds_and_only_baton_plans(replayed):
    replay, results = replayed
    for r in results:
        for key, s in r["stats"].items():
            assert s["breaks_planned"] + s["breaks_unplanned"] <= r["calls"] - 1, key
            assert s["valid_sends"] <= s["sends"] and s["valid_next"] <= s["produced"] == r["calls"] - 1, key
            if key in BASELINES:
                assert s["breaks_planned"] == 0, key
            else:  # every compaction is a planned break (a batch compressed at the same call is counted once)
                assert s["breaks_planned"] >= s["compactions"], key
    assert any(s["compactions"] for r in results for s in r["stats"].values())  # the check above ran


def test_the_table_reports_each_policy(replayed):
    replay, results = replayed
    order = [("none", "(a) none"), ("mask", "(b) mask-5"), (replay.baton_key(5, 2_000), "(d) baton")]
    header, rows = replay.thinking_rows(replay.aggregate(results), order, replay.baton_key(5, 2_000))
    none_rows = [row for row in rows if row[1] == "(a) none"]
    assert len(none_rows) == 3 and all(row[6] == "0.0" and row[8] == "100.0" for row in none_rows)
    assert "prefix breaks per 100 calls: planned" in header

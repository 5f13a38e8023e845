"""The gates as shards of work (issue 40, item 3): each shard's result written once, a duplicate doing nothing,
the merge giving what one whole run gives (figures from counts, findings in order), a new plan for a changed
iteration, and the loop's tasks (plan, gate shards, merge) run in-process as a broker's workers would run them."""

from __future__ import annotations

import json
from pathlib import Path

from proving.evaluation.gate_harness import Accounting
from proving.evaluation.gate_shards import Plan, progress_line, run_shard
from proving.evaluation.gates import ProvingSettings, prove
from tests.test_gate_harness import scenario

GATES = ["floor", "mutation", "coverage", "duplicate"]


def _report(out: Path) -> None:
    (out / "report.json").write_text(json.dumps({"iteration": 1, "total": 3, "passed": 3, "success_rate": 1.0}))


def test_shards_merge_into_what_one_whole_run_gives_and_a_duplicate_runs_nothing(tmp_path: Path) -> None:
    root = tmp_path / "shop"
    _report(scenario(root))
    settings = ProvingSettings(gates=GATES, shard_samples=1)
    whole = prove(root, 1, settings)
    plan = Plan.of(root, 1, settings)
    assert plan.shards("floor") == plan.shards("mutation") == 3 and plan.shards("coverage") == 1
    assert len(plan.missing()) == 8 and progress_line(root, 1, settings) is None  # nothing started yet
    for gate, shard in reversed(plan.missing()):  # in any order, as workers take them
        run_shard(plan, gate, shard)
    assert plan.missing() == []
    assert plan.merge() == whole  # the same figures, findings in the same order, the same gates ran
    assert progress_line(root, 1, settings) == ("gates (samples done): floor 3/3, mutation 3/3, coverage 3/3, "
                                                "duplicate 3/3")
    # A duplicate (a re-delivered task) finds its shard done: no process started, the file unchanged.
    before, written = Accounting.sample_processes, plan.path("floor", 1).read_bytes()
    assert run_shard(plan, "floor", 1) == plan.read("floor", 1)
    assert Accounting.sample_processes == before and plan.path("floor", 1).read_bytes() == written
    # A damaged file is no result: the shard runs again (one process: its one sample), and the merge is the same.
    plan.path("floor", 1).write_text('{"plan": "forged", "part": {"counts": {"samples": 0}}}')
    assert plan.missing() == [("floor", 1)]
    run_shard(plan, "floor", 1)
    assert Accounting.sample_processes == before + 1 and plan.merge() == whole


def test_a_changed_iteration_gets_a_new_plan_and_old_shards_count_for_nothing(tmp_path: Path) -> None:
    root = tmp_path / "shop"
    out = scenario(root)
    _report(out)
    settings = ProvingSettings(gates=["duplicate"], shard_samples=1)
    old = Plan.of(root, 1, settings)
    run_shard(old, "duplicate", 0)
    assert old.missing() == []
    (out / "report.json").write_text(json.dumps({"iteration": 1, "total": 3, "passed": 2, "success_rate": 0.67}))
    new = Plan.of(root, 1, settings)
    assert new.id != old.id and new.missing() == [("duplicate", 0)]
    assert Plan.of(root, 1, ProvingSettings(gates=["duplicate"], shard_samples=2)).id != new.id  # settings too
    assert (root / "state" / "gates" / "iteration_1" / old.id / "duplicate-0.json").is_file()  # state/: no agent's


def test_a_gate_that_fails_in_one_shard_is_skipped_whole_saying_why(tmp_path: Path) -> None:
    root = tmp_path / "shop"
    out = scenario(root)
    _report(out)
    (out / "tools" / "tools.py").write_text((out / "tools" / "tools.py").read_text() + "\ndef broken(:\n")
    settings = ProvingSettings(gates=["floor", "duplicate"], shard_samples=2)
    plan = Plan.of(root, 1, settings)
    for gate, shard in plan.missing():
        run_shard(plan, gate, shard)
    quality = plan.merge()
    assert quality.ran == ["duplicate"] and quality.skipped["floor"].startswith("the gate failed: ")
    assert quality.skipped == prove(root, 1, settings).skipped

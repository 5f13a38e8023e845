"""The gates as distributed work with real processes (issue 40, item 3): a Celery worker on a private
redis-server is killed with -9 in the middle of a gate shard; another worker takes the shard over (the reaper sends
the proving task again, which sends the missing shard) and the iteration is decided on exactly the quality one
whole run of the gates gives: no finding lost, none twice."""

from __future__ import annotations

import json
import shutil

import pytest

from agents.settings_layers import proving_settings
from proving.evaluation.gate_shards import Plan
from proving.evaluation.gates import prove
from proving.evaluation.quality import Quality
from tests.workers_harness import Cluster, wait_for
from workers.loop import Task

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]  # real Celery workers
GATES = "floor,mutation,coverage,duplicate"  # every gate but the solver (which goes through Inspect, unsharded)


@pytest.fixture
def cluster(request, redis_server, tmp_path) -> Cluster:
    cluster = Cluster(redis_server.url, tmp_path)
    request.addfinalizer(cluster.stop_all)
    return cluster


def _to_proving(cluster: Cluster, finished_run) -> None:
    """The finished example's iteration 1 as Execute handed it off: proving, no quality yet, the last iteration."""
    shutil.rmtree(cluster.root)
    finished_run.copy_to(cluster.root.parent)
    report_path = cluster.root / "execution_outputs" / "iteration_1" / "report.json"
    report = json.loads(report_path.read_text())
    report.pop("quality", None)
    report_path.write_text(json.dumps(report, indent=2))
    run = json.loads((cluster.root / "run.json").read_text())
    run.update(phase="proving", status="running", iteration=1, max_iterations=1,
               results=[r for r in run["results"] if r["iteration"] == 1])
    (cluster.root / "run.json").write_text(json.dumps(run, indent=2))


def _running_shard(plan: Plan) -> bool:
    """A shard started (it has counted a sample) and not done: the worker is in the middle of it."""
    return any(plan.read(g, k) is None and (plan.folder / f"{g}-{k}.progress").is_file() for g, k in plan.work()) \
        and len(plan.missing()) < len(plan.work())


def test_a_worker_killed_mid_shard_loses_and_duplicates_no_finding(cluster: Cluster, finished_run) -> None:
    _to_proving(cluster, finished_run)
    cluster.env |= {"BATON_PROVING_GATES": GATES, "BATON_PROVING_SHARD_SAMPLES": "2"}
    settings = proving_settings(cluster.root, env=cluster.env)  # as the workers read them
    assert settings.gates == GATES.split(",") and settings.shard_samples == 2
    plan = Plan.of(cluster.root, 1, settings)
    assert len(plan.work()) == 12  # 5 shards of floor, 5 of mutation, coverage, duplicate
    expected = prove(finished_run.copy_to(cluster.base / "whole"), 1, settings)

    first = cluster.worker("execute", "execute-a")
    cluster.dispatch([Task(kind="proving", scenario=cluster.root.name)])
    wait_for(lambda: _running_shard(plan), "a gate shard in the middle of its samples", timeout=180,
             interval=0.02, diagnose=lambda: first.tail())
    first.kill9()
    assert plan.missing(), "every shard was done before the kill"
    second = cluster.worker("execute", "execute-b")
    record = cluster.wait_run(lambda r: r["phase"] == "done" or r["status"] == "error", "the iteration decided",
                              timeout=300)
    assert (record["phase"], record["status"]) == ("done", "failed_target"), (record, second.tail())

    report = json.loads((cluster.root / "execution_outputs" / "iteration_1" / "report.json").read_text())
    quality = Quality.model_validate(report["quality"])
    assert quality == expected  # the figures and every finding, once each, in the whole run's order
    assert quality.figures.floor == {"do_nothing": 0.2, "refuse_all": 0.1, "reckless": 0.0}
    assert (quality.figures.mutation_score, quality.figures.mutants) == (1.0, 33)
    findings = [(f.gate, f.sample, f.detail) for f in quality.findings]
    assert len(findings) == len(set(findings))
    # Flower and the workers' logs name each shard: "baton.gate refund_desk iteration 1 floor shard 2".
    assert "baton.gate refund_desk iteration 1 floor shard 2" in first.tail(10**7) + second.tail(10**7)
    assert "baton.gate refund_desk iteration 1 mutation shard" in second.tail(10**7)

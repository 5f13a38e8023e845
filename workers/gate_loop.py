"""The gates as tasks of the loop (no Celery here, like workers/loop.py): the proving task plans the iteration's
gate shards and sends those not done; each gate task runs one shard (proving/evaluation/gate_shards.py) and,
when it finds every shard done, sends the proving task again, which merges the shards and decides.

Exactly once, like steps: a shard's result is a file written once, atomically, in state/; a duplicate or a
re-delivered gate task finds it and runs nothing (it still sends the merge when the plan is complete, in case
the first delivery died between its write and its send); two proving tasks that merge at once compute the same
quality from the same files, and only the first decision lands (the run's lease, ``do_proving``). A killed
worker's shard has no file: the proving task that the reaper (or ``baton resume``) sends plans again and sends
it again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from agents.settings_layers import proving_settings
from proving.evaluation.gate_shards import Plan, run_shard
from proving.evaluation.gates import ProvingSettings
from proving.evaluation.quality import Quality
from proving.evaluation.report_file import raw_report
from scenarios.run import load_run
from workers.task_spec import Task


def plan_or_quality(root: Path, iteration: int, settings: ProvingSettings) -> tuple[list[Task], Quality | None]:
    """(the gate tasks still to run, None), or ([], the quality the done shards add up to)."""
    plan = Plan.of(root, iteration, settings)
    missing = plan.missing()
    if missing:
        return [Task(kind="gate", scenario=root.name, gate=gate, number=shard) for gate, shard in missing], None
    return [], plan.merge()


def do_gate(root: Path, gate: str, shard: int, env: Mapping[str, str] | None = None,
            on_progress: Callable[[int], None] | None = None) -> list[Task]:
    """Run one shard of the gates of the iteration being proved, if it is still to do; the proving task when every
    shard of the plan is done."""
    record = load_run(root)
    if record is None or record.finished or record.phase != "proving":
        return []  # the run moved on: a late or duplicated gate task
    n = record.iteration
    if "quality" in raw_report(root, n):
        return []  # decided on already
    settings = proving_settings(root, env)
    plan = Plan.of(root, n, settings)
    if gate not in settings.gates or shard >= plan.shards(gate):
        return []  # a task of a plan the settings no longer make
    run_shard(plan, gate, shard, on_progress)
    return [] if plan.missing() else [Task(kind="proving", scenario=root.name)]


def shard_name(root: Path, gate: str, shard: int) -> str:
    """``floor shard 2/3`` as the iteration's current plan counts them (``floor shard 2`` if it cannot be read)."""
    try:
        record = load_run(root)
        plan = Plan.of(root, record.iteration, proving_settings(root)) if record else None
    except (OSError, ValueError):
        plan = None
    return f"{gate} shard {shard + 1}" + (f"/{plan.shards(gate)}" if plan is not None else "")

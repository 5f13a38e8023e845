"""The exported task as the gates run it: built once per ``prove()`` into the iteration's ``inspect_task/`` (as
``baton try`` builds it) and run through Inspect with one of its agents on a list of runs (runtime/agents.py),
so what a gate measures is what users run.

Each gate makes one eval of all its runs (``eval_export``, shared with ``baton try``), logged under
``proving_logs/``; the deterministic agents make no model request (the model is Inspect's ``mockllm/model``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proving.evaluation.gates import GateContext, Unavailable
from proving.evaluation.models import Limits
from proving.export.build import export_inspect
from proving.export.facts import ScenarioFacts
from proving.export.tryout import MOCK_MODEL, NO_INSPECT, eval_export
from scenarios.folder import Folder

CALLS = "baton:calls"  # the task's store key of the calls made (runtime/task.py)
LOGS = "proving_logs"


@dataclass
class RunOutcome:
    passed: bool
    explanation: str
    calls: list[dict[str, Any]] = field(default_factory=list)  # tool, args, output, error: as the task kept them


def task_folder(ctx: GateContext) -> Path:
    """The iteration's export, built on the first call of a ``prove()`` and reused by the gates after it."""
    if importlib.util.find_spec("inspect_ai") is None:
        raise Unavailable(NO_INSPECT)
    if "inspect_task" not in ctx.work:
        facts = ctx.work.get("facts") or ScenarioFacts(
            name=ctx.root.name, target_success_rate=0.0, default_limits=Limits(timeout_s=10.0, memory_mb=512))
        out = ctx.out_dir / "inspect_task"
        export_inspect(ctx.root, out, facts, ctx.iteration)
        ctx.work["inspect_task"] = out
    return ctx.work["inspect_task"]


def exported_tools(ctx: GateContext) -> list[dict[str, Any]]:
    """The tools' schemas as the export gives them to an agent."""
    spec = Folder(ctx.root).read_json(task_folder(ctx) / "scenario.json", "the export's scenario.json")
    return list(spec["tools"])


def run_agents(ctx: GateContext, gate: str, runs: list[dict[str, Any]]) -> dict[str, RunOutcome]:
    """Run ``runs`` (``{"id", "sample", "agent", "actions"?}``) in one Inspect eval of the export; per run id, its
    outcome as the task's own scorer judged it against the run's sample."""
    task = task_folder(ctx)
    logs = ctx.out_dir / LOGS
    listed = logs / f"{gate}_runs.json"
    Folder(ctx.root).write_json(listed, {"runs": runs})  # makes proving_logs/ too
    log = eval_export(task, MOCK_MODEL, 1, logs, {"runs": str(listed.resolve())})
    outcomes = {}
    for sample in log.samples:
        score = next(iter(sample.scores.values()), None) if sample.scores else None
        calls = (sample.store or {}).get(CALLS) or []
        outcomes[str(sample.id)] = RunOutcome(score is not None and score.value == 1.0,
                                              (score.explanation or "") if score is not None else "no score",
                                              list(calls))
    return outcomes

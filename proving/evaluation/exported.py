"""The exported task as the gates use it: built once per ``prove()`` into the iteration's ``inspect_task/`` (as
``baton try`` builds it), which the solver gate runs through Inspect, so what it measures is what users run; and
what a run of the gates' deterministic agents comes to (``RunOutcome``), however it ran (gate_harness.py runs
them in baton's harness, scored by the export's own code)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proving.evaluation.gates import GateContext, Unavailable
from proving.evaluation.models import Limits
from proving.export.build import export_inspect
from proving.export.facts import ScenarioFacts
from proving.export.tryout import NO_INSPECT

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

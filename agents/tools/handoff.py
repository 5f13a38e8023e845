"""``SubmitHandoff``: the only way an agent ends its turn (docs/agents.md, "Tools").

The payload is validated with the models of ``agents.payloads`` and checked
against the folder (the files it names exist; every figure the evaluation report
holds, success_rate included, equals the report's: ``agents.handoff_figures``);
an invalid payload comes back as a tool error naming each problem, so the model
fixes it and calls again. An accepted payload is written
atomically to ``handoffs/iteration_<n>/<kind>_context.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.handoff_figures import figure_differences
from agents.payloads import (
    ExecuteToInit,
    InitToExecute,
    PayloadError,
    parse_payload_dict,
    payload_dict,
    payload_json_schema,
)
from agents.role import Role
from agents.tools.base import ToolContext, ToolResult, error, ok
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import Layout, StoreError, json_text, relative

KIND: dict[Role, str] = {"init": "init_to_execute", "execute": "execute_to_init"}


def handoff_path(root: Path, iteration: int, kind: str) -> Path:
    return Layout(root).handoffs(iteration) / f"{kind}_context.json"


class SubmitHandoff:
    name = "SubmitHandoff"

    def __init__(self, role: Role):
        self.kind = KIND[role]
        self.description = (
            f"End your turn by handing your work to the other agent. `payload` is the {self.kind} "
            "payload (fields below). It is validated: if a field is missing or wrong you get an "
            "error listing each problem; fix them and call SubmitHandoff again. On success your turn ends."
        )
        self.input_schema = {
            "type": "object",
            "properties": {"payload": payload_json_schema(self.kind)},
            "required": ["payload"],
            "additionalProperties": False,
        }

    def run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            payload = parse_payload_dict(self.kind, tool_input.get("payload"))
        except PayloadError as exc:
            return error(str(exc))
        problems = _folder_problems(payload, ctx)
        if problems:
            bullets = "\n".join(f"- {p}" for p in problems)
            return error(
                f"the payload does not match the scenario folder:\n{bullets}\nFix and call SubmitHandoff again."
            )
        path = handoff_path(ctx.root, payload.iteration, self.kind)
        ctx.files.write(path, json_text(payload_dict(payload)))
        data = {"accepted": True, "kind": self.kind, "iteration": payload.iteration, "path": relative(ctx.root, path)}
        return ok(data, ends_turn=True)


def _folder_problems(payload: InitToExecute | ExecuteToInit, ctx: ToolContext) -> list[str]:
    problems = []
    if payload.iteration != ctx.iteration:
        problems.append(f"iteration: this is iteration {ctx.iteration}, not {payload.iteration}")
    if isinstance(payload, InitToExecute):
        for i, name in enumerate(payload.design_files):
            if not _exists(ctx, name, file=True):
                problems.append(f"design_files[{i}]: {name!r} does not exist; write it first or fix the path")
        return problems
    out_dir = payload.execution_output_dir.replace("\\", "/").strip("/").removeprefix("./")
    expected = f"execution_outputs/iteration_{ctx.iteration}"
    if out_dir != expected:  # the report of this iteration's evaluation, not a report.json found elsewhere
        return [*problems, f"execution_output_dir: {payload.execution_output_dir!r} is not this iteration's "
                           f"evaluation folder; it must be {expected!r}"]
    report_path = Layout(ctx.root).outputs(ctx.iteration) / "report.json"
    folder = Folder(ctx.root)
    if not folder.exists(report_path):
        return [*problems, f"execution_output_dir: no report.json in {out_dir!r}; run RunEvaluation first"]
    try:
        report = folder.read_json(report_path, "the evaluation report", limit=RECORD_BYTES)
    except StoreError as exc:
        return [*problems, str(exc)]
    if not isinstance(report, dict):
        return [*problems, f"{out_dir}/report.json is not an evaluation report; run RunEvaluation again"]
    if report.get("only"):
        problems.append(f"{out_dir}/report.json covers only a re-run of {len(report['only'])} sample(s); "
                        "run RunEvaluation on all samples before handing off")
    differences = figure_differences(payload, report)
    if differences:
        problems.append(
            f"the figures must be those of {out_dir}/report.json (computed by RunEvaluation, not estimated); "
            f"these differ: {'; '.join(differences)}. Copy them from the report of your latest evaluation"
        )
    return problems


def _exists(ctx: ToolContext, name: str, *, file: bool) -> bool:
    try:
        kind = Folder(ctx.root).kind(name)
    except StoreError:
        return False
    return kind == ("file" if file else "folder")

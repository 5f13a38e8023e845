"""``RunEvaluation``: Execute's tool to evaluate its scenario (docs/evaluation.md,
"The RunEvaluation tool"); a summary comes back, the details are on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.tools.base import ToolContext, ToolResult, error, ok
from proving.evaluation.run import EvaluationError, run_evaluation
from scenarios.store import Layout, relative

TOOL_FAILURES = 20  # failures listed in the RunEvaluation result
TOOL_REASON_CHARS = 300


class RunEvaluation:
    name = "RunEvaluation"
    description = (
        "Evaluate the scenario you generated in execution_outputs/iteration_<n>/ and get the "
        "success rate and every failure with its layer. The folder must hold:\n"
        "- tools/tools.py: each public function `name(data: dict, **args) -> dict` is a tool; it may "
        "change `data` (the scenario state) and must return a JSON-serialisable dict.\n"
        "- tools/data.json: the initial data (a JSON object); each sample gets a fresh copy.\n"
        "- checkers/*.py: each function `check_<what>(sample: dict, outcome: dict)` returns "
        "{\"passed\": bool, \"reason\": str}; outcome = {\"outputs\": [dict per action], "
        "\"final_data\": ..., \"initial_data\": ...}. Raise `baton_eval.DesignIssue(\"...\")` "
        "(from baton_eval import DesignIssue) when the design's rules contradict each other or "
        "leave the sample's outcome undetermined.\n"
        "- samples/*.json: {\"id\", \"instruction\", \"actions\": [{\"tool\", \"args\"}], "
        "\"expected_outputs\": [dict or null per action; each key given must equal the output's], "
        "\"expected_state\": {\"dotted.path\": value} (list indices as numbers), \"rules\": [rule ids]}.\n"
        "Each sample runs in its own process with a time and memory limit. Failure layers: "
        "L1 design (a checker raised DesignIssue: report it to Init); L2 tool (import error, "
        "exception, bad return value, limit hit in the actions, or an outcome that is neither the "
        "expected one nor accepted by the checkers: fix tools/); L3 checker (import error, crash, "
        "bad return value, limit hit, or it fails an outcome that matches the sample: fix checkers/); "
        "L4 sample (invalid JSON or schema, unknown tool or arguments, or the checkers accept the "
        "actual outcome but it differs from the expected one: fix the sample). Details per sample "
        "are in traces/<id>.json. Pass `samples` to re-run only some ids; results.jsonl and "
        "report.json then cover only those, so run all samples again before your handoff."
    )
    def __init__(self) -> None:
        self.input_schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                "iteration": {"type": "integer", "minimum": 1, "description": "Defaults to the current iteration."},
                "samples": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "minItems": 1,
                    "description": "Sample ids to re-run; omit to run all.",
                },
            },
            "additionalProperties": False,
        }

    def run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        iteration = tool_input.get("iteration", ctx.iteration)
        if isinstance(iteration, bool) or not isinstance(iteration, int) or not 1 <= iteration <= ctx.iteration:
            return error(
                f"iteration must be an integer from 1 to {ctx.iteration} (the current iteration); got {iteration!r}"
            )
        only = tool_input.get("samples")
        ids = isinstance(only, list) and bool(only) and all(isinstance(s, str) and s for s in only)
        if only is not None and not ids:
            return error("samples must be a non-empty list of sample ids; omit it to run all samples")
        try:
            report = run_evaluation(
                ctx.root, iteration, timeout_s=ctx.settings.eval_timeout_s, memory_mb=ctx.settings.eval_memory_mb,
                disk_mb=ctx.settings.eval_disk_mb, only=only, model_label=ctx.model_label, files=ctx.files,
            )
        except EvaluationError as exc:
            return error(str(exc))
        return ok(_summary(report, ctx.root, iteration))


def _summary(report: dict[str, Any], root: Path, iteration: int) -> dict[str, Any]:
    out_dir = Layout(root).outputs(iteration)
    failures = [{**f, "reason": _shorten(f["reason"])} for f in report["failures"][:TOOL_FAILURES]]
    data: dict[str, Any] = {
        "iteration": iteration,
        "total": report["total"],
        "passed": report["passed"],
        "failed": report["failed"],
        "success_rate": report["success_rate"],
        "failures_per_layer": report["failures_per_layer"],
        "failures": failures,
        "report_path": relative(root, out_dir / "report.json"),
        "results_path": relative(root, out_dir / "results.jsonl"),
        "traces_dir": relative(root, out_dir / "traces"),
    }
    if len(report["failures"]) > TOOL_FAILURES:
        data["failures_not_listed"] = len(report["failures"]) - TOOL_FAILURES
    if "only" in report:
        data["only"] = report["only"]
    return data


def _shorten(reason: str) -> str:
    return reason if len(reason) <= TOOL_REASON_CHARS else reason[: TOOL_REASON_CHARS - 3] + "..."

"""The deterministic gates' runs (floor agents, mutants) in baton's own harness: one confined process per sample,
forked from the worker's sample server like an evaluation sample (``child.run_child``), that runs every run of
the sample (``child_runs.py``), scored as the exported task's scorer scores (``compare.py``, which the export
carries as it is). The exported task still runs each call through Inspect's ``sandbox().exec`` for its users and
for the solver gate; these gates make no model request, so they need neither Inspect nor its per-call start.

What is kept from the export is what an agent's run through it would meet:

- the calls an agent of the export's runtime makes (``runtime/agents.py``: ``refusal_calls``, ``reckless_calls``,
  a script's own), each checked first against the tool's schema as Inspect checks a model's call: a call Inspect
  would refuse (an unknown tool, arguments the schema does not allow) is never made, nor recorded;
- each call on the data as the calls before it left it, a failed call's effects undone, the data made JSON;
- the verdict: the final data against the replay of the expected actions (free text as free text),
  ``expected_state``, and every checker, in processes that never ran the tools.

A sample whose expected actions cannot be replayed stops the gate, as it stops the exported task's eval.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from proving.evaluation import compare
from proving.evaluation.child import run_child
from proving.evaluation.exported import LOGS, RunOutcome
from proving.evaluation.gates import GateContext
from proving.evaluation.models import Limits
from proving.evaluation.run import check_sandbox
from proving.evaluation.spoken import with_words
from proving.export.build import choose_iteration
from proving.export.runtime.agents import reckless_calls, refusal_calls
from proving.export.tool_specs import ToolSpecError, tool_specs
from proving.sandbox.nest import DISK_MB
from scenarios import confined as folder_access
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import Layout, StoreError

log = logging.getLogger(__name__)
DEFAULT_LIMITS = Limits(timeout_s=10.0, memory_mb=512)  # as the export's, for an iteration never evaluated
CHECKERS_BUDGET = 10  # a run's checkers, in units of the call limit: a backstop for the sample's whole process


class RunResult(BaseModel):
    """One run as the sample's process left it (read as untrusted: it lies beside the generated code)."""

    calls: list[dict[str, Any]] = Field(default_factory=list)
    differences: list[str] = Field(default_factory=list)
    verdicts: dict[str, Any] | None = None  # the checkers' (compare.checker_rejections reads it)
    problem: str | None = None  # why the checkers left none


class SampleRuns(BaseModel):
    completed: bool = False
    reference_error: str | None = None
    runs: dict[str, RunResult] = Field(default_factory=dict)
    cpu_s: float = 0.0  # the sample's process and its forks, as it says (a figure for benches, nothing decides on it)
    peak_kb: int = 0


class Accounting:
    """What the harness started: one process per sample, whatever its runs and calls (a test reads it), and
    what those processes said they used (bench/gates_workers.py reads it)."""

    sample_processes = 0
    runs = 0
    cpu_s = 0.0
    peak_kb = 0


def tool_schemas(ctx: GateContext) -> list[dict[str, Any]]:
    """The tools as the export gives them to an agent (``tool_specs`` on the same files as ``baton export``)."""
    if "tool_schemas" not in ctx.work:
        folder, layout = Folder(ctx.root), Layout(ctx.root)
        design = "\n\n".join(folder.read_text_or(p, "", RECORD_BYTES)
                             for p in folder.glob(layout.design, "*.md", kinds=("file",)))
        tools_py = ctx.out_dir / "tools" / "tools.py"
        try:
            source = folder.read_text(tools_py, RECORD_BYTES)
            specs = tool_specs(tools_py, ctx.samples, design, source=source)
        except (ToolSpecError, StoreError) as exc:
            raise RuntimeError(f"the tools cannot be read as the export reads them: {exc}") from None
        ctx.work["tool_schemas"] = [s.model_dump() for s in specs]
    return list(ctx.work["tool_schemas"])


def limits(ctx: GateContext) -> Limits:
    """The limits the export would carry: the iteration's evaluation's, else the default."""
    try:
        _, report, _ = choose_iteration(Layout(ctx.root), 0.0, ctx.iteration)
    except ValueError:
        report = None
    return report.limits if report is not None else DEFAULT_LIMITS


@cache
def _validator(schema_key: str) -> Any:
    import json

    try:
        from jsonschema import Draft7Validator
    except ImportError:  # no jsonschema (it comes with Inspect): every call is made
        return None
    return Draft7Validator(json.loads(schema_key))


def refused_by_inspect(call: dict[str, Any], tools: dict[str, dict[str, Any]]) -> bool:
    """Whether Inspect would refuse this call before the tool saw it: no such tool, or arguments its schema (a
    JSON schema, as Inspect's ``validate_tool_input`` reads it, Draft 7) does not allow."""
    import json

    tool = tools.get(str(call.get("tool")))
    if tool is None:
        return True
    validator = _validator(json.dumps(tool.get("parameters") or {"type": "object"}, sort_keys=True))
    return validator is not None and any(True for _ in validator.iter_errors(dict(call.get("args") or {})))


def calls_of(run: dict[str, Any], tools: list[dict[str, Any]], samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls the run's agent makes, as the export's runtime/agents.py chooses them."""
    sample = next(s for s in samples if str(s["id"]) == str(run["sample"]))
    agent = run.get("agent")
    if agent == "refuse_all":
        made = refusal_calls(tools, samples, sample)
    elif agent == "reckless":
        made = reckless_calls(samples, sample)
    elif agent == "script":
        made = list(run.get("actions") or [])
    elif agent == "do_nothing":
        made = []  # Inspect's mockllm/model: a fixed text, no call
    else:
        raise ValueError(f"no deterministic agent {agent!r}")
    by_name = {t["name"]: t for t in tools}
    return [{"tool": c["tool"], "args": dict(c.get("args") or {})} for c in made if not refused_by_inspect(c, by_name)]


def run_agents(ctx: GateContext, gate: str, runs: list[dict[str, Any]]) -> dict[str, RunOutcome]:
    """Run ``runs`` (``{"id", "sample", "agent", "actions"?}``); per run id, its outcome as the export's scorer
    would judge it against the run's sample. One process per sample, all its runs inside."""
    check_sandbox()  # confined as the evaluation is, or stopped saying why
    tools = tool_schemas(ctx)
    bounds = limits(ctx)
    by_sample: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        by_sample[str(run["sample"])].append({"id": str(run["id"]), "calls": calls_of(run, tools, ctx.samples)})
    outcomes: dict[str, RunOutcome] = {}
    parts = folder_access.parts_under(ctx.root, ctx.out_dir)
    for sample in ctx.samples:
        asked = by_sample.get(str(sample["id"]))
        if asked:
            outcomes |= run_sample(ctx.root, parts, sample, asked, bounds)
            ctx.sample_done()
    outcomes = with_words(runs, ctx.samples, outcomes)  # communicate_info, in what each agent says (spoken.py)
    _log(ctx, gate, runs, outcomes)
    return outcomes


def run_sample(root: Path, parts: tuple[str, ...] | list[str], sample: dict[str, Any], runs: list[dict[str, Any]],
               bounds: Limits) -> dict[str, RunOutcome]:
    """Every run of one sample in one confined process; RuntimeError when its expected actions cannot be replayed
    or the process left no result (as the exported task's eval fails)."""
    units = len(sample.get("actions", [])) + 2 + sum(len(r["calls"]) + 1 + CHECKERS_BUDGET for r in runs)
    Accounting.sample_processes += 1
    Accounting.runs += len(runs)
    done = run_child(root, parts, sample, timeout_s=bounds.timeout_s * units, memory_mb=bounds.memory_mb,
                     disk_mb=bounds.disk_mb or DISK_MB, result_model=SampleRuns,
                     job={"mode": "runs", "runs": runs, "call_timeout_s": bounds.timeout_s})
    result = done.result
    if not isinstance(result, SampleRuns) or (not result.completed and not result.reference_error):
        why = done.problem or ("timed out" if done.timed_out else f"exit {done.returncode}: "
                               f"{(done.stderr_tail.strip().splitlines() or ['no output'])[-1]}")
        raise RuntimeError(f"sample {sample['id']}'s runs left no result ({why})")
    Accounting.cpu_s += result.cpu_s
    Accounting.peak_kb = max(Accounting.peak_kb, result.peak_kb)
    if result.reference_error:
        raise RuntimeError(f"replaying sample {sample['id']}'s expected actions failed ({result.reference_error}): "
                           "the export is broken")
    outcomes = {}
    for run in runs:
        got = result.runs.get(run["id"])
        if got is None:
            raise RuntimeError(f"sample {sample['id']}'s process left no result for run {run['id']}")
        rejections = compare.checker_rejections(got.verdicts, got.problem)
        passed = not got.differences and not rejections
        calls = [c for c in got.calls if isinstance(c, dict)]
        outcomes[run["id"]] = RunOutcome(passed, compare.explain(passed, len(calls), got.differences, rejections),
                                         calls)
    return outcomes


def _log(ctx: GateContext, gate: str, runs: list[dict[str, Any]], outcomes: dict[str, RunOutcome]) -> None:
    """proving_logs/<gate>_runs.json (``_runs.<shard>.json`` for a shard): each run, its calls and its verdict, for
    a person to read."""
    listed = [{**run, "passed": outcomes[run["id"]].passed, "explanation": outcomes[run["id"]].explanation,
               "calls": outcomes[run["id"]].calls} for run in runs if run["id"] in outcomes]
    Folder(ctx.root).write_json(ctx.out_dir / LOGS / f"{gate}_runs{ctx.shard}.json", {"runs": listed})

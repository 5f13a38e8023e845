"""One evaluation run of ``execution_outputs/iteration_<n>``: every sample (or a chosen
few) in turn, then results.jsonl, report.json and traces/ (docs/evaluation.md,
"What is written")."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents.evaluation.child import ChildRun, run_child
from agents.evaluation.classify import classify
from agents.evaluation.models import LAYERS, ChildResult, Failure, Limits, Report, RunSummary, SampleResult
from agents.evaluation.samples import SampleFile, load_samples
from agents.sandbox.bwrap import INSTALL_HINT, SandboxUnavailable, usable_bwrap
from agents.sandbox.policy import EVAL_SANDBOX_ENV, evaluation_confined
from context.redaction import redact_value
from scenarios.journal import Direct, FileWriter
from scenarios.store import Layout, StoreError, json_text

FINAL_DATA_CHARS = 200_000  # larger final data is left out of the trace


class EvaluationError(StoreError):
    """The folder cannot be evaluated (missing tools/ or samples/, unknown sample ids)."""


@dataclass
class Evaluated:
    result: SampleResult
    trace: dict[str, Any] = field(default_factory=dict)


def evaluate_sample(item: SampleFile, out_dir: Path, *, timeout_s: float, memory_mb: int) -> Evaluated:
    started = time.monotonic()
    file = f"samples/{item.path.name}"
    if item.problem is not None or item.sample is None or item.raw is None:
        reason = item.problem or "invalid sample"
        result = SampleResult(
            id=item.key, file=file, passed=False, layer="L4", reason=reason, duration_s=_since(started)
        )
        trace = {"sample": item.key, "file": file, "passed": False, "layer": "L4", "reason": reason, "child": None}
        return Evaluated(result, trace)
    run = run_child(out_dir, item.raw, timeout_s=timeout_s, memory_mb=memory_mb)
    verdict = classify(item.sample, run, timeout_s=timeout_s, memory_mb=memory_mb)
    outputs = run.result.outputs if run.result else []
    result = SampleResult(
        id=item.key, file=file, passed=verdict.layer is None, layer=verdict.layer,
        reason=verdict.reason, duration_s=_since(started), outputs=outputs,
    )
    return Evaluated(result, _trace(item, result, run))


def _trace(item: SampleFile, result: SampleResult, run: ChildRun) -> dict[str, Any]:
    sample = item.sample
    assert sample is not None
    child = run.result or ChildResult()
    trace: dict[str, Any] = {
        **result.model_dump(exclude={"id", "outputs"}),
        "sample": item.key,
        "instruction": sample.instruction,
        "rules": sample.rules,
        "actions": [a.model_dump() for a in sample.actions],
        "expected_outputs": sample.expected_outputs,
        "outputs": child.outputs,
        "expected_state": sample.expected_state,
        "tools": child.tools,
        "checkers": [c.model_dump(exclude_none=True) for c in child.checkers],
        "checker_errors": child.checker_errors,
        "error": child.error.model_dump() if child.error else None,
        "child": {
            "returncode": run.returncode,
            "timed_out": run.timed_out,
            "phase": child.phase if run.result else run.progress.phase,
            "stdout_tail": run.stdout_tail,
            "stderr_tail": run.stderr_tail,
        },
    }
    final = json.dumps(child.final_data, ensure_ascii=False)
    if len(final) <= FINAL_DATA_CHARS:
        trace["final_data"] = child.final_data
    else:
        trace["final_data_omitted"] = f"{len(final)} characters; larger than {FINAL_DATA_CHARS}"
    return trace


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)


def check_folders(out_dir: Path, iteration: int) -> None:
    where = f"execution_outputs/iteration_{iteration}"
    contract = (
        f"write {where}/tools/tools.py (public functions name(data: dict, **args) -> dict), "
        f"{where}/tools/data.json (the initial data, a JSON object), "
        f"{where}/checkers/*.py (check_<what>(sample, outcome) -> {{'passed': bool, 'reason': str}}) "
        f"and {where}/samples/*.json"
    )
    if not (out_dir / "tools").is_dir():
        raise EvaluationError(f"{where}/tools/ does not exist; {contract}")
    if not (out_dir / "samples").is_dir() or not any((out_dir / "samples").glob("*.json")):
        raise EvaluationError(f"no samples in {where}/samples/; {contract}")


def check_sandbox() -> str:
    """``bwrap`` when samples can run in the sandbox here, ``none`` when a person turned it off;
    otherwise the evaluation stops, saying why and what to do (nothing runs unconfined by default)."""
    try:
        if not evaluation_confined():
            return "none"
        usable_bwrap()
    except ValueError as exc:
        raise EvaluationError(f"{exc}; correct or unset it and start the worker again") from None
    except SandboxUnavailable as exc:
        raise EvaluationError(
            f"evaluation samples run only in a bubblewrap sandbox, and none can be made here: {exc}. An operator "
            f"must {INSTALL_HINT}. Running them unconfined, next to the worker's secrets, is a person's choice: "
            f"{EVAL_SANDBOX_ENV}=none in the worker's environment"
        ) from None
    return "bwrap"


def select(files: list[SampleFile], only: list[str] | None) -> list[SampleFile]:
    """The samples to run: all, or those whose id (or file stem) is in ``only``."""
    if only is None:
        return files
    wanted = set(only)
    chosen = [f for f in files if f.key in wanted or f.path.stem in wanted]
    known = {f.key for f in files} | {f.path.stem for f in files}
    unknown = sorted(wanted - known)
    if unknown:
        listed = ", ".join(sorted({f.key for f in files})[:30])
        raise EvaluationError(f"unknown sample ids: {', '.join(unknown)}; the samples are: {listed}")
    return chosen


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip(".")[:100] or "sample"


def trace_names(done: list[Evaluated]) -> list[str]:
    """traces/<sample id>.json, made filename-safe; a clash (duplicate ids) adds the file stem."""
    names: list[str] = []
    for item in done:
        name = f"{_safe(item.result.id)}.json"
        if name in names:
            name = f"{_safe(item.result.id)}__{_safe(Path(item.result.file).stem)}.json"
        names.append(name)
    return names


def run_evaluation(
    root: Path,
    iteration: int,
    *,
    timeout_s: float,
    memory_mb: int,
    only: list[str] | None = None,
    model_label: str = "",
    files: FileWriter | None = None,
) -> dict[str, Any]:
    """Evaluate ``execution_outputs/iteration_<n>`` sample by sample and write results.jsonl,
    report.json and traces/ through ``files`` (a step's journal, or directly); returns the report."""
    files = files or Direct(Path(root))
    started = time.monotonic()
    out_dir = Layout(Path(root)).outputs(iteration)
    check_folders(out_dir, iteration)
    sandbox = check_sandbox()
    chosen = select(load_samples(Path(root), out_dir / "samples"), only)
    # Sequential on purpose: the machine has two cores, and a sample's limits are
    # easier to reason about when nothing else competes with it.
    done = [evaluate_sample(item, out_dir, timeout_s=timeout_s, memory_mb=memory_mb) for item in chosen]
    _write_traces(out_dir / "traces", done, full_run=only is None, files=files)
    # Redacted before anything is written: a sample may print or return what it found (a key).
    lines = "".join(json.dumps(redact_value(e.result.model_dump()), ensure_ascii=False) + "\n" for e in done)
    files.write(out_dir / "results.jsonl", lines)  # a re-run replaces the previous evaluation
    report = _report(iteration, done, timeout_s, memory_mb, started, model_label, only)
    report.update(_history(out_dir / "report.json"), sandbox=sandbox)
    report = redact_value(report)
    files.write(out_dir / "report.json", json_text(report))
    return report


def _history(path: Path) -> dict[str, Any]:
    """The run number and the earlier runs, from the report this run replaces."""
    try:
        old = Report.model_validate_json(path.read_bytes())
    except (OSError, ValueError):  # no report yet, or one edited by hand: start the history afresh
        return {"run": 1, "previous_runs": []}
    summary = RunSummary(run=old.run, total=old.total, passed=old.passed, success_rate=old.success_rate,
                         failures_per_layer=old.failures_per_layer, generated_at=old.generated_at, only=old.only)
    previous = [*old.previous_runs, summary]
    return {"run": old.run + 1, "previous_runs": [p.model_dump(exclude_none=True) for p in previous]}


def _write_traces(traces: Path, done: list[Evaluated], *, full_run: bool, files: FileWriter) -> None:
    names = trace_names(done)
    if full_run and traces.is_dir():  # traces of samples that no longer exist would mislead
        for old in traces.glob("*.json"):
            if old.name not in names:
                files.unlink(old)
    for name, item in zip(names, done, strict=True):
        files.write(traces / name, json_text(redact_value(item.trace)))


def _report(
    iteration: int, done: list[Evaluated], timeout_s: float, memory_mb: int,
    started: float, model_label: str, only: list[str] | None,
) -> dict[str, Any]:
    results = [e.result for e in done]
    failures = [Failure(sample=r.id, layer=r.layer, reason=r.reason) for r in results if r.layer is not None]
    passed = sum(r.passed for r in results)
    report = Report(
        iteration=iteration,
        total=len(results),
        passed=passed,
        failed=len(results) - passed,
        success_rate=round(passed / len(results), 4) if results else 0.0,
        failures_per_layer={layer: sum(f.layer == layer for f in failures) for layer in LAYERS},
        failures=failures,
        limits=Limits(timeout_s=timeout_s, memory_mb=memory_mb),
        duration_s=_since(started),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        model_label=model_label or None,
        only=list(only) if only is not None else None,
    )
    return report.model_dump(exclude_none=True)

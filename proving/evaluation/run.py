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

from context.redaction import redact_value
from proving.evaluation.child import ChildRun, run_child
from proving.evaluation.classify import classify
from proving.evaluation.models import LAYERS, ChildResult, Failure, Limits, Report, RunSummary, SampleResult
from proving.evaluation.samples import SampleFile, load_samples
from proving.sandbox.bwrap import INSTALL_HINT, SandboxUnavailable, usable_bwrap
from proving.sandbox.limits import EVAL_DISK_MB
from proving.sandbox.policy import EVAL_SANDBOX_ENV, evaluation_confined
from scenarios import confined as folder_access
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.journal import Direct, FileWriter
from scenarios.store import Layout, StoreError, json_text

FINAL_DATA_CHARS = 200_000  # larger final data is left out of the trace
REPORT_NOTES = 20  # entries of tools/ and checkers/ not copied, named in the report (each trace has its own)


class EvaluationError(StoreError):
    """The folder cannot be evaluated (missing tools/ or samples/, unknown sample ids)."""


@dataclass
class Evaluated:
    result: SampleResult
    trace: dict[str, Any] = field(default_factory=dict)
    not_copied: list[str] = field(default_factory=list)  # entries of tools/ and checkers/ refused


def evaluate_sample(item: SampleFile, root: Path, out_dir: Path, *, timeout_s: float, memory_mb: int,
                    disk_mb: int = EVAL_DISK_MB) -> Evaluated:
    """Run one sample of the iteration folder ``out_dir`` of the scenario folder ``root``, and classify it."""
    started = time.monotonic()
    file = f"samples/{item.path.name}"
    if item.problem is not None or item.sample is None or item.raw is None:
        reason = item.problem or "invalid sample"
        result = SampleResult(
            id=item.key, file=file, passed=False, layer="L4", reason=reason, duration_s=_since(started)
        )
        trace = {"sample": item.key, "file": file, "passed": False, "layer": "L4", "reason": reason, "child": None}
        return Evaluated(result, trace)
    run = run_child(root, folder_access.parts_under(root, out_dir), item.raw, timeout_s=timeout_s,
                    memory_mb=memory_mb, disk_mb=disk_mb)
    verdict = classify(item.sample, run, timeout_s=timeout_s, memory_mb=memory_mb, disk_mb=disk_mb)
    outputs = run.result.outputs if run.result else []
    result = SampleResult(
        id=item.key, file=file, passed=verdict.layer is None, layer=verdict.layer,
        reason=verdict.reason, duration_s=_since(started), outputs=outputs,
    )
    return Evaluated(result, _trace(item, result, run), run.not_copied)


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
            # entries of tools/ and checkers/ not copied into the sample, and what it left that was not read
            "refused": [*run.not_copied, *run.refused],
            **({"disk_full": True} if run.disk_full else {}),
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


def check_folders(root: Path, out_dir: Path, iteration: int) -> None:
    where = f"execution_outputs/iteration_{iteration}"
    contract = (
        f"write {where}/tools/tools.py (public functions name(data: dict, **args) -> dict), "
        f"{where}/tools/data.json (the initial data, a JSON object), "
        f"{where}/checkers/*.py (check_<what>(sample, outcome) -> {{'passed': bool, 'reason': str}}) "
        f"and {where}/samples/*.json"
    )
    folder = Folder(Path(root))
    if not folder.is_dir(out_dir / "tools"):  # a link in its place is no folder: it is never entered
        raise EvaluationError(f"{where}/tools/ does not exist; {contract}")
    if not folder.is_dir(out_dir / "samples") or not folder.names(out_dir / "samples", "*.json",
                                                                  kinds=("file", "link", "special")):
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
    disk_mb: int | None = None,
) -> dict[str, Any]:
    """Evaluate ``execution_outputs/iteration_<n>`` sample by sample and write results.jsonl,
    report.json and traces/ through ``files`` (a step's journal, or directly); returns the report.
    ``disk_mb``: the size of each sample's folder (``eval_disk_mb``; None: its default)."""
    disk_mb = EVAL_DISK_MB if disk_mb is None else disk_mb
    files = files or Direct(Path(root))
    started = time.monotonic()
    out_dir = Layout(Path(root)).outputs(iteration)
    check_folders(Path(root), out_dir, iteration)
    sandbox = check_sandbox()
    chosen = select(load_samples(Path(root), out_dir / "samples"), only)
    # Sequential on purpose: the machine has two cores, and a sample's limits are
    # easier to reason about when nothing else competes with it.
    done = [evaluate_sample(item, Path(root), out_dir, timeout_s=timeout_s, memory_mb=memory_mb, disk_mb=disk_mb)
            for item in chosen]
    _write_traces(Folder(Path(root)), out_dir / "traces", done, full_run=only is None, files=files)
    # Redacted before anything is written: a sample may print or return what it found (a key).
    lines = "".join(json.dumps(redact_value(e.result.model_dump()), ensure_ascii=False) + "\n" for e in done)
    files.write(out_dir / "results.jsonl", lines)  # a re-run replaces the previous evaluation
    report = _report(iteration, done, Limits(timeout_s=timeout_s, memory_mb=memory_mb, disk_mb=disk_mb), started,
                     model_label, only)
    report.update(_history(Folder(Path(root)), out_dir / "report.json"), sandbox=sandbox)
    report = redact_value(report)
    files.write(out_dir / "report.json", json_text(report))
    return report


def _history(folder: Folder, path: Path) -> dict[str, Any]:
    """The run number and the earlier runs, from the report this run replaces."""
    try:
        old = Report.model_validate_json(folder.read_bytes(path, RECORD_BYTES))
    except (OSError, ValueError):  # none yet, edited by hand, a link or FIFO (StoreError): start afresh
        return {"run": 1, "previous_runs": []}
    summary = RunSummary(run=old.run, total=old.total, passed=old.passed, success_rate=old.success_rate,
                         failures_per_layer=old.failures_per_layer, generated_at=old.generated_at, only=old.only)
    previous = [*old.previous_runs, summary]
    return {"run": old.run + 1, "previous_runs": [p.model_dump(exclude_none=True) for p in previous]}


def _write_traces(folder: Folder, traces: Path, done: list[Evaluated], *, full_run: bool,
                  files: FileWriter) -> None:
    names = trace_names(done)
    if folder.kind(traces) not in (None, "folder"):
        files.unlink(traces)  # a link (or file) planted in the traces' place is removed, never written through
    if full_run and folder.is_dir(traces):  # traces of samples that no longer exist would mislead
        for old in folder.names(traces, "*.json", kinds=("file", "link", "special")):
            if old not in names:
                files.unlink(traces / old)
    for name, item in zip(names, done, strict=True):
        files.write(traces / name, json_text(redact_value(item.trace)))


def _report(
    iteration: int, done: list[Evaluated], limits: Limits, started: float, model_label: str, only: list[str] | None,
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
        limits=limits,
        duration_s=_since(started),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        model_label=model_label or None,
        only=list(only) if only is not None else None,
        notes=_notes(done) or None,
    )
    return report.model_dump(exclude_none=True)


def _notes(done: list[Evaluated]) -> list[str]:
    """What was not copied into the samples (the same for each, as a rule), once."""
    refused = list(dict.fromkeys(entry for item in done for entry in item.not_copied))
    notes = [f"not copied into the samples (regular files and folders only): {entry}" for entry in refused]
    more = len(notes) - REPORT_NOTES
    return notes[:REPORT_NOTES] + ([f"and {more} more; each sample's trace names them all"] if more > 0 else [])

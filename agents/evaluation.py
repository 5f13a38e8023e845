"""Evaluation of a generated scenario (SPEC §7, docs/evaluation.md).

Execute writes ``execution_outputs/iteration_<n>/``: ``tools/tools.py`` and
``tools/data.json``, ``checkers/*.py`` and ``samples/*.json``. Each sample is
replayed through the tools on a fresh copy of the data and judged by the
checkers, in its own child process (``agents/eval_child.py``) with a time and a
memory limit: generated code never runs in baton's process. Every failure is
classified into one layer:

- L1 design: a checker raised ``DesignIssue`` (the rules contradict each other
  or leave the outcome undetermined);
- L2 tool: the tools fail to load, raise, return a bad value, hit a limit, or
  produce an outcome that is neither the expected one nor compliant;
- L3 checker: a checker fails to load, crashes, returns a bad value, hits a
  limit, or fails an outcome that matches the sample's expectation;
- L4 sample: the sample is malformed, names an unknown tool, or expects an
  outcome the checkers reject while they accept the actual one.

Results go to ``results.jsonl``, ``report.json`` and ``traces/<sample>.json``.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agents.tooling import ToolContext, ToolResult, error, ok
from scenarios.store import Layout, StoreError, relative, write_atomic, write_json

Layer = Literal["L1", "L2", "L3", "L4"]
LAYERS: tuple[Layer, ...] = ("L1", "L2", "L3", "L4")
CHILD_SCRIPT = Path(__file__).with_name("eval_child.py")
TAIL_BYTES = 4096  # per stream of the child kept for the trace: the end says how it died
FINAL_DATA_CHARS = 200_000  # larger final data is left out of the trace
TOOL_FAILURES = 20  # failures listed in the RunEvaluation result
TOOL_REASON_CHARS = 300
VALUE_CHARS = 120  # a value quoted in a reason


class EvaluationError(StoreError):
    """The folder cannot be evaluated (missing tools/ or samples/, unknown sample ids)."""


# ---- shapes at the boundary -------------------------------------------------------


class Action(BaseModel):
    # Unknown keys are refused: {"tool": ..., "arguments": ...} must not silently run with no args.
    model_config = ConfigDict(extra="forbid")
    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class Sample(BaseModel):
    # Refused too: a misspelt "expected_state" would otherwise make a sample pass unchecked.
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=200)
    instruction: str = Field(min_length=1)
    actions: list[Action]
    expected_outputs: list[dict[str, Any] | None] | None = None
    expected_state: dict[str, Any] = Field(default_factory=dict)
    rules: list[str] = Field(default_factory=list)
    description: str | None = None  # free text for people; not used by the harness
    notes: str | None = None

    @field_validator("id")
    @classmethod
    def _id_has_text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("id must not be blank")
        return value

    @model_validator(mode="after")
    def _one_expected_output_per_action(self) -> Sample:
        if self.expected_outputs is not None and len(self.expected_outputs) != len(self.actions):
            raise ValueError(
                f"expected_outputs has {len(self.expected_outputs)} entries but there are "
                f"{len(self.actions)} actions; give one per action (null = not checked)"
            )
        return self


class SampleResult(BaseModel):
    id: str
    file: str
    passed: bool
    layer: Layer | None
    reason: str
    duration_s: float
    outputs: list[Any] = Field(default_factory=list)


class Failure(BaseModel):
    sample: str
    layer: Layer
    reason: str


class Limits(BaseModel):
    timeout_s: float
    memory_mb: int


class RunSummary(BaseModel):
    """An earlier evaluation of the same iteration, kept so fixes stay visible."""

    run: int
    total: int
    passed: int
    success_rate: float
    failures_per_layer: dict[Layer, int]
    generated_at: str
    only: list[str] | None = None


class Report(BaseModel):
    iteration: int
    total: int
    passed: int
    failed: int
    success_rate: float
    failures_per_layer: dict[Layer, int]
    failures: list[Failure]
    limits: Limits
    duration_s: float
    generated_at: str
    model_label: str | None = None
    only: list[str] | None = None  # set when a subset of the samples was re-run
    run: int = 1  # the how-many-th evaluation of this iteration
    previous_runs: list[RunSummary] = Field(default_factory=list)


class ChildError(BaseModel):
    model_config = ConfigDict(extra="allow")
    phase: str = ""
    kind: str = ""
    message: str = ""


class CheckerVerdict(BaseModel):
    model_config = ConfigDict(extra="allow")
    checker: str
    passed: bool | None = None
    reason: str = ""
    error: str | None = None  # None | "design_issue" | "raised" | "bad_type"


class ChildResult(BaseModel):
    """What eval_child.py writes. Parsed defensively: generated code runs in that
    process and could have damaged the file; then the child counts as crashed."""

    model_config = ConfigDict(extra="ignore")
    completed: bool = False
    phase: str = ""
    tools: list[str] = Field(default_factory=list)
    outputs: list[Any] = Field(default_factory=list)
    final_data: Any = None
    error: ChildError | None = None
    checkers: list[CheckerVerdict] = Field(default_factory=list)
    checker_errors: list[dict[str, Any]] = Field(default_factory=list)
    design_issues: list[dict[str, Any]] = Field(default_factory=list)


class ChildProgress(BaseModel):
    model_config = ConfigDict(extra="allow")
    phase: str = "load"
    design_issues: list[dict[str, Any]] = Field(default_factory=list)


# ---- samples on disk ----------------------------------------------------------------


@dataclass
class SampleFile:
    path: Path
    key: str  # the sample's id, or the file stem when the file has no usable id
    raw: dict[str, Any] | None = None
    sample: Sample | None = None
    problem: str | None = None  # why this is an L4 before anything runs


def load_samples(samples_dir: Path) -> list[SampleFile]:
    """Every samples/*.json in name order, parsed and schema-checked; duplicates flagged."""
    files = [_load_sample(path) for path in sorted(samples_dir.glob("*.json")) if path.is_file()]
    seen: dict[str, Path] = {}
    for item in files:
        if item.key in seen and item.problem is None:
            item.problem = f"duplicate id {item.key!r}: samples/{seen[item.key].name} uses it too; ids must be unique"
        seen.setdefault(item.key, item.path)
    return files


def _load_sample(path: Path) -> SampleFile:
    item = SampleFile(path=path, key=path.stem)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        item.problem = f"samples/{path.name} is not valid JSON: {exc}"
        return item
    if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"].strip():
        item.key = raw["id"]
    try:
        item.sample = Sample.model_validate(raw)
    except ValidationError as exc:
        item.problem = f"samples/{path.name} does not fit the sample schema: {_validation_text(exc)}"
        return item
    item.raw = raw
    return item


def _validation_text(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{where}: {err['msg']}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


# ---- the child process ------------------------------------------------------------


@dataclass
class ChildRun:
    result: ChildResult | None
    progress: ChildProgress
    returncode: int
    timed_out: bool
    stdout_tail: str = ""
    stderr_tail: str = ""


class _Tail(threading.Thread):
    """Drains one pipe of the child and keeps its last bytes only: a sample that
    prints without end must not fill baton's memory."""

    def __init__(self, stream: Any):
        super().__init__(daemon=True)
        self.stream = stream
        self.buffer = bytearray()
        self.total = 0

    def run(self) -> None:
        fd = self.stream.fileno()
        while chunk := os.read(fd, 65536):
            self.total += len(chunk)
            self.buffer += chunk
            if len(self.buffer) > TAIL_BYTES:
                del self.buffer[:-TAIL_BYTES]

    def text(self) -> str:
        body = self.buffer.decode("utf-8", "replace")
        return f"[... {self.total - len(self.buffer)} bytes before]\n{body}" if self.total > len(self.buffer) else body


def _limiter(timeout_s: float, memory_mb: int) -> Callable[[], None]:
    """The preexec_fn: limits applied in the child before it executes Python."""
    memory = memory_mb * 1024 * 1024
    # CPU time is a backstop for the wall clock (SIGXCPU, then SIGKILL a second later).
    cpu = math.ceil(timeout_s) + 1

    def apply() -> None:
        _set_limit(resource.RLIMIT_AS, memory)
        _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
        _set_limit(resource.RLIMIT_CORE, 0)  # a killed child must not leave core files
        # Output files are bounded too: a loop writing to disk stops at twice the memory cap.
        _set_limit(resource.RLIMIT_FSIZE, 2 * memory)

    return apply


def _set_limit(which: int, soft: int, hard: int | None = None) -> None:
    _, current_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:  # an unprivileged process cannot raise its hard limit
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(which, (soft, hard))


def _child_env(home: Path) -> dict[str, str]:
    # Nothing of baton's environment (API keys, Redis URLs) reaches generated code.
    # HOME and TMPDIR point into the temp dir, which is removed afterwards.
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": str(home),
        "TMPDIR": str(home),
    }


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for the child without reaping it; True if the time limit passed.

    Not reaped, the child keeps its pid (and so its process group id) reserved,
    so the group can be killed afterwards without hitting a reused pid."""
    if not hasattr(os, "waitid"):  # not on macOS: plain wait, group kill is best effort
        try:
            proc.wait(timeout=timeout_s)
            return False
        except subprocess.TimeoutExpired:
            return True
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return True
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return False


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_child(out_dir: Path, raw_sample: dict[str, Any], *, timeout_s: float, memory_mb: int) -> ChildRun:
    """Run one sample in a fresh temp dir holding copies of tools/ and checkers/."""
    with tempfile.TemporaryDirectory(prefix="baton-eval-") as tmp_name:
        tmp = Path(tmp_name)
        work = tmp / "work"
        work.mkdir()
        for folder in ("tools", "checkers"):
            if (out_dir / folder).is_dir():
                shutil.copytree(out_dir / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        job = {
            "tools_dir": str(work / "tools"),
            "checkers_dir": str(work / "checkers"),
            "sample": raw_sample,
            "result_path": str(tmp / "result.json"),
            "progress_path": str(tmp / "progress.json"),
        }
        (tmp / "job.json").write_text(json.dumps(job), encoding="utf-8")
        run = _spawn(tmp, work, timeout_s, memory_mb)
        run.result = _read_model(tmp / "result.json", ChildResult)
        run.progress = _read_model(tmp / "progress.json", ChildProgress) or ChildProgress()
        return run


def _spawn(tmp: Path, work: Path, timeout_s: float, memory_mb: int) -> ChildRun:
    proc = subprocess.Popen(
        [sys.executable, "-I", str(CHILD_SCRIPT), str(tmp / "job.json")],
        cwd=work,
        env=_child_env(work),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, killed as a whole
        preexec_fn=_limiter(timeout_s, memory_mb),  # noqa: PLW1509 - only setrlimit calls
        close_fds=True,
    )
    tails = [_Tail(proc.stdout), _Tail(proc.stderr)]
    for tail in tails:
        tail.start()
    timed_out = _wait(proc, timeout_s)
    _kill_group(proc.pid)  # on time-out, and to end anything the sample left running
    returncode = proc.wait()
    for tail in tails:
        tail.join(timeout=2)  # a grandchild that escaped the group may hold a pipe open
    return ChildRun(None, ChildProgress(), returncode, timed_out, tails[0].text(), tails[1].text())


def _read_model(path: Path, model: type[Any]) -> Any:
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None


# ---- classification ------------------------------------------------------------------


@dataclass
class Verdict:
    layer: Layer | None
    reason: str


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."


def _where(phase: str, detail: dict[str, Any]) -> str:
    if phase == "actions" and "action" in detail:
        return f"action {detail['action']} (tool {detail.get('tool')})"
    if phase == "actions":
        return "reading the final data"
    if phase == "checkers" and "checker" in detail:
        return f"checker {detail['checker']}"
    if phase == "checkers":
        return "importing checkers"
    if phase == "load" and detail.get("step") == "data":
        return "loading tools/data.json"
    if phase == "sample":
        return "checking the sample's actions"
    return "importing tools/tools.py"


def _phase_layer(phase: str) -> Layer:
    return "L3" if phase == "checkers" else "L2"


def classify(sample: Sample, run: ChildRun, *, timeout_s: float, memory_mb: int) -> Verdict:
    """The layer of a sample's failure (first match wins) or None when it passed."""
    result = run.result
    if result is None or (not result.completed and result.error is None):
        return _classify_dead(run, timeout_s, memory_mb)
    if result.error is not None and result.error.kind != "memory":
        return _classify_error(result.error)
    design = [c for c in result.checkers if c.error == "design_issue"]
    if design:
        return Verdict("L1", f"checker {design[0].checker} raised DesignIssue: {design[0].reason}")
    if result.error is not None:  # out of memory, recorded by the child itself
        detail = result.error.model_dump()
        return Verdict(_phase_layer(result.error.phase), f"memory limit ({memory_mb} MB) reached in {_where(result.error.phase, detail)}")
    broken = _checker_problem(result)
    if broken:
        return Verdict("L3", broken)
    return _judge(sample, result)


def _classify_error(err: ChildError) -> Verdict:
    if err.phase == "sample":
        return Verdict("L4", err.message)
    return Verdict(_phase_layer(err.phase), err.message)


def _classify_dead(run: ChildRun, timeout_s: float, memory_mb: int) -> Verdict:
    """No result file: the child was killed (time limit) or died (memory, signal)."""
    progress = run.progress
    detail = progress.model_dump()
    where = _where(progress.phase, detail)
    if progress.phase == "checkers" and progress.design_issues:
        first = progress.design_issues[0]
        return Verdict("L1", f"checker {first.get('checker')} raised DesignIssue: {first.get('message')}")
    layer = _phase_layer(progress.phase)
    stderr = run.stderr_tail
    if run.timed_out:
        return Verdict(layer, f"time limit ({timeout_s:g} s) reached in {where}; the process was killed")
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr or "out of memory" in stderr.lower():
        return Verdict(layer, f"memory limit ({memory_mb} MB) reached in {where}")
    if run.returncode == -signal.SIGXCPU:
        return Verdict(layer, f"CPU time limit ({math.ceil(timeout_s) + 1} s) reached in {where}")
    if run.returncode < 0:
        name = signal.Signals(-run.returncode).name if -run.returncode in signal.valid_signals() else str(-run.returncode)
        return Verdict(layer, f"the process died of signal {name} in {where}")
    last = stderr.strip().splitlines()[-1:] or ["no error output"]
    return Verdict(layer, f"the process exited with code {run.returncode} in {where} without a result: {last[0][:300]}")


def _checker_problem(result: ChildResult) -> str | None:
    if result.checker_errors:
        err = result.checker_errors[0]
        at = f" at {err['location']}" if err.get("location") else ""
        return f"{err.get('module')} failed to import: {err.get('exception')}{at}"
    for verdict in result.checkers:
        if verdict.error in ("raised", "bad_type"):  # the reason says which
            return f"checker {verdict.checker} {verdict.reason}"
    if not result.checkers:
        return (
            "no checkers found: write checkers/<name>.py with functions "
            "def check_<what>(sample: dict, outcome: dict) -> {'passed': bool, 'reason': str}"
        )
    return None


def _judge(sample: Sample, result: ChildResult) -> Verdict:
    """Both checks ran: the 2x2 of (matches the expectation) x (checkers pass)."""
    difference = first_difference(sample, result.outputs, result.final_data)
    failed = [c for c in result.checkers if not c.passed]
    said = f"checker {failed[0].checker} failed it: {failed[0].reason or '(no reason given)'}" if failed else ""
    if difference is None and not failed:
        return Verdict(None, "passed")
    if difference is None:
        return Verdict("L3", f"the outcome matches the sample's expected outputs and state, but {said}")
    if not failed:
        return Verdict("L4", f"{difference}; every checker accepts the actual outcome, so the sample's expectation looks wrong")
    return Verdict("L2", f"{difference}; {said}")


def first_difference(sample: Sample, outputs: list[Any], final_data: Any) -> str | None:
    """The first expected output key or state path that differs, said concretely."""
    for index, expected in enumerate(sample.expected_outputs or []):
        if expected is None:
            continue
        actual = outputs[index] if index < len(outputs) else {}
        tool = sample.actions[index].tool
        for key, value in expected.items():
            if not isinstance(actual, dict) or key not in actual:
                keys = ", ".join(map(str, actual)) if isinstance(actual, dict) else ""
                return f"action {index} ({tool}) output has no key {key!r} (expected {_short(value)}; keys: {keys or 'none'})"
            if not same(value, actual[key]):
                return f"action {index} ({tool}) output {key!r}: expected {_short(value)}, got {_short(actual[key])}"
    for path, value in sample.expected_state.items():
        found, actual = lookup(final_data, path)
        if not found:
            return f"expected_state {path!r}: {actual} in the final data (expected {_short(value)})"
        if not same(value, actual):
            return f"expected_state {path!r}: expected {_short(value)}, got {_short(actual)}"
    return None


def same(expected: Any, actual: Any) -> bool:
    """JSON equality, except that true is not 1 (Python's == says it is)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(same(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(same(a, b) for a, b in zip(expected, actual))
    return bool(expected == actual)


def lookup(data: Any, path: str) -> tuple[bool, Any]:
    """``orders.0.status`` (or ``orders[0].status``) in ``data``: (True, value), or
    (False, what is missing)."""
    current = data
    walked: list[str] = []
    for part in re.sub(r"\[(-?\d+)\]", r".\1", path).split("."):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and re.fullmatch(r"-?\d+", part) and -len(current) <= int(part) < len(current):
            current = current[int(part)]
        else:
            here = ".".join(walked) or "the top level"
            kind = "list" if isinstance(current, list) else "object" if isinstance(current, dict) else type(current).__name__
            return False, f"no {part!r} in {here} (a {kind})"
        walked.append(part)
    return True, current


# ---- one run -------------------------------------------------------------------------


@dataclass
class Evaluated:
    result: SampleResult
    trace: dict[str, Any] = field(default_factory=dict)


def evaluate_sample(item: SampleFile, out_dir: Path, *, timeout_s: float, memory_mb: int) -> Evaluated:
    started = time.monotonic()
    file = f"samples/{item.path.name}"
    if item.problem is not None or item.sample is None or item.raw is None:
        reason = item.problem or "invalid sample"
        result = SampleResult(id=item.key, file=file, passed=False, layer="L4", reason=reason, duration_s=_since(started))
        return Evaluated(result, {"sample": item.key, "file": file, "passed": False, "layer": "L4", "reason": reason, "child": None})
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
) -> dict[str, Any]:
    """Evaluate ``execution_outputs/iteration_<n>`` sample by sample and write
    results.jsonl, report.json and traces/; returns the report."""
    started = time.monotonic()
    out_dir = Layout(Path(root)).outputs(iteration)
    check_folders(out_dir, iteration)
    chosen = select(load_samples(out_dir / "samples"), only)
    # Sequential on purpose: the machine has two cores, and a sample's limits are
    # easier to reason about when nothing else competes with it.
    done = [evaluate_sample(item, out_dir, timeout_s=timeout_s, memory_mb=memory_mb) for item in chosen]
    _write_traces(out_dir / "traces", done, full_run=only is None)
    lines = "".join(json.dumps(e.result.model_dump(), ensure_ascii=False) + "\n" for e in done)
    write_atomic(out_dir / "results.jsonl", lines)  # a re-run replaces the previous evaluation
    report = _report(iteration, done, timeout_s, memory_mb, started, model_label, only)
    report.update(_history(out_dir / "report.json"))
    write_json(out_dir / "report.json", report)
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


def _write_traces(traces: Path, done: list[Evaluated], *, full_run: bool) -> None:
    names = trace_names(done)
    if full_run and traces.is_dir():  # traces of samples that no longer exist would mislead
        for old in traces.glob("*.json"):
            if old.name not in names:
                old.unlink(missing_ok=True)
    for name, item in zip(names, done, strict=True):
        write_json(traces / name, item.trace)


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


# ---- the agent tool ----------------------------------------------------------------------


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
            return error(f"iteration must be an integer from 1 to {ctx.iteration} (the current iteration); got {iteration!r}")
        only = tool_input.get("samples")
        if only is not None and (not isinstance(only, list) or not only or not all(isinstance(s, str) and s for s in only)):
            return error("samples must be a non-empty list of sample ids; omit it to run all samples")
        try:
            report = run_evaluation(
                ctx.root, iteration, timeout_s=ctx.eval_timeout_s, memory_mb=ctx.eval_memory_mb,
                only=only, model_label=ctx.model_label,
            )
        except EvaluationError as exc:
            return error(str(exc))
        return ok(_summary(report, ctx.root, iteration))


def _summary(report: dict[str, Any], root: Path, iteration: int) -> dict[str, Any]:
    out_dir = Layout(root).outputs(iteration)
    failures = [
        {**f, "reason": f["reason"] if len(f["reason"]) <= TOOL_REASON_CHARS else f["reason"][: TOOL_REASON_CHARS - 3] + "..."}
        for f in report["failures"][:TOOL_FAILURES]
    ]
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

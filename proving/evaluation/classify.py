"""Classification: the layer (L1 design, L2 tool, L3 checker, L4 sample) of a failed
sample, from what its child process reported (docs/evaluation.md, "Layers")."""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass
from typing import Any

from proving.evaluation.child import ChildRun
from proving.evaluation.compare import same, short, state_differences
from proving.evaluation.models import ChildError, ChildResult, Layer, Sample
from proving.evaluation.reachable import unreachable
from proving.sandbox.nest import DISK_MB


@dataclass
class Verdict:
    layer: Layer | None
    reason: str


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


def classify(sample: Sample, run: ChildRun, *, timeout_s: float, memory_mb: int, disk_mb: int = DISK_MB) -> Verdict:
    """The layer of a sample's failure (first match wins) or None when it passed."""
    verdict = _classify(sample, run, timeout_s, memory_mb)
    if verdict.layer is None:
        return verdict
    if run.result is None:  # what stood where its result should be, and was refused
        verdict.reason += "".join(f"; {why}" for why in run.refused if why.startswith("result.json"))
    if run.disk_full:  # whatever failed next (a write of the tool's, the child's own result) failed for want of room
        verdict.reason = f"disk limit ({disk_mb} MB) of the sample's folder reached: {verdict.reason}"
    return verdict


def _classify(sample: Sample, run: ChildRun, timeout_s: float, memory_mb: int) -> Verdict:
    if run.problem is not None:
        return Verdict(run.problem_layer, run.problem)
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
        where = _where(result.error.phase, detail)
        return Verdict(_phase_layer(result.error.phase), f"memory limit ({memory_mb} MB) reached in {where}")
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
    if run.out_of_memory:
        return Verdict(layer, f"memory limit ({memory_mb} MB) reached by the sample as a whole in {where}; "
                              "the kernel killed its largest process")
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr or "out of memory" in stderr.lower():
        return Verdict(layer, f"memory limit ({memory_mb} MB) reached in {where}")
    if run.returncode == -signal.SIGXCPU:
        return Verdict(layer, f"CPU time limit ({math.ceil(timeout_s) + 1} s) reached in {where}")
    if run.returncode < 0:
        number = -run.returncode
        name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
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
    """Both checks ran: the 2x2 of (matches the expectation) x (checkers pass); before it, a conversational
    sample whose goal needs what the user never gives is unsolvable (proving/evaluation/reachable.py)."""
    gap = unreachable(sample, result.outputs)
    if gap is not None:
        return Verdict("L4", gap)
    difference = first_difference(sample, result.outputs, result.final_data)
    failed = [c for c in result.checkers if not c.passed]
    said = f"checker {failed[0].checker} failed it: {failed[0].reason or '(no reason given)'}" if failed else ""
    if difference is None and not failed:
        return Verdict(None, "passed")
    if difference is None:
        return Verdict("L3", f"the outcome matches the sample's expected outputs and state, but {said}")
    if not failed:
        return Verdict(
            "L4", f"{difference}; every checker accepts the actual outcome, so the sample's expectation looks wrong"
        )
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
                return (
                    f"action {index} ({tool}) output has no key {key!r} "
                    f"(expected {short(value)}; keys: {keys or 'none'})"
                )
            if not same(value, actual[key]):
                return f"action {index} ({tool}) output {key!r}: expected {short(value)}, got {short(actual[key])}"
    state = state_differences(sample.expected_state, final_data)
    return state[0] if state else None

"""Comparing what an outcome is with what it should be: JSON equality, dotted paths
into the data, and the difference between two final states.

Standard library only, on purpose: the harness (classify.py) uses it, and ``baton
export`` copies this file into the exported task, whose scorer judges a model's run
with the same rules (docs/export.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

VALUE_CHARS = 120  # a value quoted in a reason


def short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."


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
            kind = type(current).__name__
            kind = "list" if isinstance(current, list) else "object" if isinstance(current, dict) else kind
            return False, f"no {part!r} in {here} (a {kind})"
        walked.append(part)
    return True, current


def state_differences(expected_state: dict[str, Any], final_data: Any) -> list[str]:
    """Each ``expected_state`` path that the final data does not hold, said concretely."""
    found_wrong = []
    for path, value in expected_state.items():
        found, actual = lookup(final_data, path)
        if not found:
            found_wrong.append(f"expected_state {path!r}: {actual} in the final data (expected {short(value)})")
        elif not same(value, actual):
            found_wrong.append(f"expected_state {path!r}: expected {short(value)}, got {short(actual)}")
    return found_wrong


def free_text(actions: list[dict[str, Any]], initial_data: Any) -> set[str]:
    """The string arguments of the expected actions that the initial data does not hold
    anywhere (as a key or a value): text the agent writes itself (a refund's reason, a
    note), which a tool may store as is and which no two agents word alike. Strings the
    data already holds are identifiers (an order id) and are compared exactly."""
    known: set[str] = set()
    _collect_strings(initial_data, known)
    written = {v for a in actions for v in a.get("args", {}).values() if isinstance(v, str)}
    return written - known


def _collect_strings(value: Any, into: set[str]) -> None:
    if isinstance(value, str):
        into.add(value)
    elif isinstance(value, dict):
        into.update(k for k in value if isinstance(k, str))
        for item in value.values():
            _collect_strings(item, into)
    elif isinstance(value, list):
        for item in value:
            _collect_strings(item, into)


def effect_differences(reference: Any, actual: Any, written: set[str], path: str = "") -> list[str]:
    """Where ``actual`` (the data after the agent's calls) differs from ``reference`` (the
    data after the sample's expected actions). A reference value that is free text the
    agent wrote (``written``) only has to be some text in ``actual``."""
    if reference is actual:  # an untouched part shared by both (the gates' views): JSON equal to itself
        return []
    here = path or "the data"
    if isinstance(reference, str) and reference in written:
        return [] if isinstance(actual, str) else [f"{here}: expected some text, got {short(actual)}"]
    if isinstance(reference, dict) and isinstance(actual, dict):
        found: list[str] = []
        for key in reference.keys() - actual.keys():
            found.append(f"{_join(path, key)}: missing (expected {short(reference[key])})")
        for key in actual.keys() - reference.keys():
            found.append(f"{_join(path, key)}: not expected, got {short(actual[key])}")
        for key in reference.keys() & actual.keys():
            found += effect_differences(reference[key], actual[key], written, _join(path, key))
        return sorted(found)
    if isinstance(reference, list) and isinstance(actual, list):
        if len(reference) != len(actual):
            return [f"{here}: expected {len(reference)} item(s), got {len(actual)}: {short(actual)}"]
        found = []
        for index, (ref, act) in enumerate(zip(reference, actual)):
            found += effect_differences(ref, act, written, _join(path, str(index)))
        return found
    return [] if same(reference, actual) else [f"{here}: expected {short(reference)}, got {short(actual)}"]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# ---- a verdict on an outcome: the exported task's scorer and the deterministic gates (gate_harness.py) -------


def outcome_differences(sample: dict[str, Any], reference: Any, final_data: Any, written: set[str]) -> list[str]:
    """What keeps ``final_data`` from being the sample's right outcome: where it differs from ``reference`` (the
    data after the expected actions; ``written``: ``free_text`` of them) and each ``expected_state`` it lacks."""
    effects = effect_differences(reference, final_data, written)
    differences = [f"the final data differs from the expected actions' effects at {d}" for d in effects]
    return differences + state_differences(sample.get("expected_state", {}), final_data)


def checker_rejections(verdicts: dict[str, Any] | None, problem: str | None = None) -> list[str]:
    """What the checkers said against an outcome: ``verdicts`` is what the judging child left (its ``checkers``,
    ``checker_errors`` and ``error``), None when it left nothing, then ``problem`` says why."""
    found = verdicts or {}
    rejections = [_rejection(c) for c in dicts(found.get("checkers")) if c.get("passed") is not True]
    rejections += [f"checker module {e.get('module')} failed to import: {e.get('exception')}"
                   for e in dicts(found.get("checker_errors"))]
    if verdicts is None:  # the replay ended, so it was the checkers that the limit or a crash stopped
        rejections.append(f"the checkers {problem}")
    elif isinstance(found.get("error"), dict):  # out of memory: the checker named and those after it gave none
        error = found["error"]
        where = f" in checker {error['checker']}" if error.get("checker") else ""
        rejections.append(f"the checkers stopped{where}: {error.get('message')}")
    return rejections


def dicts(value: Any) -> list[dict[str, Any]]:
    """The dicts of a list read from a result file (the file is untrusted: anything else is dropped)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _rejection(verdict: dict[str, Any]) -> str:
    if verdict.get("error") == "design_issue":
        return f"checker {verdict.get('checker')} found a design issue: {verdict.get('reason')}"
    if verdict.get("error"):
        return f"checker {verdict.get('checker')} {verdict.get('reason')}"
    return f"checker {verdict.get('checker')} rejects it: {verdict.get('reason') or '(no reason given)'}"


def explain(passed: bool, n_calls: int, differences: list[str], rejections: list[str]) -> str:
    if passed:
        return (f"passed after {n_calls} tool call(s): the final data has the expected actions' effects, "
                "expected_state holds and every checker accepts")
    lines = [f"failed after {n_calls} tool call(s):"]
    lines += [f"- {d}" for d in differences[:10]]
    if len(differences) > 10:
        lines.append(f"- ... and {len(differences) - 10} more differences")
    lines += [f"- {r}" for r in rejections]
    return "\n".join(lines)

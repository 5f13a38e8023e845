"""The gold gate (issue 41, item 2): the expected actions themselves are checked, offline and without running any
generated code. Agreement between the samples and Execute's tools proves consistency only; a gold answer can be
consistently wrong, and every other gate then faithfully enforces it.

- ``failing_action``: an expected state-changing action the tool answered with an error, however it says so
  (errors.py): the evaluation's results.jsonl holds each sample's outputs;
- ``unsupported_value``: a literal of an expected state-changing action that neither the opening, the user's
  facts, the policy, an earlier call's output nor arithmetic over their numbers gives, or that a record the
  action refers to contradicts (sources.py);
- ``contradiction``: two samples whose rule-relevant facts match (the rules they cite and the records their
  actions refer to, up to renaming of ids) but whose decisions (the state-changing tools they call) differ.

Each is an L4 finding: a sample's gold must change (or, when the policy is what is wrong, Init says so).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from proving.evaluation.coverage import FREE_TEXT_KEYS, LOOKING, outcome_side
from proving.evaluation.errors import error_of, failed_at
from proving.evaluation.gates import FunctionGate, GateContext, GateResult, Unavailable, register
from proving.evaluation.purity import pure_tools
from proving.evaluation.quality import Finding
from proving.evaluation.sources import DataIndex, Sources, asked, held_otherwise, numbers_in, situation, walk
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import Layout

IMPORT_FAILED = re.compile(r"expected action (\d+) (\w+)\((.*?)\) fails in the domain's own code: (.*?); ")
SIMILAR = 0.5  # the share of words two requests have in common (ids, numbers left out) to be the same request


def call_text(index: int, action: Mapping[str, Any]) -> str:
    """"2: issue_refund(order_id='O1', amount=20.0)": an action as findings name it (numbered from 1)."""
    args = action.get("args") or {}
    return f"{index + 1}: {action.get('tool')}({', '.join(f'{k}={v!r}' for k, v in args.items())})"


def changes_state(action: Mapping[str, Any], pure: frozenset[str] = frozenset()) -> bool:
    """Not a lookup, nor a call of a pure tool (purity.py: ``calculate`` computes, it changes nothing)."""
    tool = str(action.get("tool", ""))
    return not LOOKING.match(tool) and tool not in pure


def _actions(sample: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [a for a in sample.get("actions") or [] if isinstance(a, dict) and "tool" in a]


def failing_actions(sample: Mapping[str, Any], result: Mapping[str, Any] | None,
                    pure: frozenset[str] = frozenset()) -> list[Finding]:
    """A finding per expected state-changing action the evaluation saw answered with an error."""
    if result is None:
        return []
    actions, outputs = _actions(sample), result.get("outputs") or []
    found = []
    for index, action in enumerate(actions):
        error = error_of(outputs[index]) if index < len(outputs) else None
        if error is None and index == len(outputs):
            error = failed_at(str(result.get("reason") or ""), index)
        if error is None or not changes_state(action, pure):
            continue
        found.append(Finding.of(
            "gold", "L4", f"expected action {call_text(index, action)} fails: the tool answers it with an error, so "
            "the gold asks for something the tools (and so the policy they enforce) refuse; correct the action or "
            "its arguments, or expect the refusal the policy calls for", sample=str(sample.get("id")),
            defect="failing_action", action=call_text(index, action), evidence=error[:300]))
        if index >= len(outputs):
            break
    return found


def failed_when_imported(sample: Mapping[str, Any], pure: frozenset[str] = frozenset()) -> list[Finding]:
    """A finding per expected action the import found failing in the benchmark's own code and left out (it
    changed nothing, so the sample's state is the same): ``baton import`` names each in the sample's notes, as
    "expected action N tool(args) fails in the domain's own code: MESSAGE; ..." (docs/import.md). A lookup that
    fails is left alone: a benchmark's gold may try a wrong email first, as its user would."""
    notes = sample.get("notes")
    if not isinstance(notes, str):
        return []
    return [Finding.of("gold", "L4", f"expected action {m.group(1)}: {m.group(2)}({m.group(3)}) fails in the "
                       "benchmark's own code (the import left it out, since it changed nothing): the gold asks for "
                       "something the tools refuse; correct the action or its arguments, or expect the refusal",
                       sample=str(sample.get("id")), defect="failing_action",
                       action=f"{int(m.group(1)) + 1}: {m.group(2)}({m.group(3)})", evidence=m.group(4)[:300])
            for m in IMPORT_FAILED.finditer(notes) if changes_state({"tool": m.group(2)}, pure)]


def unsupported_values(sample: Mapping[str, Any], result: Mapping[str, Any] | None, policy: str,
                       data: DataIndex, pure: frozenset[str] = frozenset()) -> list[Finding]:
    """A finding per literal of an expected state-changing action no source gives; where a record the action
    names holds it otherwise, the evidence says so."""
    outputs = list((result or {}).get("outputs") or [])
    sources = Sources.of(sample, policy, data)
    found = []
    for index, action in enumerate(_actions(sample)):
        if index > 0 and index - 1 < len(outputs):
            sources.add_output(outputs[index - 1])
        if not changes_state(action, pure):
            continue
        args = action.get("args") or {}
        for path, value in _literals(args):
            if sources.gives(value):
                continue
            why = ("neither the opening, the user's facts, the policy nor an earlier call's output gives it (nor "
                   "arithmetic over their numbers)")
            otherwise = held_otherwise(args, data.records_of(args), path, value)
            found.append(_unsupported(sample, index, action, path, value,
                                      why + (f", and the data it refers to holds otherwise: {otherwise}"
                                             if otherwise else "")))
    return found


def _unsupported(sample: Mapping[str, Any], index: int, action: Mapping[str, Any], path: str, value: Any,
                 why: str) -> Finding:
    return Finding.of("gold", "L4", f"{path} = {value!r} in expected action {call_text(index, action)}: {why}; "
                      "an agent cannot know it, or the gold is wrong", sample=str(sample.get("id")),
                      defect="unsupported_value", action=call_text(index, action),
                      evidence=f"{path} = {value!r}: {why}")


def _literals(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """(argument path, value) of every literal that must come from somewhere: numbers and short texts, not free
    text (a reason, a note: the agent's own words) and not booleans."""
    if isinstance(value, Mapping):
        return [leaf for key, item in value.items() if str(key).lower() not in FREE_TEXT_KEYS
                for leaf in _literals(item, f"{path}.{key}" if path else str(key))]
    if isinstance(value, list):
        return [leaf for i, item in enumerate(value) for leaf in _literals(item, f"{path}[{i}]")]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [(path, value)]
    if isinstance(value, str) and value.strip() and len(value) <= 80 and len(value.split()) <= 4:
        return [(path, value)]
    return []


def noop_changes(sample: Mapping[str, Any]) -> list[Finding]:
    """A finding per expected state-changing action that sets a value to itself: an argument ``new_x`` equal to
    its ``x`` (or, for lists, at the same place), as an exchange for the very same item."""
    found = []
    for index, action in enumerate(_actions(sample)):
        args = action.get("args") or {}
        for key, new in args.items():
            old = args.get(key[4:]) if key.startswith("new_") else None
            if old is None:
                continue
            both = isinstance(old, list) and isinstance(new, list)
            pairs = list(zip(old, new, strict=False)) if both else [(old, new)]
            same = [(i, a) for i, (a, b) in enumerate(pairs) if a == b]
            for place, value in same:
                at = f"[{place}]" if isinstance(old, list) else ""
                found.append(Finding.of(
                    "gold", "L4", f"expected action {call_text(index, action)} changes {key[4:]}{at} to itself "
                    f"({value!r}): the gold asks for a change that is none, which the system's rules do not offer "
                    "(an exchange for the very same item); expect another value, or no such action",
                    sample=str(sample.get("id")), defect="noop_change", action=call_text(index, action),
                    evidence=f"{key}{at} = {key[4:]}{at} = {value!r}"))
    return found


def needless_actions(sample: Mapping[str, Any], result: Mapping[str, Any] | None,
                     pure: frozenset[str]) -> list[Finding]:
    """A finding per expected call of a pure tool whose output tells nothing its arguments did not (calculate of
    a lone number): an action the gold requires although it does nothing and teaches nothing."""
    outputs = list((result or {}).get("outputs") or [])
    found = []
    for index, action in enumerate(_actions(sample)):
        if str(action.get("tool")) not in pure or index >= len(outputs) or error_of(outputs[index]) is not None:
            continue
        args = action.get("args") or {}
        said = Sources([json.dumps(args)], numbers_in(args), frozenset())
        told = [v for _, v in walk(outputs[index]) if isinstance(v, str | int | float) and not isinstance(v, bool)]
        if told and all(said.gives(v) for v in told):
            found.append(Finding.of(
                "gold", "L4", f"expected action {call_text(index, action)} calls a tool that changes nothing and "
                "answers only what its arguments said: the gold requires a needless step; remove it",
                sample=str(sample.get("id")), defect="needless_action", action=call_text(index, action),
                evidence=f"output {json.dumps(outputs[index])[:200]}"))
    return found


def contradictions(samples: list[dict[str, Any]], data: DataIndex) -> list[Finding]:
    """A finding per sample that an earlier one matches in situation (rules cited, records named, up to renaming)
    and in what the user asks (most of its words), with the opposite decision (one grants, the other refuses)."""
    earlier: dict[Any, list[tuple[str, str, set[str]]]] = {}
    found = []
    for sample in samples:
        key = situation(sample, data)
        if key is None:
            continue
        sid, side, words = str(sample.get("id")), outcome_side(sample), asked(sample)
        for other, theirs, their_words in earlier.get(key, []):
            similar = len(words & their_words) / max(1, len(words | their_words))
            if theirs != side and similar >= SIMILAR:
                found.append(Finding.of(
                    "gold", "L4", f"the same situation as {other} (the same rules cited, records that differ only "
                    f"in their ids, and the same request in other words) with the opposite decision: {other} "
                    f"{theirs}, this one {side}; one of the two gold answers is wrong, or the policy depends on "
                    "something neither records", sample=sid, defect="contradiction",
                    evidence=f"{other} {theirs}, {sid} {side}; request words in common {similar:.0%}"))
                break
        earlier.setdefault(key, []).append((sid, side, words))
    return found


def gold(ctx: GateContext) -> GateResult:
    folder, layout = Folder(ctx.root), Layout(ctx.root)
    read = folder.read_jsonl(ctx.out_dir / "results.jsonl", RECORD_BYTES * 4)
    if not read.records:
        raise Unavailable("no results.jsonl in the iteration: the evaluation has not run on it")
    results = {str(r.get("id")): r for r in read.records if isinstance(r, dict)}
    data = DataIndex(folder.read_json_or_none(ctx.out_dir / "tools" / "data.json", RECORD_BYTES * 4))
    policy = "\n\n".join(folder.read_text_or(p, "", RECORD_BYTES)
                         for p in folder.glob(layout.design, "*.md", kinds=("file",)))
    pure = pure_tools(ctx.root, ctx.out_dir / "tools")
    findings: list[Finding] = []
    for sample in ctx.samples:
        result = results.get(str(sample.get("id")))
        findings += failing_actions(sample, result, pure) + failed_when_imported(sample, pure)
        findings += unsupported_values(sample, result, policy, data, pure)
        findings += noop_changes(sample) + needless_actions(sample, result, pure)
        ctx.sample_done()
    findings += contradictions(ctx.samples, data)
    return GateResult({}, findings)


register(FunctionGate("gold", gold))

"""Two gates that need no run: every business rule exercised (a refusing rule on both of its sides), and no
sample that repeats another up to renaming of ids and amounts (docs/proving.md).

Both read what Execute wrote (the samples) against what Init wrote (design/business_rules.md): pure functions
of their text, so they are exact, free and run first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from proving.evaluation.quality import Finding

# "- R1: ...", "* **R12.** ...", "1. R3) ...": a rule id opening a list item of business_rules.md.
RULE_LINE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\**`?([A-Z][A-Z0-9]*[-_.]?\d+[a-z]?)`?\**\s*[:.)\u2013\u2014-]",
                       re.MULTILINE)
# Tools that only look (their calls change no state) and tools that record a refusal or an escalation.
LOOKING = re.compile(r"^(get|list|find|search|lookup|look_up|check|read|view|show|fetch|query|describe)_")
# An escalation hands the request on, to a supervisor or a human (tau2-bench's transfer_to_human_agents).
REFUSING = re.compile(r"refus|deny|denied|declin|reject|escalat|transfer_to|human|hand_?off")
REFUSAL = re.compile(r"refus|deny|denied|declin|reject")  # of those, the ones that record a refusal, not an escalation
IDENTIFIER = re.compile(r"^(?=.*\d)[A-Za-z]*[-_]?[A-Za-z0-9-_]*$")  # O1001, C-7, ord_12: names, not words
FREE_TEXT_KEYS = frozenset({"reason", "note", "notes", "message", "comment", "explanation", "summary", "text"})


def rule_ids(business_rules: str) -> list[str]:
    """The rule ids the design defines, in their order (each once)."""
    return list(dict.fromkeys(match.group(1) for match in RULE_LINE.finditer(business_rules)))


def outcome_side(sample: Mapping[str, Any]) -> str:
    """"refuses" when the expected actions change nothing but a refusal or an escalation, else "permits"."""
    tools = [str(action.get("tool", "")) for action in sample.get("actions", []) if isinstance(action, Mapping)]
    acting = [t for t in tools if not LOOKING.match(t)]
    return "refuses" if all(REFUSING.search(t) for t in acting) else "permits"


def coverage(business_rules: str, samples: Iterable[Mapping[str, Any]]) -> tuple[float | None, list[str],
                                                                                   list[Finding]]:
    """The share of the design's rules the samples exercise (a refusing rule on both its sides), the rule ids, and
    a finding per rule no sample exercises, per refusing rule seen on one side only, and per sample citing a rule
    the design lacks."""
    rules = rule_ids(business_rules)
    samples = list(samples)
    sides: dict[str, set[str]] = {}
    findings = []
    for sample in samples:
        side = outcome_side(sample)
        for rule in sample.get("rules") or []:
            sides.setdefault(str(rule), set()).add(side)
            if rules and str(rule) not in rules:
                findings.append(Finding.of("coverage", "L4", f"cites rule {rule}, which design/business_rules.md does "
                                           "not define", sample=str(sample.get("id")), rule=str(rule),
                                           defect="unknown_rule"))
    if not rules:
        findings.append(Finding(gate="coverage", **{"class": "L1"}, defect="unknown_rule", detail=(
            "design/business_rules.md defines no rule ids (list items such as '- R1: ...'), so coverage "
            "cannot be measured; number the rules")))
        return None, rules, findings
    for rule in rules:
        seen = sides.get(rule, set())
        if not seen:
            findings.append(Finding(gate="coverage", rule=rule, **{"class": "L4"}, defect="uncovered_rule", detail=(
                f"no sample exercises rule {rule}; add one whose outcome depends on it")))
        elif seen == {"refuses"}:
            findings.append(Finding(gate="coverage", rule=rule, **{"class": "L4"}, defect="uncovered_rule", detail=(
                f"rule {rule} is only seen refusing; add a sample where it is considered and the request is "
                "granted (its other side), so an agent that always refuses cannot pass it")))
    # A rule seen refusing only is exercised by half: an agent that refuses everything passes all its samples.
    covered = sum(1 for rule in rules if sides.get(rule) and sides[rule] != {"refuses"})
    return round(covered / len(rules), 4), rules, findings


def shape(sample: Mapping[str, Any]) -> tuple[Any, ...]:
    """A sample up to renaming: its rules, and its actions and expected state with every identifier and number
    replaced by the order it first appears in, free text left out."""
    names: dict[Any, str] = {}

    def canon(value: Any, key: str = "") -> Any:
        if key.lower() in FREE_TEXT_KEYS:
            return "<text>"
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float) or (isinstance(value, str) and IDENTIFIER.match(value)):
            kind = "n" if isinstance(value, int | float) else "id"
            return names.setdefault((kind, value), f"<{kind}{len(names)}>")
        if isinstance(value, Mapping):
            return tuple(sorted((str(k), canon(v, str(k))) for k, v in value.items()))
        if isinstance(value, list | tuple):
            return tuple(canon(v) for v in value)
        return value

    actions = tuple((str(a.get("tool")), canon(a.get("args", {}))) for a in sample.get("actions", [])
                    if isinstance(a, Mapping))
    state = tuple(sorted((re.sub(r"[A-Za-z]*\d+[A-Za-z0-9]*", "#", str(path)), canon(value))
                         for path, value in (sample.get("expected_state") or {}).items()))
    # A conversation is another task than the same actions asked for at once: the agent must ask for what the
    # user holds back (docs/conversations.md); which facts it holds back is part of its shape, their values are not.
    user = sample.get("user")
    talk = ("conversation", tuple(sorted(str(n) for n in user.get("withheld") or [])),
            tuple(sorted(str(n) for n in user.get("facts") or {}))) if isinstance(user, Mapping) else ()
    return tuple(sorted(str(r) for r in sample.get("rules") or [])), actions, state, talk, asked_words(sample)


def asked_words(sample: Mapping[str, Any]) -> frozenset[str]:
    """What the user asks, as words (the instruction and the user's goal; ids and numbers left out): a request
    put in other words is another task (benchmarks rephrase on purpose), a renamed one is not."""
    user = sample.get("user")
    goal = str(user.get("goal") or "") if isinstance(user, Mapping) else ""
    text = re.sub(r"[^\w\s]", " ", f"{sample.get('instruction') or ''} {goal}".lower()).replace("_", " ")
    return frozenset(word for word in text.split() if not any(c.isdigit() for c in word))


def duplicates(samples: Iterable[Mapping[str, Any]]) -> list[Finding]:
    """A finding per sample that repeats an earlier one up to renaming of ids and amounts (same rules, same
    actions and arguments, same expected state, the same request in the same words and the same facts held)."""
    first: dict[tuple[Any, ...], str] = {}
    findings = []
    for sample in samples:
        key, sid = shape(sample), str(sample.get("id"))
        if key in first:
            findings.append(Finding(gate="duplicate", sample=sid, **{"class": "L4"}, defect="duplicate",
                                    evidence=f"repeats {first[key]}", detail=(
                f"the same task as {first[key]} up to renaming of ids and amounts (same rules, actions, "
                "arguments, expected state and request): it measures nothing new; change what it tests or remove it")))
        else:
            first[key] = sid
    return findings

"""The one vocabulary every finding is named in (docs/proving.md, "What a finding names").

A gate says *where* it looked; a defect says *what is wrong*, so that a finding can be compared with what the
maintainers of a benchmark fixed. Each defect maps onto one of the categories of the τ³ fix list (tau2-bench's
``web/leaderboard/public/blog/tau3-task-fixes.html``: incorrect action, ambiguity, constraint, fallback,
loophole, data), or onto none when it is about the suite rather than a task (a repeat, a rule no sample tests).

Findings written before the vocabulary (report.json of an older baton) carry no defect; they are read as the
defect their gate always meant (``BY_GATE``), so an old report still shows and still reaches Init named.
"""

from __future__ import annotations

from typing import Literal

Defect = Literal[
    "shortcut",          # a floor agent (nothing, refuse all, reckless) passes: the outcome does not constrain it
    "scorer_gap",        # a trajectory one mistake away passes: the scorer does not check an effect
    "unsolved",          # the blind solver never solves it: a fact is missing or the policy leaves it open
    "ambiguous",         # tries the policy all allows end in different states
    "uncovered_rule",    # a rule no sample exercises, or exercises on one side only
    "unknown_rule",      # a sample cites a rule the design does not define, or the design numbers no rule
    "duplicate",         # the same task as another sample, up to renaming
    "failing_action",    # an expected action the tool answers with an error
    "unsupported_value", # an expected action's literal no source gives, or the data it refers to contradicts
    "noop_change",       # an expected action that changes a value to itself (an exchange for the very same item)
    "needless_action",   # an expected pure call that tells nothing its arguments did not (calculate("164.28"))
    "contradiction",     # two samples with the same rule-relevant facts and different decisions
    "policy_violation",  # an expected action the policy's predicates deny
    "loophole",          # a tool makes an action the policy's predicates deny
]
DEFECTS: tuple[Defect, ...] = Defect.__args__  # type: ignore[attr-defined]

Category = Literal["incorrect action", "ambiguity", "constraint", "fallback", "loophole", "data", "suite"]

# Which category of the fix list a defect falls in; "suite" when it is none of them (it is about the set of
# samples, not one task's gold). Why each: a gold action that errs, breaks a rule, disagrees with its twin or
# does nothing is an incorrect action; a wrong literal (a name, a date of birth, an allowance) is data the gold
# got wrong; a change to the same value asks what the system cannot do (the fix list's constraints); a
# task a blanket agent passes, or whose scorer lets a mistake through, lacks a constraint on the outcome; a
# task no blind solver solves, or that ends several allowed ways, is ambiguous (or lacks the fallback the user
# needs, which the finding's detail says when the user holds too little).
CATEGORY: dict[Defect, Category] = {
    "shortcut": "constraint",
    "scorer_gap": "constraint",
    "unsolved": "ambiguity",
    "ambiguous": "ambiguity",
    "uncovered_rule": "suite",
    "unknown_rule": "suite",
    "duplicate": "suite",
    "failing_action": "incorrect action",
    "unsupported_value": "data",
    "noop_change": "constraint",
    "needless_action": "incorrect action",
    "contradiction": "incorrect action",
    "policy_violation": "incorrect action",
    "loophole": "loophole",
}

# The defect a finding of each gate meant before findings named one (reading an older report.json).
BY_GATE: dict[str, Defect] = {
    "floor": "shortcut",
    "mutation": "scorer_gap",
    "solver": "unsolved",
    "coverage": "uncovered_rule",
    "duplicate": "duplicate",
}


def category(defect: Defect | None) -> Category | None:
    return CATEGORY.get(defect) if defect is not None else None

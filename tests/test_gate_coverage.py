"""The coverage and duplicate gates (issue 31, item 5): pure functions of business_rules.md and the samples."""

from __future__ import annotations

import copy

from proving.evaluation.coverage import coverage, duplicates, outcome_side, rule_ids

RULES = """# Rules
- R1: A refund is allowed within 30 days.
- R2: Final-sale items are never refunded.
* **R3**: Damaged items are always refunded.
1. R4) Refunds above $500 are escalated.

Not a rule: R9 mentioned in prose.
"""


def sample(sid, rules, actions, state=None):
    return {"id": sid, "rules": rules, "instruction": "x", "actions": actions, "expected_state": state or {}}


def act(tool, **args):
    return {"tool": tool, "args": args}


REFUND = [act("get_order", order_id="O1"), act("issue_refund", order_id="O1", amount=89.0, reason="R1 ok")]
SAMPLES = [
    sample("s1", ["R1"], REFUND, {"orders.O1.status": "refunded"}),
    sample("s2", ["R2"], [act("get_order", order_id="O2"), act("refuse", order_id="O2", rule="R2")],
           {"refusals.0.order_id": "O2"}),
    sample("s3", ["R2", "R3"], [act("get_order", order_id="O3"), act("issue_refund", order_id="O3", amount=5,
                                                                       reason="damaged")]),
    sample("s4", ["R4"], [act("get_order", order_id="O4"), act("escalate", order_id="O4", note="big")]),
    sample("s5", ["R1", "R4"], [act("get_order", order_id="O5"), act("issue_refund", order_id="O5", amount=500,
                                                                       reason="at the limit")]),
]


def test_rule_ids_are_the_list_items_that_open_with_one():
    assert rule_ids(RULES) == ["R1", "R2", "R3", "R4"]


def test_a_sample_refuses_when_it_changes_nothing_but_a_refusal_or_an_escalation():
    assert [outcome_side(s) for s in SAMPLES] == ["permits", "refuses", "permits", "refuses", "permits"]
    assert outcome_side(sample("look", ["R1"], [act("get_order", order_id="O1")])) == "refuses"


def test_full_coverage_has_no_finding():
    share, rules, findings = coverage(RULES, SAMPLES)
    assert share == 1.0 and rules == ["R1", "R2", "R3", "R4"] and findings == []


def test_removing_every_sample_of_a_rule_is_a_finding_naming_it():
    share, _, findings = coverage(RULES, [s for s in SAMPLES if "R3" not in s["rules"]])
    assert share == 0.5  # R3 unexercised, and R2 only half: a refusing rule counts when both its sides are seen
    # s3 was also R2's other side: R2 is now seen refusing only
    assert [(f.gate, f.rule, f.class_, "only seen refusing" in f.detail) for f in findings] == [
        ("coverage", "R2", "L4", True), ("coverage", "R3", "L4", False)]


def test_a_refusing_rule_seen_on_one_side_only_is_not_covered():
    """Issue 31: "a refusing rule on both its sides". An agent that always refuses passes every sample of a rule
    seen refusing only, so that rule is a finding and does not count towards the coverage figure."""
    # s3 granted a refund where R2 was considered; s6 keeps R3 exercised without it
    one_sided = [s for s in SAMPLES if s["id"] != "s3"] + [
        sample("s6", ["R3"], [act("get_order", order_id="O6"), act("issue_refund", order_id="O6", amount=5,
                                                                     reason="damaged")])]
    share, _, findings = coverage(RULES, one_sided)
    assert share == 0.75
    assert [(f.rule, "only seen refusing" in f.detail) for f in findings] == [("R2", True)]


def test_a_rule_the_design_lacks_and_a_design_without_ids_are_findings():
    extra = [*SAMPLES, sample("s9", ["R7"], REFUND)]
    _, _, findings = coverage(RULES, extra)
    assert [(f.sample, f.rule) for f in findings] == [("s9", "R7")]
    share, rules, findings = coverage("Refunds within 30 days.\n", SAMPLES)
    assert share is None and rules == [] and findings[0].class_ == "L1"


def test_a_sample_copied_under_a_new_id_is_a_duplicate():
    copied = copy.deepcopy(SAMPLES[0])
    copied["id"] = "s1_copy"
    assert [(f.gate, f.sample, f.class_) for f in duplicates([*SAMPLES, copied])] == [("duplicate", "s1_copy", "L4")]


def test_renamed_ids_and_amounts_are_still_the_same_task():
    renamed = sample("s1b", ["R1"], [act("get_order", order_id="O77"),
                                     act("issue_refund", order_id="O77", amount=12.5, reason="other words")],
                     {"orders.O77.status": "refunded"})
    assert [f.sample for f in duplicates([*SAMPLES, renamed])] == ["s1b"]


def test_the_same_actions_for_another_rule_or_another_shape_are_not_duplicates():
    other_rule = copy.deepcopy(SAMPLES[0]) | {"id": "r5", "rules": ["R5"]}
    same_id_twice = sample("s1c", ["R1"], [act("get_order", order_id="O1"),
                                           act("issue_refund", order_id="O2", amount=89.0, reason="x")],
                           {"orders.O1.status": "refunded"})
    assert duplicates([*SAMPLES, other_rule, same_id_twice]) == []


def test_a_conversation_is_not_the_duplicate_of_the_same_actions_asked_at_once():
    user = {"persona": "p", "goal": "g", "facts": {"order_id": "O1"}, "withheld": ["order_id"], "stop_when": ["done"]}
    talking = copy.deepcopy(SAMPLES[0]) | {"id": "c1", "user": user}
    assert duplicates([*SAMPLES, talking]) == []
    again = copy.deepcopy(talking) | {"id": "c2", "user": {**user, "persona": "another voice"}}
    assert [f.sample for f in duplicates([*SAMPLES, talking, again])] == ["c2"]  # the same conversation twice


def test_the_gates_run_in_turn_and_one_that_cannot_says_why(tmp_path, monkeypatch):
    """prove() on a folder: coverage and duplicates measured, a gate that cannot run here skipped with its reason."""
    import json

    from proving.evaluation import gates
    from proving.evaluation.gates import FunctionGate, ProvingSettings, Unavailable, prove

    def unavailable(ctx):
        raise Unavailable("needs what this machine lacks")

    gates._load_gates()  # the registry as prove() will find it, before this test replaces one gate
    monkeypatch.setitem(gates.GATES, "solver", FunctionGate("solver", unavailable))

    root = tmp_path / "demo"
    (root / "design").mkdir(parents=True)
    (root / "design" / "business_rules.md").write_text(RULES)
    samples = root / "execution_outputs" / "iteration_1" / "samples"
    samples.mkdir(parents=True)
    for s in [*SAMPLES, copy.deepcopy(SAMPLES[0]) | {"id": "s1_copy"}]:
        (samples / f"{s['id']}.json").write_text(json.dumps(s))
    quality = prove(root, 1, ProvingSettings(gates=["coverage", "duplicate", "solver"]))
    assert quality.ran == ["coverage", "duplicate"] and quality.skipped == {"solver": "needs what this machine lacks"}
    assert quality.figures.coverage == 1.0 and quality.figures.duplicates == 1
    assert [f.as_json()["class"] for f in quality.findings] == ["L4"]

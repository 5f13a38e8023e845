"""The example's story against the gates that prove a scenario (issue 31, "Done when"): iteration 1 leaves its
refusals unrecorded (a do-nothing agent passes them: a finding for Init), Init's redesign records every refusal
with its rule, and the final iteration covers every rule on both sides with no duplicate."""

from __future__ import annotations

import json
from pathlib import Path

from agents.simulated import load_part, load_script
from proving.evaluation.coverage import coverage, duplicates, outcome_side
from proving.evaluation.floors import changes_nothing

files = load_part("refund_desk_files")
script = load_script("refund_desk")


def _samples(root: Path, iteration: int) -> list[dict]:
    folder = root / "execution_outputs" / f"iteration_{iteration}" / "samples"
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


def test_the_final_iteration_covers_every_rule_on_both_sides_with_no_duplicate(finished_run):
    rules_md = (finished_run.root / "design" / "business_rules.md").read_text()
    samples = _samples(finished_run.root, 2)
    share, rules, findings = coverage(rules_md, samples)
    assert (share, rules, findings) == (1.0, [f"R{n}" for n in range(1, 9)], [])
    assert duplicates(samples) == []


def test_the_final_iteration_records_every_refusal_with_its_rule(finished_run):
    out = finished_run.root / "execution_outputs" / "iteration_2"
    assert files.REFUSE_RECORDED in (finished_run.root / "design" / "business_rules.md").read_text()
    assert "def record_refusal(" in (out / "tools" / "tools.py").read_text()
    data = json.loads((out / "tools" / "data.json").read_text())
    assert data["refusals"] == [] and data["rules"] == [f"R{n}" for n in range(1, 9)]  # the rule is no free text
    samples = _samples(finished_run.root, 2)
    assert not [s["id"] for s in samples if changes_nothing(s)]  # every right outcome is seen in the final state
    refusing = {s["id"]: s for s in samples if outcome_side(s) == "refuses"}
    assert set(refusing) == {"s02_final_sale_refused", "s04_over_500_escalated", "s06_already_refunded"}
    for sid, rule in [("s02_final_sale_refused", "R2"), ("s06_already_refunded", "R6")]:
        recorded = refusing[sid]["actions"][-1]
        assert recorded["tool"] == "record_refusal" and recorded["args"]["rule"] == rule
        assert refusing[sid]["expected_state"]["refusals.0.rule"] == rule
    report = json.loads((out / "report.json").read_text())
    assert (report["passed"], report["total"]) == (10, 10)


def test_iteration_1_leaves_its_refusals_unrecorded(finished_run):
    out = finished_run.root / "execution_outputs" / "iteration_1"
    assert files.REFUSE_UNRECORDED in files.business_rules(False)
    assert "record_refusal" not in (out / "tools" / "tools.py").read_text()
    nothing = sorted(s["id"] for s in _samples(finished_run.root, 1) if changes_nothing(s))
    assert nothing == ["s02_final_sale_refused", "s06_already_refunded"]  # the floor findings Init gets


def _report_opening(findings: list | None) -> str:
    context = {"iteration": 1, "execution_output_dir": "execution_outputs/iteration_1",
               "layer1_problems_summary": ["s09_damaged_final_sale: R2 and R3 both apply"]}
    if findings is not None:
        context["findings"] = findings
    return f"Iteration: 2\n<execute_to_init_context>{json.dumps(context)}</execute_to_init_context>"


def test_init_answers_the_floor_findings_and_records_refusals_without_them_too():
    floor = [{"gate": "floor", "sample": "s02_final_sale_refused", "rule": None, "class": "L4", "detail": "x"},
             {"gate": "coverage", "sample": None, "rule": "R6", "class": "L4", "detail": "y"}]
    with_findings = script.new_plan("init", 2, _report_opening(floor))
    without = script.new_plan("init", 2, _report_opening(None))
    for state in (with_findings, without):
        assert state["queue"].index("add_precedence") < state["queue"].index("record_refusals")
    said, calls = script.MOVES["record_refusals"](with_findings, "record_refusals")
    assert "s02_final_sale_refused" in said and with_findings["uncovered"] == ["R6"]
    said_alone, calls_alone = script.MOVES["record_refusals"](without, "record_refusals")
    assert "floor" not in said_alone and calls_alone == calls
    assert calls[0][1]["new_string"] == files.REFUSE_RECORDED
    assert any("cite R6" in c for c in script._init_handoff(with_findings)["changes_since_last_iteration"])

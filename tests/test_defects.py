"""Every finding names its defect from one vocabulary mapped onto the τ³ fix list's categories (issue 41, item 1),
and report.json written before the vocabulary still reads."""

from __future__ import annotations

import typing

from proving.evaluation.coverage import coverage, duplicates
from proving.evaluation.defects import BY_GATE, CATEGORY, DEFECTS
from proving.evaluation.quality import GATES, Finding, Quality
from workers.render import figures_line
from workers.targets import figure_summary


def act(tool, **args):
    return {"tool": tool, "args": args}


def test_every_defect_maps_onto_a_category_of_the_fix_list_or_the_suite():
    allowed = {"incorrect action", "ambiguity", "constraint", "fallback", "loophole", "data", "suite"}
    assert set(CATEGORY) == set(DEFECTS)
    assert set(CATEGORY.values()) <= allowed
    assert set(typing.get_args(Finding.model_fields["defect"].annotation)) == set(DEFECTS)


def test_a_finding_of_an_older_report_is_read_with_its_gates_defect():
    for gate, defect in BY_GATE.items():
        old = {"gate": gate, "sample": "s1", "rule": None, "class": "L4", "detail": "as an older baton wrote it"}
        finding = Finding.model_validate(old)
        assert finding.defect == defect and finding.category == CATEGORY[defect]
    quality = Quality.model_validate({"findings": [{"gate": "floor", "class": "L1", "detail": "x"}]})
    assert quality.findings[0].as_json()["defect"] == "shortcut"


def test_a_finding_round_trips_through_report_json_and_its_category_is_derived_not_trusted():
    finding = Finding.of("gold", "L4", "refund fails", sample="s2", defect="failing_action",
                         action="2: refund(order_id='O1')", evidence="Error: payment method should be ...")
    stored = finding.as_json()
    assert stored["category"] == "incorrect action" and stored["action"].startswith("2: refund")
    assert Finding.model_validate({**stored, "category": "data"}).category == "incorrect action"
    assert set(GATES) >= {"gold", "policy"}


def test_coverage_and_duplicate_findings_name_their_defects():
    rules = "- R1: refunds within 30 days\n- R2: final sale never\n"
    samples = [{"id": "s1", "rules": ["R1", "R9"], "actions": [act("issue_refund", order_id="O1")]},
               {"id": "s2", "rules": ["R1"], "actions": [act("issue_refund", order_id="O2")]}]
    _, _, found = coverage(rules, samples)
    assert sorted((f.defect, f.rule) for f in found) == [("uncovered_rule", "R2"), ("unknown_rule", "R9")]
    dup = duplicates([*samples, {**samples[0], "id": "s3"}])
    assert [(f.defect, f.sample, f.evidence) for f in dup] == [("duplicate", "s3", "repeats s1")]


def test_status_counts_the_findings_by_defect():
    quality = Quality.model_validate({"findings": [
        {"gate": "floor", "class": "L1", "detail": "a"}, {"gate": "floor", "class": "L4", "detail": "b"},
        {"gate": "solver", "class": "L1", "detail": "c"}]})
    summary = figure_summary(quality)
    assert summary["defects"] == {"shortcut": 2, "unsolved": 1}
    assert "findings 3 (shortcut 2, unsolved 1)" in figures_line(summary)


def test_inits_opening_carries_each_finding_with_its_defect_action_and_evidence():
    from agents.openings import init_opening
    from agents.payloads import ExecuteToInit
    from tests.test_handoff import execute_data

    finding = Finding.of("gold", "L4", "refund fails", sample="s2", defect="failing_action",
                         action="2: refund(order_id='O1')", evidence="Error: payment method should be ...")
    gates = {"quality": {"figures": {}, "unmet_targets": []}, "findings": [finding.as_json()]}
    text = init_opening("demo", 2, report=ExecuteToInit(**execute_data()), gates=gates)
    for said in ('"defect": "failing_action"', '"category": "incorrect action"',
                 "\"action\": \"2: refund(order_id='O1')\"", '"evidence": "Error: payment method should be ..."',
                 "defect and its category"):
        assert said in text, said


def test_status_names_each_iterations_findings_by_defect(finished_run):
    from tests.export_support import baton as invoke

    shown = invoke(finished_run.root.parent, "status", finished_run.root.name).output
    assert "iteration 1 findings: uncovered_rule 1" in shown, shown  # the suite's quick gates: coverage's R6
    assert "iteration 2 findings" not in shown, shown

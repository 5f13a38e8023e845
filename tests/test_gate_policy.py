"""The policy gate (issue 41, item 3): the example's design states each rule also as a predicate (design/policy.py,
written by the simulated Init); every expected action must be one the predicates allow, and the tools must refuse
what they deny by a rule the tools enforce. Two hand edits of the final iteration, each found by `baton evaluate`
(tests written before the gate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proving.evaluation.gates import GateContext, ProvingSettings
from proving.evaluation.policy_gate import candidates, policy
from proving.evaluation.quality import Quality
from tests.export_support import baton as invoke


def act(tool, **args):
    return {"tool": tool, "args": args}


def test_the_calls_tried_are_other_samples_state_changes_on_this_samples_ids():
    mine = {"id": "a", "actions": [act("get_order", order_id="O6"), act("record_refusal", order_id="O6", rule="R6",
                                                                           note="refunded already")]}
    other = {"id": "b", "actions": [act("get_order", order_id="O1"),
                                    act("issue_refund", order_id="O1", amount=89.0, reason="R1"),
                                    act("issue_store_credit", customer_id="C3", amount=64.0, reason="R7")]}
    tried = candidates(mine, [mine, other], frozenset())
    assert tried == [act("issue_refund", order_id="O6", amount=89.0, reason="R1"),
                     act("issue_store_credit", customer_id="C3", amount=64.0, reason="R7")]


def _copy(finished_run, tmp_path: Path) -> tuple[Path, Path]:
    root = finished_run.copy_to(tmp_path)
    return root, root / "execution_outputs" / "iteration_2"


def _evaluate(tmp_path: Path, root: Path) -> tuple[Quality, str]:
    result = invoke(tmp_path, "evaluate", "refund_desk", "--iteration", "2", BATON_PROVING_GATES="policy")
    assert result.exit_code == 0, result.output
    report = json.loads((root / "execution_outputs/iteration_2/report.json").read_text())
    return Quality.model_validate(report["quality"]), result.output


def test_the_example_carries_predicates_and_meets_them_on_both_iterations(finished_run):
    assert "def decide(data, tool, args)" in (finished_run.root / "design" / "policy.py").read_text()
    for iteration in (1, 2):
        result = policy(GateContext.load(finished_run.root, iteration, ProvingSettings()))
        assert [f.as_json() for f in result.findings] == [], iteration


def test_an_expected_action_that_breaks_a_rule_is_a_policy_violation(finished_run, tmp_path):
    root, out = _copy(finished_run, tmp_path)
    path = out / "samples" / "s02_final_sale_refused.json"
    sample = json.loads(path.read_text())  # a final-sale dress: R2 refuses; now the gold refunds it
    sample["actions"] = [act("get_order", order_id="O1002"),
                         act("issue_refund", order_id="O1002", amount=59.0, reason="customer asked")]
    sample["expected_outputs"] = [None, None]
    sample["expected_state"] = {"orders.O1002.status": "refunded"}
    path.write_text(json.dumps(sample))
    quality, output = _evaluate(tmp_path, root)
    assert quality.ran == ["policy"], quality.skipped
    assert [(f.defect, f.sample, f.rule, f.action) for f in quality.findings] == [
        ("policy_violation", "s02_final_sale_refused", "R2",
         "2: issue_refund(order_id='O1002', amount=59.0, reason='customer asked')")]
    assert "policy_violation" in output


def test_a_tool_that_makes_a_call_the_policy_denies_is_a_loophole(finished_run, tmp_path):
    root, out = _copy(finished_run, tmp_path)
    tools = out / "tools" / "tools.py"
    guard = ('    if order["status"] == "refunded":\n'
             '        return {"error": "already_refunded", "order_id": order_id}\n')
    assert guard in tools.read_text()
    tools.write_text(tools.read_text().replace(guard, ""))  # issue_refund no longer refuses a second refund
    quality, output = _evaluate(tmp_path, root)
    found = [(f.defect, f.sample, f.rule) for f in quality.findings]
    assert ("loophole", "s06_already_refunded", "R6") in found, quality.findings
    assert {d for d, _, _ in found} == {"loophole"}
    assert "loophole" in output


@pytest.mark.parametrize("source, why", [("x = 1\n", "defines no decide"),
                                         ("def decide(data, tool, args):\n    return 1 / 0\n", "ZeroDivisionError")])
def test_a_policy_that_cannot_decide_is_said_so_not_a_finding(finished_run, tmp_path, source, why):
    root, _ = _copy(finished_run, tmp_path)
    (root / "design" / "policy.py").write_text(source)
    quality, _ = _evaluate(tmp_path, root)
    assert quality.findings == [] and why in quality.skipped["policy"]

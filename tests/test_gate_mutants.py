"""The mutation gate (issue 31, item 2): trajectories one mistake away from a sample's expected one, replayed as the
exported task replays and scores them (in baton's harness), must score 0; a survivor is a finding naming what the
scorer does not check."""

from __future__ import annotations

import json

import pytest

from proving.evaluation.exported import RunOutcome
from proving.evaluation.gates import ProvingSettings, prove
from proving.evaluation.mutants import Mutant, mutants_of, refused_by_the_tool


def act(tool, **args):
    return {"tool": tool, "args": args}


SAMPLES = [
    {"id": "a", "actions": [act("get_order", order_id="O1"), act("issue_refund", order_id="O1", amount=89.0,
                                                                 reason="R1: in time")]},
    {"id": "b", "actions": [act("get_order", order_id="O2"), act("escalate", order_id="O2", note="big")]},
]


def test_mutants_drop_add_and_change_state_changing_actions_only_deterministically():
    mutants = mutants_of(SAMPLES[0], SAMPLES, limit=8)
    assert [m.id for m in mutants] == ["a~drop-2", "a~extra", "a~arg-2-order_id", "a~arg-2-amount"]
    drop, extra, order, amount = mutants
    assert drop.actions == [act("get_order", order_id="O1")] and drop.call is None
    assert extra.actions[-1] == act("escalate", order_id="O2", note="big")  # another sample's call
    assert order.actions[1]["args"] == {"order_id": "O2", "amount": 89.0, "reason": "R1: in time"}
    assert amount.actions[1]["args"]["amount"] == 80.1  # off by a tenth; the free-text reason is left alone
    assert "changing amount of action 2 (issue_refund) from 89.0 to 80.1" == amount.mistake
    assert mutants_of(SAMPLES[0], SAMPLES, limit=2) == mutants[:2] == mutants_of(SAMPLES[0], SAMPLES, 2)
    # a sample that only looks has one mutant: an extra state change, which must fail it
    assert [m.id for m in mutants_of({"id": "c", "actions": [act("get_order", order_id="O3")]}, SAMPLES, 8)] == [
        "c~extra"]


def test_a_mistake_the_tool_refused_is_no_survivor():
    mutant = Mutant("a~extra", "a", [], "an extra call", act("escalate", order_id="O2", note="big"))
    refused = RunOutcome(True, "", [{**act("escalate", order_id="O2", note="big"), "output": {"error": "no"}}])
    done = RunOutcome(True, "", [{**act("escalate", order_id="O2", note="big"), "output": {"status": "ok"}}])
    assert refused_by_the_tool(mutant, refused) and not refused_by_the_tool(mutant, done)
    assert refused_by_the_tool(mutant, RunOutcome(True, "", []))  # never made: Inspect rejected its arguments


RECEIPT = '''

def send_receipt(data, order_id):
    """Email the customer a receipt for the order's refund."""
    if order_id not in data["orders"]:
        return {"error": "order_not_found", "order_id": order_id}
    return {"status": "sent", "order_id": order_id}
'''


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_gates")
def test_mutants_of_the_example_and_a_tool_whose_effect_is_not_recorded(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path)
    out = root / "execution_outputs" / "iteration_2"
    # A tool that says it did something and records nothing, used by s01 after its refund.
    with (out / "tools" / "tools.py").open("a") as tools:
        tools.write(RECEIPT)
    path = out / "samples" / "s01_day30_refund.json"
    sample = json.loads(path.read_text())
    sample["actions"].append(act("send_receipt", order_id="O1001"))
    sample["expected_outputs"].append(None)
    path.write_text(json.dumps(sample, indent=2))

    quality = prove(root, 2, ProvingSettings(gates=["mutation"]))
    assert quality.ran == ["mutation"], quality.skipped
    figures = quality.figures
    found = {f.detail.split(" still passes")[0] for f in quality.findings if f.sample == "s01_day30_refund"}
    drop = f"dropping action {len(sample['actions'])} (send_receipt)"
    assert drop in found, quality.findings
    assert all(f.gate == "mutation" and f.class_ == "L4" for f in quality.findings)
    # Every other sample's mutants are killed: only s01's mistakes around send_receipt survive.
    assert {f.sample for f in quality.findings} == {"s01_day30_refund"}
    assert figures.mutants > 10 and figures.mutation_score == round(1 - len(quality.findings) / figures.mutants, 4)
    assert not list((out / "proving_logs").glob("*.eval"))  # baton's harness, not an Inspect eval
    assert (out / "proving_logs" / "mutation_runs.json").is_file()

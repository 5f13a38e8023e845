"""Less noise from the gates (issue 41, item 2's last part): each case a benchmark's maintainers would not call a
defect, and the gates used to report."""

from __future__ import annotations

from proving.evaluation.coverage import outcome_side
from proving.export.runtime.agents import refusal_calls, refusing_tool


def act(tool, **args):
    return {"tool": tool, "args": args}


def test_a_transfer_to_a_human_is_an_escalation_for_refuse_all_and_for_coverage():
    tools = [{"name": "cancel_reservation", "parameters": {"properties": {"reservation_id": {"type": "string"}}}},
             {"name": "transfer_to_human_agents", "parameters": {"properties": {"summary": {"type": "string"}}}}]
    assert refusing_tool(tools)["name"] == "transfer_to_human_agents"
    sample = {"id": "t1", "instruction": "cancel reservation ABC123",
              "actions": [act("get_reservation_details", reservation_id="ABC123"),
                          act("transfer_to_human_agents", summary="the user wants a refund the policy denies")]}
    assert [c["tool"] for c in refusal_calls(tools, [sample], sample)] == ["transfer_to_human_agents"]
    assert outcome_side(sample) == "refuses"


def test_a_request_put_in_other_words_is_not_a_duplicate_but_a_copy_is():
    from proving.evaluation.coverage import duplicates

    actions = [act("get_order", order_id="O1"), act("cancel_order", order_id="O1", reason="no longer needed")]
    first = {"id": "a", "rules": [], "instruction": "Cancel my order O1, I don't need it any more.",
             "actions": actions}
    rephrased = {**first, "id": "b", "instruction": "Hey, so about O1: could you call the whole thing off?"}
    renamed = {**first, "id": "c", "instruction": "Cancel my order O9, I don't need it any more.",
               "actions": [act("get_order", order_id="O9"), act("cancel_order", order_id="O9", reason="x")]}
    assert [(f.sample, f.defect) for f in duplicates([first, rephrased, renamed])] == [("c", "duplicate")]

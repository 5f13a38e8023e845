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


TOOLS = '''
def calculate(data, expression):
    """Evaluate an arithmetic expression."""
    return {"result": str(round(eval(expression, {"__builtins__": {}}), 2))}


def send_receipt(data, order_id):
    if order_id not in data["orders"]:
        return {"error": "order_not_found"}
    return {"status": "sent"}


def transfer_to_human_agents(data, summary):
    return {"result": "Transfer successful"}
'''


def test_a_tool_that_computes_from_its_arguments_alone_is_read_only_for_mutation(tmp_path):
    from proving.evaluation.mutants import mutants_of
    from proving.evaluation.purity import pure_tools

    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "tools.py").write_text(TOOLS)
    pure = pure_tools(tmp_path, tools)
    # send_receipt reads the data (and claims an effect it may not record): not pure; a transfer is the outcome
    assert pure == {"calculate"}
    sample = {"id": "a", "actions": [act("calculate", expression="89 * 0.5"),
                                     act("issue_refund", order_id="O1", amount=44.5, reason="half")]}
    other = {"id": "b", "actions": [act("calculate", expression="2 + 2"), act("escalate", order_id="O2", note="x")]}
    mutants = mutants_of(sample, [sample, other], 8, pure)
    assert [m.id for m in mutants] == ["a~drop-2", "a~extra", "a~arg-2-order_id", "a~arg-2-amount"]
    assert all("calculate" not in m.mistake for m in mutants)


def test_a_mutant_whose_mistaken_call_the_tool_answers_with_an_error_text_is_no_survivor():
    from proving.evaluation.exported import RunOutcome
    from proving.evaluation.mutants import Mutant, refused_by_the_tool

    call = act("cancel_reservation", reservation_id="XYZ")
    mutant = Mutant("a~extra", "a", [call], "an extra call", call)
    said = RunOutcome(True, "", [{**call, "output": {"result": "Error: reservation XYZ already flown"}}])
    done = RunOutcome(True, "", [{**call, "output": {"result": "cancelled"}}])
    assert refused_by_the_tool(mutant, said) and not refused_by_the_tool(mutant, done)

"""The gold gate (issue 41, item 2): an expected action that fails, a literal no source gives or the data
contradicts, two samples with the same facts and opposite decisions. Offline; no generated code runs."""

from __future__ import annotations

import json
from pathlib import Path

from proving.evaluation.errors import error_of, failed_at
from proving.evaluation.gates import GateContext, ProvingSettings, prove
from proving.evaluation.gold import contradictions, failed_when_imported, failing_actions, gold, unsupported_values
from proving.evaluation.sources import DataIndex

DATA = {
    "users": {"mia_1": {"name": {"first_name": "Mia", "last_name": "Garcia"}, "tier": "gold",
                        "payment_methods": {"credit_card_1": {"source": "credit_card"}, "gift_card_2": {}},
                        "saved_passengers": [{"first_name": "Noah", "last_name": "Garcia", "dob": "1990-04-02"}]}},
    "orders": {"#W1": {"user_id": "mia_1", "status": "delivered", "items": [{"item_id": "I1", "price": 30.5},
                                                                            {"item_id": "I2", "price": 12.0}]},
               "#W2": {"user_id": "mia_1", "status": "delivered", "items": [{"item_id": "I3", "price": 30.5},
                                                                            {"item_id": "I4", "price": 12.0}]}},
}


def act(tool, **args):
    return {"tool": tool, "args": args}


def test_an_error_is_an_error_however_the_tool_says_it():
    assert error_of({"error": "already_refunded", "order_id": "O1"}) == "error: already_refunded"
    assert error_of({"result": "Error: payment method should be the original one"}).startswith("Error: payment")
    assert error_of("Error: no such order") == "Error: no such order"
    assert error_of({"status": "refunded", "note": "no error here"}) is None
    assert error_of({"result": "Errors are rare, done"}) is None
    raised = "action 1: tool return_items raised ValueError: Payment method should be original at tools.py:3 in f"
    assert failed_at(raised, 1) == "raised ValueError: Payment method should be original"
    assert failed_at(raised, 0) is None
    assert failed_at("action 1: tool credit raised KeyError: 'store_credit' at tools.py:9 in credit", 1) is None


def test_an_expected_action_answered_with_an_error_is_a_failing_action():
    sample = {"id": "t1", "instruction": "refund order #W1", "actions": [
        act("get_order_details", order_id="#W1"), act("return_items", order_id="#W1", payment_method_id="gift_card_2"),
        act("cancel_order", order_id="#W2")]}
    result = {"id": "t1", "outputs": [{"status": "delivered"}, {"result": "Error: payment method should be the "
                                                                         "original payment method"}]}
    found = failing_actions(sample, result)
    assert [(f.defect, f.action, f.category) for f in found] == [
        ("failing_action", "2: return_items(order_id='#W1', payment_method_id='gift_card_2')", "incorrect action")]
    assert "payment method should be" in found[0].evidence
    raised = {"id": "t1", "outputs": [{"status": "delivered"}],
              "reason": "action 1: tool return_items raised ValueError: not the original payment method"}
    assert [f.action[:1] for f in failing_actions(sample, raised)] == ["2"]
    lookup_fails = {"id": "t1", "outputs": [{"error": "order_not_found"}, {"status": "ok"}, {"status": "ok"}]}
    assert failing_actions(sample, lookup_fails) == []  # a lookup changes nothing: not gold that fails


def test_a_literal_no_source_gives_is_unsupported_and_one_a_source_gives_or_computes_is_not():
    sample = {"id": "t2", "instruction": "I'm mia_1; return everything in order #W1 to my credit card.",
              "actions": [act("get_order_details", order_id="#W1"),
                          act("return_items", order_id="#W1", item_ids=["I1", "I2"], amount=42.5,
                              payment_method_id="credit_card_1", reason="customer asked"),
                          act("give_certificate", user_id="mia_1", amount=50)]}
    result = {"outputs": [DATA["orders"]["#W1"], {"status": "ok"}, {"status": "ok"}]}
    found = unsupported_values(sample, result, "Refund to the original payment method.", DataIndex(DATA))
    # credit_card_1 is nowhere an agent could read it; 42.5 is the items' sum; 50 is no figure of anything
    assert sorted(f.evidence.split(" = ")[0] for f in found) == ["amount", "payment_method_id"]
    assert all(f.defect == "unsupported_value" and f.category == "data" for f in found)


def test_a_value_no_source_gives_names_the_record_the_data_holds_otherwise():
    book = act("book_reservation", user_id="mia_1",
               passengers=[{"first_name": "Noah", "last_name": "Garcia", "dob": "1991-04-02"}])
    sample = {"id": "t3", "instruction": "I'm mia_1, book Noah Garcia (1991-04-02 per my profile) on it.",
              "actions": [act("get_user_details", user_id="mia_1"), book]}
    result = {"outputs": [DATA["users"]["mia_1"], {"status": "ok"}]}
    assert unsupported_values(sample, result, "", DataIndex(DATA)) == []  # the user says it: their word
    sample["instruction"] = "I'm mia_1, book my saved passenger Noah Garcia on it."
    found = unsupported_values(sample, result, "", DataIndex(DATA))
    assert [f.evidence.split(":")[0] for f in found] == ["passengers[0].dob = '1991-04-02'"]
    assert "users.mia_1.saved_passengers[0].dob = '1990-04-02'" in found[0].evidence
    # a value an earlier output gives (another order's address, say) is supported, whatever the record held
    result["outputs"][0] = {**DATA["users"]["mia_1"], "other_order_dob": "1991-04-02"}
    assert unsupported_values(sample, result, "", DataIndex(DATA)) == []


def test_an_expected_action_the_import_left_out_as_failing_is_a_failing_action():
    notes = ("expected action 2 return_delivered_order_items(order_id='#W1', item_ids=['I1'], "
             "payment_method_id='gift_card_2') fails in the domain's own code: Payment method should be the original "
             "payment method; tau2's replay goes on past it; left out (it changed nothing) its reward basis ...")
    lookup = "expected action 0 find_user_id_by_email(email='x@example.com') fails in the domain's own code: User " \
             "not found; tau2's replay goes on past it; left out (it changed nothing) "
    found = failed_when_imported({"id": "task_7", "notes": lookup + notes})
    assert [(f.defect, f.action[:30], f.evidence) for f in found] == [
        ("failing_action", "3: return_delivered_order_item", "Payment method should be the original payment method")]


def test_the_same_facts_and_request_with_opposite_decisions_is_a_contradiction():
    grant = {"id": "a", "rules": ["R1"], "instruction": "Please cancel order #W1, I no longer need it.",
             "actions": [act("get_order", order_id="#W1"), act("cancel_order", order_id="#W1")]}
    refuse = {"id": "b", "rules": ["R1"], "instruction": "Please cancel order #W2, I no longer need it.",
              "actions": [act("get_order", order_id="#W2"), act("transfer_to_human_agents", summary="x")]}
    other_ask = {**refuse, "id": "c", "instruction": "What is the weather on Mars tomorrow afternoon?"}
    found = contradictions([grant, refuse, other_ask], DataIndex(DATA))
    assert [(f.sample, f.defect) for f in found] == [("b", "contradiction")]
    assert "a permits" in found[0].evidence and "b refuses" in found[0].evidence
    assert contradictions([grant, {**refuse, "rules": ["R2"]}], DataIndex(DATA)) == []


def _folder(tmp_path: Path, samples, results, data=DATA) -> Path:
    root = tmp_path / "demo"
    out = root / "execution_outputs" / "iteration_1"
    (out / "samples").mkdir(parents=True)
    (out / "tools").mkdir()
    (root / "design").mkdir()
    (root / "design" / "business_rules.md").write_text("- R1: refunds go to the original payment method\n")
    (out / "tools" / "data.json").write_text(json.dumps(data))
    for s in samples:
        (out / "samples" / f"{s['id']}.json").write_text(json.dumps(s))
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    return root


def test_the_gate_runs_from_the_iterations_files_and_says_so_when_nothing_was_evaluated(tmp_path):
    sample = {"id": "t1", "instruction": "Return order #W1 for mia_1", "rules": ["R1"],
              "actions": [act("return_items", order_id="#W1", payment_method_id="gift_card_2")]}
    root = _folder(tmp_path, [sample], [{"id": "t1", "file": "samples/t1.json", "passed": True, "layer": None,
                                         "reason": "", "duration_s": 0.1, "outputs": [{"error": "bad_method"}]}])
    result = gold(GateContext.load(root, 1, ProvingSettings()))
    assert sorted(f.defect for f in result.findings) == ["failing_action", "unsupported_value"]
    quality = prove(root, 1, ProvingSettings(gates=["gold"]))
    assert quality.ran == ["gold"] and len(quality.findings) == 2
    (root / "execution_outputs" / "iteration_1" / "results.jsonl").unlink()
    quality = prove(root, 1, ProvingSettings(gates=["gold"]))
    assert "results.jsonl" in quality.skipped["gold"]


def test_no_gold_finding_on_either_iteration_of_the_example(finished_run):
    for iteration in (1, 2):
        ctx = GateContext.load(finished_run.root, iteration, ProvingSettings())
        assert [f.as_json() for f in gold(ctx).findings] == [], iteration


def test_an_exchange_for_the_very_same_item_is_a_noop_change():
    from proving.evaluation.gold import noop_changes

    same = {"id": "t18", "actions": [act("exchange_delivered_order_items", order_id="#W2", item_ids=["I7", "I8"],
                                         new_item_ids=["I9", "I8"], payment_method_id="gift_card_2")]}
    found = noop_changes(same)
    assert [(f.defect, f.category, f.evidence) for f in found] == [
        ("noop_change", "constraint", "new_item_ids[1] = item_ids[1] = 'I8'")]
    other = {"id": "t29", "actions": [act("exchange_delivered_order_items", order_id="#W2", item_ids=["I7"],
                                          new_item_ids=["I9"])]}
    assert noop_changes(other) == []


def test_a_pure_call_that_tells_nothing_its_arguments_did_not_is_a_needless_action():
    from proving.evaluation.gold import needless_actions

    sample = {"id": "t59", "actions": [act("get_order", order_id="#W2"), act("calculate", expression="164.28"),
                                       act("calculate", expression="164.28 + 625.6"),
                                       act("cancel_pending_order", order_id="#W2", reason="no longer needed")]}
    result = {"outputs": [{"total": 164.28}, {"result": "164.28"}, {"result": "789.88"}, {"status": "cancelled"}]}
    found = needless_actions(sample, result, frozenset({"calculate"}))
    assert [(f.defect, f.action, f.category) for f in found] == [
        ("needless_action", "2: calculate(expression='164.28')", "incorrect action")]

"""Conversational samples without Inspect (docs/conversations.md): the ``user`` part's schema, the deterministic
scripted user, and the simulator check that tells the user simulator's faults from the agent's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from proving.evaluation.models import Sample
from proving.evaluation.samples import load_samples
from proving.export.runtime.user_check import OUT_OF_PERSONA, needed_facts, simulator_faults
from proving.export.runtime.users import (
    AGENT,
    CLOSING,
    DONT_KNOW,
    STOP,
    USER,
    ScriptedUser,
    Turn,
    UserSpec,
    says_value,
)

OPENING = "Hi, the blender I ordered arrived 30 days ago and I would like my money back."
ACTIONS = [{"tool": "get_order", "args": {"order_id": "O1001"}},
           {"tool": "issue_refund", "args": {"order_id": "O1001", "amount": 89.0, "reason": "R1"}}]


def user_part(**changes: Any) -> dict[str, Any]:
    part = {"persona": "Ana Silva, a polite customer who answers briefly.",
            "goal": "Get your money back for the blender of order O1001.",
            "facts": {"order_id": "O1001", "customer_id": "C1", "email": "ana@example.com"},
            "withheld": ["order_id"], "never_say": ["I work for the shop"],
            "asked_by": {"order_id": ["order number"]}, "stop_when": ["refunded", "refund has been issued"],
            "max_turns": 6}
    return part | changes


def sample(**changes: Any) -> dict[str, Any]:
    return {"id": "c01_refund_needs_the_order", "instruction": OPENING, "actions": ACTIONS,
            "expected_state": {"orders.O1001.status": "refunded"}, "rules": ["R1"], "user": user_part()} | changes


def spec(**changes: Any) -> UserSpec:
    return UserSpec.from_dict(Sample.model_validate(sample(user=user_part(**changes))).user.model_dump())


def error_of(raw: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        Sample.model_validate(raw)
    return str(caught.value)


# ---- the schema ----------------------------------------------------------------------------------------------


def test_a_conversational_sample_is_accepted_and_a_single_instruction_one_is_as_before() -> None:
    parsed = Sample.model_validate(sample())
    assert parsed.user is not None and parsed.user.facts["order_id"] == "O1001" and parsed.user.max_turns == 6
    plain = {k: v for k, v in sample().items() if k != "user"}
    assert Sample.model_validate(plain).user is None
    assert "user" not in Sample.model_validate(plain).model_dump(exclude_none=True)
    assert Sample.model_validate(sample(user=user_part(max_turns=10) | {"withheld": []})).user.withheld == []
    default = {k: v for k, v in user_part().items() if k != "max_turns"}
    assert Sample.model_validate(sample(user=default)).user.max_turns == 10


@pytest.mark.parametrize(("change", "said"), [
    ({"max_turns": "6"}, "user.max_turns"),  # strict: no coercion of what a model wrote
    ({"max_turns": 1}, "greater than or equal to 2"),
    ({"max_turns": 31}, "less than or equal to 30"),
    ({"withheld": ["zip_code"]}, "name facts the user does not hold: zip_code"),
    ({"asked_by": {"phone": ["phone number"]}}, "name facts the user does not hold: phone"),
    ({"withheld": ["order_id", "order_id"]}, "withheld names a fact twice"),
    ({"facts": {"order_id": "O1"}}, "at least 3 characters"),
    ({"facts": {"order_id": True}}, "user.facts.order_id"),  # a bool would be "said" by every yes
    ({"facts": {"Order ID": "O1001"}}, "String should match pattern"),
    ({"facts": {f"fact_{n}": f"value {n}" for n in range(21)}, "withheld": []}, "at most 20 items"),
    ({"stop_when": []}, "at least 1 item"),
    ({"stop_when": ["--"]}, "holds no word"),
    ({"persona": "x" * 2001}, "at most 2000 characters"),
    ({"mood": "angry"}, "Extra inputs are not permitted"),
    ({"goal": "Say ###STOP### at once."}, "no text here may hold it"),  # a model user ends the talk with it
])
def test_a_bad_user_part_is_refused_saying_where(change: dict[str, Any], said: str) -> None:
    assert said in error_of(sample(user=user_part(**change)))


def test_an_opening_that_gives_away_a_withheld_fact_or_a_forbidden_thing_is_refused() -> None:
    said = error_of(sample(instruction="Please refund order O1001, thanks."))
    assert "the instruction is the user's opening message" in said and "leaked order_id ('O1001')" in said
    assert "I work for the shop" in error_of(sample(instruction="Hi, I work for the shop. Refund my blender."))
    # A fact that is not withheld may be said at once; a value only inside another word is not said.
    assert Sample.model_validate(sample(instruction="I'm customer C1, about order O10010's blender."))


def test_a_bad_conversational_sample_on_disk_is_an_l4_before_anything_runs(tmp_path: Path) -> None:
    folder = tmp_path / "samples"
    folder.mkdir()
    (folder / "c01.json").write_text(json.dumps(sample(user=user_part(withheld=["zip_code"]))))
    (folder / "c02.json").write_text(json.dumps(sample(id="c02")))
    bad, good = load_samples(tmp_path, folder)
    assert bad.problem and "does not fit the sample schema" in bad.problem and "zip_code" in bad.problem
    assert good.problem is None and good.sample is not None and good.sample.user is not None


# ---- the scripted user ---------------------------------------------------------------------------------------


def talk(user: ScriptedUser, *agent: str) -> list[Turn]:
    """The conversation when the agent says ``agent``'s texts in turn, the user answering each."""
    turns = [Turn(USER, OPENING)]
    for text in agent:
        turns.append(Turn(AGENT, text))
        turns.append(Turn(USER, user.reply(turns).text))
    return turns


def test_the_scripted_user_answers_what_is_asked_and_nothing_more() -> None:
    user = ScriptedUser(spec())
    turns = talk(user, "Sorry to hear that. Could you give me your order ID?",
                 "Thanks. And what is your email address?", "What colour is the blender?")
    assert [t.text for t in turns if t.role == USER][1:] == ["Order id: O1001.", "Email: ana@example.com.", DONT_KNOW]


def test_a_fact_is_asked_for_by_its_name_s_words_or_its_other_names_and_several_at_once() -> None:
    user = ScriptedUser(spec())
    assert talk(user, "What's the order number?")[-1].text == "Order id: O1001."
    assert talk(user, "I need your customer_id and the order-id.")[-1].text == "Order id: O1001. Customer id: C1."
    assert talk(user, "Which order ids do you mean?")[-1].text == "Order id: O1001."  # a plural asks too
    assert talk(user, "Do you have a reorder id?")[-1].text == DONT_KNOW  # a word inside another is not it


def test_the_scripted_user_stops_when_the_agent_says_the_goal_is_met_and_not_before() -> None:
    user = ScriptedUser(spec())
    turns = talk(user, "Which order is it? Give me the order id.", "Done: your order has been refunded.")
    assert turns[-1].text == CLOSING and STOP in CLOSING
    assert user.reply([*turns[:-1]]).stop
    # Asked for a fact it has not given, it answers first, even where the goal's words appear.
    asked = [Turn(USER, OPENING), Turn(AGENT, "To have it refunded I need your order id.")]
    assert user.reply(asked).text == "Order id: O1001." and not user.reply(asked).stop
    # Asked again for what it gave, it gives it again; named again without a question, it stops at the goal.
    again = talk(user, "Your order id?", "Sorry, which order id was that?")
    assert again[-1].text == "Order id: O1001."
    assert user.reply([*again, Turn(AGENT, "Order id O1001 is refunded.")]).stop


def test_the_scripted_user_never_spoils_a_conversation() -> None:
    user = ScriptedUser(spec())
    turns = talk(user, "Hello! What happened?", "What is your order id?", "What is the order id again?",
                 "It has been refunded.")
    assert simulator_faults(spec(), turns, ACTIONS) == []


# ---- the simulator check -------------------------------------------------------------------------------------


def test_a_user_that_volunteers_a_withheld_fact_is_at_fault_and_one_asked_for_it_is_not() -> None:
    leaky = [Turn(USER, OPENING), Turn(AGENT, "I'm sorry to hear that. Let me see what I can do."),
             Turn(USER, "It's order O1001, by the way."), Turn(AGENT, "It is refunded.")]
    assert simulator_faults(spec(), leaky, ACTIONS) == [
        "leaked order_id ('O1001') in the user's turn 2, before the agent asked for it"]
    asked = [*leaky[:1], Turn(AGENT, "What is your order number?"), *leaky[2:]]
    assert simulator_faults(spec(), asked, ACTIONS) == []
    # A fact that is not withheld may be volunteered.
    assert simulator_faults(spec(), [Turn(USER, OPENING), Turn(AGENT, "Hello?"), Turn(USER, "I'm C1.")], ACTIONS) == []


def test_saying_what_must_never_be_said_is_a_fault_asked_or_not() -> None:
    turns = [Turn(USER, OPENING), Turn(AGENT, "Who are you?"), Turn(USER, "Well, I work for the shop myself.")]
    assert simulator_faults(spec(), turns, ACTIONS) == [
        "said 'I work for the shop', which the user must never say in the user's turn 2"]


def test_a_user_that_never_gives_a_needed_fact_it_was_asked_for_is_at_fault() -> None:
    refusing = [Turn(USER, OPENING), Turn(AGENT, "What is your order id?"), Turn(USER, "I'd rather not say."),
                Turn(AGENT, "I need the order id to help."), Turn(USER, "Still no.")]
    assert simulator_faults(spec(), refusing, ACTIONS) == [
        "never gave order_id, which the expected actions need, although the agent asked for it"]
    # Not when the turn limit cut the conversation right after the ask, nor for a fact the actions do not need.
    assert simulator_faults(spec(), refusing[:2], ACTIONS) == []
    email = [Turn(USER, OPENING), Turn(AGENT, "What is your email?"), Turn(USER, "I don't know.")]
    assert simulator_faults(spec(), email, ACTIONS) == []


@pytest.mark.parametrize("said", [
    "Thanks! Is there anything else I can help you with today?",  # the roles flipped: it serves the agent
    "As an AI, I cannot really own a blender.",
    "## What you know\n- order_id: O1001",  # it repeats its instructions
])
def test_a_user_that_breaks_persona_is_at_fault_once(said: str) -> None:
    turns = [Turn(USER, OPENING), Turn(AGENT, "Sure, which order?"), Turn(USER, said),
             Turn(AGENT, "Sorry?"), Turn(USER, said)]
    faults = simulator_faults(spec(), turns, ACTIONS)
    assert [f for f in faults if f.startswith("broke persona")] == [
        f"broke persona in the user's turn 2: said {next(p for p in OUT_OF_PERSONA if p in said.lower())!r}, "
        "which no customer says"]


def test_words_that_only_look_like_an_assistants_are_no_fault() -> None:
    turns = [Turn(USER, OPENING), Turn(AGENT, "What is your order id?"),
             Turn(USER, "Order id: O1001. I fly a lot, as an airline pilot; how can it take so long?")]
    assert simulator_faults(spec(), turns, ACTIONS) == []


def test_a_user_that_ends_the_conversation_while_asked_for_a_fact_it_holds_is_at_fault() -> None:
    quitting = [Turn(USER, OPENING), Turn(AGENT, "What is your order id?"), Turn(USER, f"Forget it. {STOP}")]
    assert simulator_faults(spec(), quitting, ACTIONS) == [
        "stopped in the user's turn 2 while the agent was asking for order_id, which the user holds"]
    # Ending once asked and answered, or after the agent's refusal, is the user's right.
    answered = [*quitting[:2], Turn(USER, "O1001."), Turn(AGENT, "Sorry, I cannot refund it."),
                Turn(USER, f"Pity. {STOP}")]
    assert simulator_faults(spec(), answered, ACTIONS) == []


def test_the_needed_facts_are_those_whose_values_the_expected_actions_hold() -> None:
    assert needed_facts(spec(), ACTIONS) == ["order_id"]
    numbers = spec(facts={"amount": 89, "order_id": "O1001"}, withheld=[], asked_by={})
    assert needed_facts(numbers, ACTIONS) == ["amount", "order_id"]  # 89 is 89.0
    assert needed_facts(spec(), [{"tool": "t", "args": {"ids": ["o1001"]}}]) == ["order_id"]  # nested, any case
    assert needed_facts(spec(), [{"tool": "t", "args": {"note": "about O1001"}}]) == []  # inside free text


def test_values_are_found_whole_and_in_their_other_forms() -> None:
    assert says_value("that was $89 in all", 89.0) and says_value("O1001.", "O1001")
    assert not says_value("order O10012", "O1001") and not says_value("C10", "C1")
    assert not says_value("89.5 dollars", 89) and not says_value("it was 1.89", 89) and says_value("89.", 89)
    assert says_value("ana@example.com", "ana@example.com") and says_value("order o-1001", "O_1001")

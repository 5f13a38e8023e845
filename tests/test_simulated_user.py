"""The simulated model playing a conversation's user offline (docs/conversations.md, "The simulated model as the
user"): it reads the user part back out of the user simulator's prompt, answers by the scripted user's rules and
labels every turn ``[simulated]``; in-process as ``baton/simulated`` and through ``baton fake-api`` as any
``anthropic/`` model. The runs through Inspect reuse tests/test_conversation_export.py's export (the example with
one hand-written conversational sample) and its helpers. Needs Inspect AI (a core dependency: pip install -e .)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proving.evaluation import simulated_user
from proving.evaluation.blind import LABEL
from proving.export.runtime.users import (
    AGENT,
    CLOSING,
    DONT_KNOW,
    SIMULATOR_OPENING,
    SIMULATOR_PROMPT,
    STOP,
    USER,
    ScriptedUser,
    Turn,
    UserSpec,
)
from tests import test_conversation_export as conversation  # skips this module without Inspect, as it skips itself
from tests.fake_api_support import API_HEADERS, fake_api_process, http, serving, stats
from workers.fake_api.server import FakeApi

# Its fixtures, by name: the example with the hand-written conversation, exported; Inspect's token cache offline.
talking, exported, token_cache = conversation.talking, conversation.exported, conversation.token_cache
CONVERSATION, said, by_id = conversation.CONVERSATION, conversation.said, conversation.by_id

OPENING = "Hi, the blender I ordered arrived 30 days ago and I would like my money back."
PART = {"persona": "Ana Silva, customer C3: polite, answers in a few words.",
        "goal": "Get a refund for the blender of order O1003.",
        "facts": {"order_id": "O1003", "customer_id": "C3", "amount": 89.0, "pin": "0042", "visits": 3},
        "withheld": ["order_id", "pin"], "never_say": ["I work for the shop", "my PIN"],
        "asked_by": {"order_id": ["order number", "which order"], "pin": ['the "secret" code']},
        "stop_when": ["refunded", "refund has been issued"], "max_turns": 6}


def spec(**changes: Any) -> UserSpec:
    return UserSpec.from_dict(PART | changes)


def prompt_of(user: UserSpec, opening: str = OPENING) -> str:
    from proving.export.runtime.conversation import prompt  # what ModelUser sends a model playing the user

    return prompt(user, opening)


# ---- reading the prompt and replying (fast) ---------------------------------------------------------------


def test_the_first_words_it_recognises_are_the_prompt_s_own() -> None:
    first = SIMULATOR_PROMPT.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith(SIMULATOR_OPENING)
    assert simulated_user.recognises(prompt_of(spec()))
    assert simulated_user.recognises([{"type": "text", "text": prompt_of(spec())}])  # Messages API blocks


def test_the_prompt_reads_back_as_the_user_part_it_was_written_from() -> None:
    user = spec()
    text = prompt_of(user)
    assert 'in other words: order_id: "order number", "which order"; pin: "the \\"secret\\" code"' in text
    read = simulated_user.read_prompt(text)
    assert read is not None and read.opening == OPENING
    assert (read.spec.persona, read.spec.goal) == (user.persona, user.goal)
    assert read.spec.facts == user.facts and read.spec.withheld == user.withheld
    assert read.spec.never_say == user.never_say and read.spec.stop_when == user.stop_when
    assert read.spec.asked_by == user.asked_by
    # Numbers are numbers again (89.0 is also said by "$89"); a text of digits stays text ("0042" is not 42).
    assert [type(read.spec.facts[n]) for n in ("amount", "visits", "pin")] == [float, int, str]
    assert read.spec.said("I paid $89 for it") == ["amount"]
    bare = spec(facts={}, withheld=[], never_say=[], asked_by={})
    read = simulated_user.read_prompt(prompt_of(bare))
    assert read is not None and read.spec.facts == {} and read.spec.asked_by == {} and read.spec.withheld == ()
    assert "in other words: (none)" in prompt_of(bare)


def test_it_replies_as_the_scripted_user_labelled_simulated() -> None:
    user = spec()
    system = prompt_of(user)
    exchange = ["which order number?", "Thanks. Anything else I should know?", "Let me check.",
                "Can you confirm the order number?", "Your order O1003 is refunded."]
    turns = [Turn(USER, OPENING)]
    said_so_far: list[tuple[str, str]] = []
    replies = []
    for agent in exchange:
        turns.append(Turn(AGENT, agent))
        said_so_far.append(("user", agent))  # from the user's side: the agent's turns are the other party's
        expected = ScriptedUser(user).reply(turns)
        reply = simulated_user.reply_text(system, said_so_far)
        assert reply == f"{LABEL} {expected.text}"
        replies.append(reply)
        turns.append(Turn(USER, reply))
        said_so_far.append(("assistant", reply))
    assert replies == [f"{LABEL} Order id: O1003.", f"{LABEL} {DONT_KNOW}", f"{LABEL} {DONT_KNOW}",
                       f"{LABEL} Order id: O1003.", f"{LABEL} {CLOSING}"]
    assert replies[-1].endswith(STOP)  # the conversation ends on it


def test_a_persona_holding_dollars_and_braces_is_read_as_text() -> None:
    user = spec(persona="Ana {braces} $goal ${facts} $$ costs $89", goal="Refund {order} for $ 89 ($$)")
    read = simulated_user.read_prompt(prompt_of(user))
    assert read is not None and read.spec.persona == user.persona and read.spec.goal == user.goal
    assert read.spec.facts == user.facts
    assert simulated_user.reply_text(prompt_of(user), [("user", "And the order number?")]) == (
        f"{LABEL} Order id: O1003.")


def test_a_prompt_it_cannot_read_gets_no_answer() -> None:
    system = prompt_of(spec())
    assert simulated_user.reply_text("You are a helpful assistant.", [("user", "which order?")]) is None
    assert simulated_user.read_prompt("You are the agent in the scenario refund_desk.") is None
    garbled = [system.replace("## What you know", "## What you knew"),  # another template
               system.replace("- order_id: O1003\n", "- order_id O1003\n"),  # a fact not written as one
               system.replace('"refunded"; ', "refunded; "),  # stop_when not quoted
               system.replace('"which order"', '"which order'),  # a phrase cut short
               system.replace("order_id, pin", "order_id, pin, the order"),  # withheld that rewrites otherwise
               system[: len(system) // 2]]  # cut in half
    for text in garbled:
        assert simulated_user.recognises(text) and simulated_user.read_prompt(text) is None, text[:200]
        assert simulated_user.anthropic_reply(text, [{"role": "user", "content": "which order?"}]) is None


def test_the_messages_api_answer_plays_the_user_from_blocks_or_strings() -> None:
    system = [{"type": "text", "text": prompt_of(spec())}]
    messages = [{"role": "user", "content": [{"type": "text", "text": "Which order is this about?"}]},
                {"role": "assistant", "content": f"{LABEL} Order id: O1003."},
                {"role": "user", "content": "Done: order O1003 refunded."}]
    assert simulated_user.anthropic_reply(system, messages[:1]) == {
        "content": [{"type": "text", "text": f"{LABEL} Order id: O1003."}], "stop_reason": "end_turn"}
    assert simulated_user.anthropic_reply(system, messages)["content"][0]["text"] == f"{LABEL} {CLOSING}"
    assert simulated_user.anthropic_reply("You are the agent in the scenario x.", messages) is None


def test_the_double_answers_a_user_simulator_request_and_refuses_one_it_cannot_read() -> None:
    body = {"model": "claude-sonnet-5-5", "max_tokens": 512, "system": prompt_of(spec()),
            "messages": [{"role": "user", "content": "Could you give me the order number?"}]}
    with serving(FakeApi()) as running:
        status, answer = http(f"{running.url}/v1/messages", "POST", body, API_HEADERS)
        assert status == 200, answer
        texts = [block for block in answer["content"] if block["type"] != "thinking"]  # the double may add one
        assert texts == [{"type": "text", "text": f"{LABEL} Order id: O1003."}]
        assert answer["stop_reason"] == "end_turn" and answer["model"] == "claude-sonnet-5-5"
        assert answer["usage"]["output_tokens"] > 0
        status, refused = http(f"{running.url}/v1/messages", "POST",
                               body | {"system": body["system"].replace("## What you know", "## Known")}, API_HEADERS)
    assert status == 400 and "the simulated user cannot read this user simulator prompt" in json.dumps(refused)


# ---- through Inspect (slow) -------------------------------------------------------------------------------


def user_turns(sample: Any) -> list[str]:
    """What the user said after its opening, as the transcript shows it."""
    return [text for role, text in said(sample) if role == "user"][1:]


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_ai_conversation")
def test_baton_simulated_plays_the_user_in_process(exported: Path, tmp_path: Path) -> None:
    from inspect_ai.log import resolve_sample_attachments

    import proving.evaluation.blind_model  # noqa: F401  (registers the baton/ provider in this process)
    from proving.export.tryout import eval_export

    log = eval_export(exported, conversation.agent_under_test(), 1, tmp_path / "logs", {"user": "baton/simulated"})
    talk = resolve_sample_attachments(by_id(log)[CONVERSATION["id"]])  # the log keeps long texts apart
    assert user_turns(talk) == [f"{LABEL} Order id: O1001.", f"{LABEL} {CLOSING}"]
    score = talk.scores["baton_scorer"]
    assert score.value == 1.0, score.explanation
    assert score.metadata["simulator_fault"] is None
    assert score.metadata["conversation"] == {"user_simulator": "baton/simulated", "ended": "user",
                                              "user_turns": 3, "agent_turns": 2}
    calls = [e for e in talk.events if e.event == "model" and e.model == "baton/simulated"]
    assert len(calls) == 2 and calls[0].input[0].text.startswith(SIMULATOR_OPENING)


@pytest.fixture
def double(tmp_path: Path) -> Iterator[str]:
    with fake_api_process(tmp_path) as url:
        yield url


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_ai_conversation")
def test_through_the_double_any_anthropic_model_plays_the_user(exported: Path, tmp_path: Path, double: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from proving import startup
    from proving.evaluation.solver import inspect_model
    from proving.export.tryout import eval_export

    monkeypatch.setenv("ANTHROPIC_BASE_URL", double)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    model = "anthropic/claude-sonnet-5-5"
    # The model under test is the same model through the double (the blind solver plays it), unstreamed as the
    # solver gate asks for it; the user's model is the bare string, as `-T user=` gives it.
    with startup.started_with({"ANTHROPIC_BASE_URL": double, "ANTHROPIC_API_KEY": "sk-test"}):  # Inspect's env
        log = eval_export(exported, inspect_model(model), 1, tmp_path / "logs", {"user": model})
    talk = by_id(log)[CONVERSATION["id"]]
    users = user_turns(talk)
    assert users and all(text.startswith(f"{LABEL} ") for text in users), users
    assert users[0] == f"{LABEL} Order id: O1001." and users[-1] == f"{LABEL} {CLOSING}"
    score = talk.scores["baton_scorer"]
    assert score.value == 1.0, score.explanation  # the blind solver asked, was told, refunded and said so
    assert score.metadata["simulator_fault"] is None
    assert score.metadata["conversation"]["user_simulator"] == model
    assert score.metadata["conversation"]["ended"] == "user"
    seen = stats(double)
    assert not seen["errors"] and seen["models"] == {"claude-sonnet-5-5": seen["requests"]["POST /v1/messages"]}

"""The API double's on-demand compaction (workers/fake_api/compaction.py, compaction_block.py), through the
real SDK over HTTP: the request and its errors as the platform docs give them ("Compaction on demand"), the
block sent back, and the thinking in kept turns ("Compaction and preserved thinking")."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from agents.simulated import SUMMARY_ASK, SimulatedModel
from tests.fake_api_support import init_body, queue_fault, sdk_client, serving, stats
from workers.fake_api.compaction import MAX_INSTRUCTIONS
from workers.fake_api.compaction_block import COMPACTION_BETA
from workers.fake_api.server import FakeApi, Running

RESULT = '{"status": "ok", "data": {"written": true}}'
# Baton's kind of instructions: its compact prompt asks for the summary inside <compact_summary>.
ASK = f"Summarize the work so far as JSON inside {SUMMARY_ASK}...</compact_summary>. Do not call tools."
SUMMARIZE = {"type": "summarize", "instructions": ASK}
BOUND_ELSEWHERE = "The block is bound to a different conversation"


@pytest.fixture
def running() -> Iterator[Running]:
    # --play refund_desk: after a compaction the opening that names the scenario is summarised away
    with serving(FakeApi(model=SimulatedModel("refund_desk"))) as running:
        yield running


@pytest.fixture
def client(running: Running) -> anthropic.Anthropic:
    return sdk_client(running.url)


def send(client: anthropic.Anthropic, body: dict[str, Any], betas: tuple[str, ...] = (COMPACTION_BETA,),
         **extra: Any) -> dict[str, Any]:
    reply = client.beta.messages.create(**body, **extra, **({"betas": list(betas)} if betas else {}))
    return reply.model_dump(exclude_none=True)  # what the docs say to send back (no citations: null)


def refused(client: anthropic.Anthropic, body: dict[str, Any], betas: tuple[str, ...] = (COMPACTION_BETA,),
            **extra: Any) -> dict[str, Any]:
    """The error object of a request the double answers with a 400."""
    with pytest.raises(anthropic.BadRequestError) as caught:
        send(client, body, betas, **extra)
    assert isinstance(caught.value.body, dict)
    return caught.value.body["error"]


def followed(body: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """``body`` with ``reply`` appended as returned and its tool calls answered: the next request."""
    results = [{"type": "tool_result", "tool_use_id": b["id"], "content": RESULT}
               for b in reply["content"] if b["type"] == "tool_use"]
    return {**body, "messages": [*body["messages"], {"role": "assistant", "content": reply["content"]},
                                 {"role": "user", "content": results}]}


def conversation(client: anthropic.Anthropic, turns: int) -> list[dict[str, Any]]:
    """The bodies of ``turns`` requests in a row, each the one before with its reply appended; and one more
    (the next request, not sent)."""
    bodies = [init_body()]
    for _ in range(turns):
        bodies.append(followed(bodies[-1], send(client, bodies[-1], betas=())))
    return bodies


def compacted(client: anthropic.Anthropic, body: dict[str, Any], **config: Any) -> dict[str, Any]:
    answer = send(client, body, compaction={**SUMMARIZE, **config})
    assert answer["stop_reason"] == "compaction", answer
    return answer["content"][0]


def after(block: dict[str, Any], body: dict[str, Any], kept_from: int) -> dict[str, Any]:
    """The next request: the block first, as an assistant message of its own, then the kept turns."""
    return {**body, "messages": [{"role": "assistant", "content": [block]}, *body["messages"][kept_from:]]}


def counts(running: Running) -> dict[str, int]:
    return stats(running.url)["compaction"]


# ---- the compaction request ------------------------------------------------------------------------------


def test_a_compaction_answers_one_signed_block_and_bills_the_call_in_iterations(client, running) -> None:
    answer = send(client, init_body(), compaction=SUMMARIZE)
    assert answer["stop_reason"] == "compaction" and answer["role"] == "assistant"
    [block] = answer["content"]
    assert set(block) == {"type", "content", "signature"} and block["type"] == "compaction"
    assert SUMMARY_ASK in block["content"]  # the simulated model followed baton's instructions
    usage = answer["usage"]
    top = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    assert all(usage[key] == 0 for key in top), usage  # "no reply was generated"
    [call] = usage["iterations"]
    assert call["type"] == "compaction" and call["output_tokens"] > 0
    # init_body marks its system prompt for the cache: the summarising call wrote it.
    assert call["cache_creation_input_tokens"] > 0 and call["input_tokens"] > 0
    assert call["cache_creation"]["ephemeral_5m_input_tokens"] == call["cache_creation_input_tokens"]
    assert counts(running)["requests"] == counts(running)["blocks"] == 1
    assert stats(running.url)["by_purpose"]["compaction"]["output"] == call["output_tokens"]


def test_without_instructions_the_doubles_own_prompt_gives_a_plain_text_summary(client) -> None:
    block = compacted(client, init_body(), instructions=None)
    assert block["content"].startswith("[simulated]") and SUMMARY_ASK not in block["content"]
    blank = compacted(client, init_body(), instructions="  \n ")  # "counts as absent"
    assert blank["content"] == block["content"]


@pytest.mark.parametrize("extra, words", [
    ({"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}, "`context_management`"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ({"tool_choice": {"type": "tool", "name": "Read"}}, "tool_choice"),
    ({"stop_sequences": ["END"]}, "stop_sequences"),
    ({"compaction": {"type": "summarize", "instructions": "x" * (MAX_INSTRUCTIONS + 1)}}, "compaction.instructions"),
    ({"compaction": {"type": "summarize", "trigger": 5}}, "compaction.trigger"),
    ({"compaction": {"type": "truncate"}}, "compaction.type"),
])
def test_what_a_compaction_request_may_not_carry_is_a_400_without_an_error_code(client, extra, words) -> None:
    body = {**init_body(), "compaction": SUMMARIZE, **extra}
    error = refused(client, body, (COMPACTION_BETA, "context-management-2025-06-27"))
    assert words in error["message"] and "details" not in error  # parameter errors carry the message only


def test_the_compaction_parameter_needs_its_beta_header(client) -> None:
    error = refused(client, {**init_body(), "compaction": SUMMARIZE}, betas=())
    assert "requires `anthropic-beta: compact-2026-09-04`" in error["message"]


def test_nothing_to_summarize_and_an_open_tool_call_carry_their_codes(client) -> None:
    error = refused(client, {**init_body(), "messages": [], "compaction": SUMMARIZE})
    assert error["details"] == {"error_code": "compaction_nothing_to_summarize"}
    first = init_body()
    reply = send(client, first, betas=())
    open_call = {**first, "messages": [*first["messages"], {"role": "assistant", "content": reply["content"]}],
                 "compaction": SUMMARIZE}
    assert refused(client, open_call)["details"] == {"error_code": "compaction_incomplete_turn"}


def test_a_model_without_on_demand_compaction_is_refused_and_a_fault_can_say_so_too(client, running) -> None:
    error = refused(client, {**init_body(model="claude-sonnet-4-5"), "compaction": SUMMARIZE})
    assert "does not support on-demand compaction" in error["message"]
    queue_fault(running.url, fault="compaction_refused")
    send(client, init_body(), betas=())  # a message request leaves a compaction fault queued
    assert "does not support" in refused(client, {**init_body(), "compaction": SUMMARIZE})["message"]


@pytest.mark.parametrize("stop_reason", ["max_tokens", "tool_use", "refusal", "end_turn"])
def test_a_call_that_gives_no_summary_is_a_200_with_empty_content_still_billed(client, running, stop_reason) -> None:
    queue_fault(running.url, fault="compaction_empty", stop_reason=stop_reason)
    answer = send(client, init_body(), compaction=SUMMARIZE)
    assert answer["content"] == [] and answer["stop_reason"] == stop_reason
    assert answer["usage"]["iterations"][0]["cache_creation_input_tokens"] > 0  # the call ran and is billed
    if stop_reason == "max_tokens":
        assert answer["usage"]["iterations"][0]["output_tokens"] == init_body()["max_tokens"]
    assert counts(running)["empty"] == 1 and counts(running)["blocks"] == 0


def test_a_summary_longer_than_max_tokens_is_cut_and_custom_instructions_can_make_a_tool_call(client) -> None:
    short = send(client, {**init_body(), "max_tokens": 100}, compaction=SUMMARIZE)
    assert short["content"] == [] and short["stop_reason"] == "max_tokens"
    # Instructions that do not ask for baton's summary: the simulated model goes on with its script.
    playing = send(client, init_body(), compaction={"type": "summarize", "instructions": "Carry on."})
    assert playing["content"] == [] and playing["stop_reason"] == "tool_use"


def test_a_model_that_cannot_answer_gives_no_summary_with_end_turn() -> None:
    with serving(FakeApi()) as running:  # no --play: a conversation naming no example cannot be played
        client = sdk_client(running.url)
        body = {**init_body(), "messages": [{"role": "user", "content": "Tell me a story."}]}
        answer = send(client, body, compaction=SUMMARIZE)
    assert answer["content"] == [] and answer["stop_reason"] == "end_turn"
    assert answer["usage"]["iterations"][0]["input_tokens"] > 0


# ---- the block sent back -------------------------------------------------------------------------------------


def test_kept_turns_keep_their_thinking_and_stats_say_so(client, running) -> None:
    bodies = conversation(client, 3)  # bodies[3]: u0 a1 u1 a2 u2 a3 u3
    block = compacted(client, bodies[1])  # "compact exactly the messages of a request you already sent"
    next_body = after(block, bodies[3], kept_from=3)  # kept: a2 u2 a3 u3, two thinking blocks
    reply = send(client, next_body)
    assert counts(running)["thinking_sent"] == counts(running)["thinking_valid"] == 2
    # The thinking produced after the block is bound to it, and valid on the next request too.
    send(client, followed(next_body, reply))
    seen = counts(running)
    assert seen["thinking_sent"] == seen["thinking_valid"] == 5 and seen["thinking_refused"] == 0
    assert seen["blocks_sent_back"] == 2


def test_the_block_may_open_the_first_kept_message_but_a_new_user_wrapper_merges(client) -> None:
    bodies = conversation(client, 2)  # bodies[2]: u0 a1 u1 a2 u2
    block = compacted(client, bodies[1])
    a2, u2 = bodies[2]["messages"][3:]
    opened = {**bodies[2], "messages": [{**a2, "content": [block, *a2["content"]]}, u2]}
    send(client, opened)  # the first kept message is a2, an assistant one after a summarised user one
    # A user message of the block's own follows the summarised user message: the API merges the two, so
    # what follows is no longer what the kept thinking was produced after.
    wrapped = {**bodies[2], "messages": [{"role": "user", "content": [block, {"type": "text", "text": "Go on."}]},
                                         a2, u2]}
    assert BOUND_ELSEWHERE in refused(client, wrapped)["message"]


def test_a_changed_system_prompt_invalidates_the_kept_thinking(client) -> None:
    bodies = conversation(client, 2)
    block = compacted(client, bodies[1])
    changed = after(block, bodies[2], kept_from=3)
    changed["system"] = [{"type": "text", "text": "You are someone else today."}]
    error = refused(client, changed)
    assert error["message"].startswith("messages.1.content.0: Invalid `signature` in `thinking` block.")
    assert BOUND_ELSEWHERE in error["message"]


def test_an_edited_kept_turn_invalidates_the_thinking_after_it(client) -> None:
    bodies = conversation(client, 3)
    block = compacted(client, bodies[1])
    edited = after(block, bodies[3], kept_from=3)  # [block] a2 u2 a3 u3
    edited["messages"][2] = {"role": "user", "content": [
        {**r, "content": '{"status": "ok", "data": {"written": false}}'} for r in edited["messages"][2]["content"]]}
    assert refused(client, edited)["message"].startswith("messages.3.content.0: Invalid `signature`")


def test_a_message_inserted_between_the_block_and_the_kept_turns_invalidates_them(client) -> None:
    bodies = conversation(client, 2)
    block = compacted(client, bodies[1])
    inserted = after(block, bodies[2], kept_from=3)
    inserted["messages"].insert(1, {"role": "user", "content": "One more thing."})
    assert BOUND_ELSEWHERE in refused(client, inserted)["message"]


def test_a_first_kept_message_of_the_last_summarised_ones_role_is_merged_into_it(client) -> None:
    """A prefilled request ends on an assistant message; the reply continues it. Summarise up to the prefill and
    keep the reply: same role, so the API merges the two and the reply's thinking no longer holds."""
    bodies = conversation(client, 1)
    prefilled = {**bodies[1], "messages": [*bodies[1]["messages"],
                                           {"role": "assistant", "content": "Next I read the brief."}]}
    reply = send(client, prefilled, betas=())
    block = compacted(client, prefilled)
    results = [{"type": "tool_result", "tool_use_id": b["id"], "content": RESULT}
               for b in reply["content"] if b["type"] == "tool_use"]
    merged = {**prefilled, "messages": [{"role": "assistant", "content": [block]},
                                        {"role": "assistant", "content": reply["content"]},
                                        {"role": "user", "content": results}]}
    assert BOUND_ELSEWHERE in refused(client, merged)["message"]


def test_a_compaction_on_a_model_without_preserved_thinking_invalidates_kept_thinking(client) -> None:
    bodies = conversation(client, 2)
    block = compacted(client, {**bodies[1], "model": "claude-opus-4-6"})
    assert BOUND_ELSEWHERE in refused(client, after(block, bodies[2], kept_from=3))["message"]


def test_thinking_produced_after_a_block_is_bound_to_that_block(client) -> None:
    bodies = conversation(client, 2)
    first = compacted(client, bodies[1])
    other = compacted(client, bodies[1], instructions=ASK + " Be brief.")  # same messages, another summary
    assert first["signature"] != other["signature"]
    next_body = after(first, bodies[2], kept_from=3)
    reply = send(client, next_body)
    moved = followed(next_body, reply)
    moved["messages"][0] = {"role": "assistant", "content": [other]}
    # The kept a2 still holds under the other block; the thinking produced under the first does not.
    assert refused(client, moved)["message"].startswith("messages.3.content.0: Invalid `signature`")


def test_compacting_again_chains_from_the_old_block(client, running) -> None:
    bodies = conversation(client, 3)
    old = compacted(client, bodies[1])
    with_old = after(old, bodies[3], kept_from=3)  # [old] a2 u2 a3 u3
    reply = send(client, with_old)
    grown = followed(with_old, reply)  # [old] a2 u2 a3 u3 a4 u4
    new = compacted(client, {**grown, "messages": grown["messages"][:3]})  # summarises [old] a2 u2
    send(client, after(new, grown, kept_from=3))  # kept: a3 u3 a4 u4, thinking produced before and after `old`
    assert counts(running)["thinking_refused"] == 0


def test_a_block_with_null_content_is_a_no_op(client) -> None:
    body = init_body()
    body["messages"][0]["content"].insert(0, {"type": "compaction", "content": None})
    reply = send(client, body)
    assert reply["stop_reason"] == "tool_use"


# ---- a block sent back wrong -----------------------------------------------------------------------------


@pytest.fixture
def kept(client) -> tuple[dict[str, Any], dict[str, Any]]:
    """A block and the request that sends it back correctly."""
    bodies = conversation(client, 2)
    block = compacted(client, bodies[1])
    return block, after(block, bodies[2], kept_from=3)


def test_a_block_after_other_content_is_misplaced(client, kept) -> None:
    block, body = kept
    late = {**body, "messages": [{"role": "user", "content": "Hello."}, *body["messages"]]}
    error = refused(client, late)
    assert error["details"] == {"error_code": "compaction_block_misplaced"}
    second = {**body, "messages": [{"role": "assistant", "content": [{"type": "text", "text": "Hi."}, block]},
                                   *body["messages"][1:]]}
    assert refused(client, second)["details"]["error_code"] == "compaction_block_misplaced"


def test_two_blocks_with_content_are_ambiguous(client, kept) -> None:
    block, body = kept
    twice = {**body, "messages": [{"role": "assistant", "content": [block, block]}, *body["messages"][1:]]}
    assert refused(client, twice)["details"] == {"error_code": "compaction_block_ambiguous"}


def test_an_edited_summary_or_signature_is_refused_with_its_code(client, kept) -> None:
    block, body = kept
    edited = {**body, "messages": [{"role": "assistant", "content": [{**block, "content": block["content"] + "!"}]},
                                   *body["messages"][1:]]}
    assert refused(client, edited)["details"] == {"error_code": "compaction_content_mismatch"}
    forged = base64.b64encode(json.dumps({"k": "compaction"}).encode()).decode()
    tampered = {**body, "messages": [{"role": "assistant", "content": [{**block, "signature": forged}]},
                                     *body["messages"][1:]]}
    assert refused(client, tampered)["details"] == {"error_code": "compaction_signature_invalid"}


def test_extra_fields_and_a_missing_beta_header_are_validation_errors(client, kept) -> None:
    block, body = kept
    dumped = {**body, "messages": [{"role": "assistant", "content": [{**block, "citations": None}]},
                                   *body["messages"][1:]]}
    assert refused(client, dumped)["message"] == \
        "messages.0.content.0.compaction.citations: Extra inputs are not permitted"
    error = refused(client, body, betas=())
    assert "'compaction'" in error["message"] and "anthropic-beta" not in error["message"]


def test_count_tokens_counts_the_summary_and_ignores_the_compaction_parameter(client, kept) -> None:
    _, body = kept
    counted = {k: v for k, v in body.items() if k != "max_tokens"}
    with_block = client.beta.messages.count_tokens(**counted, betas=[COMPACTION_BETA]).input_tokens
    ignoring = client.beta.messages.count_tokens(**counted, betas=[COMPACTION_BETA], compaction=SUMMARIZE)
    assert ignoring.input_tokens == with_block > 0

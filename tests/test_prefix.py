"""Thinking blocks sent back only while their prefix holds (context/prefix.py, issue 22).

The Claude 5.5 models sign each thinking block over everything before it; a block sent back after any of
that changed is refused. The engine stamps each block with the prefix it was produced under and the
assembler leaves out every block whose prefix changed since, and keeps those produced after the change.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from context.assembly import Assembler, StaticPrefix
from context.history import History
from context.messages import (
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    user,
)
from context.prefix import LEFT_OUT, PrefixChain, bind_reply, static_digest
from tests.test_assembly import policy

STATIC = StaticPrefix(system="You are Execute.", tools=[{"name": "Bash", "input_schema": {"type": "object"}}])
SECRET = "sk-ant-api03-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2Yz3" * 2


def reply(i: int, thinking: str = "", redacted: bool = False) -> Message:
    blocks = [ThinkingBlock(thinking=thinking, signature=f"sig{i}")]
    if redacted:
        blocks.append(RedactedThinkingBlock(data=f"opaque{i}"))
    blocks += [TextBlock(text=f"step {i}"), ToolUseBlock(id=f"toolu_{i:04d}", name="Bash", input={"i": i})]
    return Message(role="assistant", content=blocks)


def results(i: int, text: str = "line\n" * 200) -> Message:
    return user(ToolResultBlock(tool_use_id=f"toolu_{i:04d}", content=text))


def play(n: int, pol, *, thinking=lambda i: "", redacted=lambda i: False) -> tuple[History, list]:
    """n steps through the assembler, each reply stamped against the request that produced it, as the step
    does; returns the history and each request's chain."""
    history, chains = History(redact=False), []
    history.append(user("build the scenario"))
    asm = Assembler(history, pol, static=STATIC)
    for i in range(1, n + 1):
        assembled = asm.assemble()
        chains.append(assembled.chain)
        stamped, _ = bind_reply(assembled.chain.digest, reply(i, thinking(i), redacted(i)))
        history.append(stamped)
        history.append(results(i))
    return history, chains


def signed_in(messages: list[Message]) -> int:
    return sum(m.signed_blocks for m in messages)


def test_an_append_only_conversation_sends_every_block_back() -> None:
    _, chains = play(12, policy(batch=100), redacted=lambda i: i % 4 == 0)
    for k, chain in enumerate(chains):
        produced_before = k + k // 4  # one thinking block per reply, plus a redacted one every 4th
        assert (chain.sent, chain.left_out) == (produced_before, 0), k


def test_a_compressed_batch_invalidates_the_thinking_after_it_and_not_what_came_later() -> None:
    history, chains = play(9, policy(batch=2, keep_last_steps=3))  # 6 steps in 3 compressed batches
    asm = Assembler(history, policy(batch=2, keep_last_steps=3), static=STATIC)
    assembled = asm.assemble()
    # The first batch's tool results were compressed: the replies after them lost their prefix...
    assert assembled.chain.left_out > 0
    # ...but every reply stamped against the view as it is now is sent back.
    stamped, _ = bind_reply(assembled.chain.digest, reply(10))  # a 10th step: still 3 batches
    history.append(stamped)
    history.append(results(10))
    again = Assembler(history, policy(batch=2, keep_last_steps=3), static=STATIC).assemble()
    assert again.messages[-2].signed_blocks == 1  # the newest reply keeps its thinking
    assert again.chain.sent == assembled.chain.sent + 1


def test_a_changed_system_prompt_invalidates_every_block() -> None:
    history, _ = play(4, policy(batch=100))
    other = StaticPrefix(system="You are Execute. Today is Tuesday.", tools=STATIC.tools)
    assembled = Assembler(history, policy(batch=100), static=other).assemble()
    assert assembled.chain.sent == 0 and assembled.chain.left_out == 4
    assert signed_in(assembled.messages) == 0


def test_a_raised_epoch_leaves_out_every_earlier_block() -> None:
    history, _ = play(4, policy(batch=100))
    later = StaticPrefix(system=STATIC.system, tools=STATIC.tools, thinking_epoch=1)
    assert static_digest(STATIC.system, STATIC.tools, 1) == later.digest != STATIC.digest
    assembled = Assembler(history, policy(batch=100), static=later).assemble()
    assert (assembled.chain.sent, assembled.chain.left_out) == (0, 4)


def test_thinking_with_a_secret_is_left_out_never_rewritten() -> None:
    history, chains = play(6, policy(batch=100), thinking=lambda i: f"the key is {SECRET}" if i == 3 else "")
    assembled = Assembler(history, policy(batch=100), static=STATIC).assemble()
    texts = [b.thinking for m in assembled.messages for b in m.content if isinstance(b, ThinkingBlock)]
    assert all(SECRET not in t and "REDACTED" not in t for t in texts)
    # Reply 3's block is left out of every request from the first on, so the replies after it were produced
    # (and stamped) without it: they stay valid. Only the block with the secret is missing.
    assert (assembled.chain.sent, assembled.chain.left_out) == (5, 1)
    redacted = History([*history.view])  # as a step's history sees the log: redacted, the secret withheld
    again = Assembler(redacted, policy(batch=100), static=STATIC).assemble()
    assert (again.chain.sent, again.chain.left_out) == (5, 1)
    stored = [b for b in redacted.view[5].content if isinstance(b, ThinkingBlock)][0]
    assert stored.withheld and SECRET not in stored.thinking and SECRET not in json.dumps(redacted.view[5].stored)


def test_a_reply_that_was_thinking_only_gets_a_stand_in() -> None:
    chain = PrefixChain("start")
    only = Message(role="assistant", content=[ThinkingBlock(thinking="", signature="s", prefix="elsewhere")])
    out = chain.admit(only)
    assert out.content == [TextBlock(text=LEFT_OUT)] and chain.left_out == 1


def test_the_stored_form_keeps_the_stamp_and_the_request_form_never_sends_it() -> None:
    stamped, _ = bind_reply("abc", reply(1, redacted=True))
    assert all(b.get("prefix") for b in stamped.stored["content"] if b["type"] in ("thinking", "redacted_thinking"))
    assert not any("prefix" in b for b in stamped.api["content"])
    from context.messages import parse_message
    assert parse_message(stamped.stored).content[0].prefix == stamped.content[0].prefix


def test_a_message_sent_after_different_prefixes_links_to_each_of_them() -> None:
    # The digest after a message is remembered on it, by the digest before it (Message.chain_ends).
    message, ends = results(1), []
    for start in ("a" * 32, "b" * 32, "a" * 32):
        chain = PrefixChain(start)
        assert chain.admit(message) is message
        ends.append(chain.digest)
    fresh = PrefixChain("a" * 32)
    fresh.admit(results(1))  # an equal message, never admitted before
    assert ends[0] == ends[2] == fresh.digest != ends[1]


# ---- the rule, against a reference that compares whole prefixes -------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30)), min_size=2, max_size=14))
def test_a_block_is_sent_back_exactly_when_everything_before_it_is_what_it_was_produced_under(ops) -> None:
    """Random conversations where some calls edit an earlier message. Reference: at production, the exact
    list of (role, block) before each block; at each request, a block goes out iff the list of what goes out
    before it is that list."""
    messages: list[Message] = [user("task")]
    produced_under: dict[str, list] = {}

    def items(msgs: list[Message]) -> list:
        return [("message", m.role) if b is None else (m.role, b.digest)
                for m in msgs for b in [None, *m.content]]

    for i, (edit, where) in enumerate(ops, start=1):
        if edit and len(messages) > 1:
            k = where % len(messages)
            if messages[k].role == "user":
                messages[k] = user(f"edited {i}")
        chain = PrefixChain(STATIC.digest)
        sent: list[Message] = []
        for m in messages:
            before = items(sent)
            out = chain.admit(m)
            for block in m.content:
                if isinstance(block, ThinkingBlock):
                    expected = produced_under[block.signature] == before + _within(m, out, block)
                    assert (block in out.content) == expected
            sent.append(out)
        stamped, _ = bind_reply(chain.digest, Message(role="assistant", content=[
            ThinkingBlock(thinking="", signature=f"s{i}"), TextBlock(text=f"r{i}")]))
        produced_under[f"s{i}"] = items(sent) + [("message", "assistant")]
        messages += [stamped, user(f"u{i}")]


def _within(original: Message, out: Message, block) -> list:
    """The items of ``original``'s message before ``block``, as they go out: the message marker and the
    blocks kept before it."""
    kept_before = []
    for b in original.content:
        if b is block:
            break
        if b in out.content:
            kept_before.append((original.role, b.digest))
    return [("message", original.role)] + kept_before

"""Thinking blocks of any size still fit the window (issue 38).

Real signatures and ``redacted_thinking`` blocks come in many sizes: the ``signature`` and ``data`` fields are the
encrypted thinking, opaque, checked when sent back (platform docs, "Thinking encryption"), and a kept block is
billed as input at the thinking tokens it stands for (``ThinkingBlock.billed``), not at those fields' bytes. The
estimate must not bill those bytes, and whatever the blocks cost, the assembled request (after a compaction)
must fit the window: when nothing else is left to trim, thinking is left out of the request (the log keeps it).
"""

from __future__ import annotations

import base64
import hashlib
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context.assembly import Assembler, StaticPrefix
from context.compaction import CircuitBreaker, compact
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
from context.policy import Policy
from context.prefix import bind_reply
from context.protocol import validate
from context.summary_schemas import InitSummary

STATIC = StaticPrefix(system="You are Init. " * 40, tools=[{"name": "Read", "input_schema": {"type": "object"}}])
# Init's limits in the demo profile: the window the runs overflowed.
DEMO = Policy(window=16_000, threshold=11_000, max_tokens=2_048, keep_last_steps=3, start_tokens=2_000)


def opaque(seed: int, chars: int) -> str:
    """``chars`` characters of base64 that look like a signature: random, so they tokenise badly."""
    out, digest = b"", hashlib.sha256(str(seed).encode()).digest()
    while len(out) * 4 < chars * 3 + 4:
        digest = hashlib.sha256(digest).digest()
        out += digest
    return base64.b64encode(out).decode()[:chars]


def reply(i: int, signature: int, data: int, billed: int) -> Message:
    blocks = [ThinkingBlock(thinking="", signature=opaque(i, signature), billed=billed)]
    if data:
        blocks.append(RedactedThinkingBlock(data=opaque(-i, data), billed=billed))
    blocks += [TextBlock(text=f"step {i}: reading the next file"),
               ToolUseBlock(id=f"toolu_{i:04d}", name="Read", input={"path": f"design/part_{i}.md"})]
    return Message(role="assistant", content=blocks)


def result(i: int, lines: int = 60) -> Message:
    return user(ToolResultBlock(tool_use_id=f"toolu_{i:04d}", content=f"part {i} line\n" * lines))


def fits(assembled, policy: Policy) -> bool:
    return assembled.estimated_input + policy.max_tokens <= policy.window


def play(n: int, policy: Policy, *, signature: int, data: int, billed: int) -> list[tuple[int, int, int]]:
    """``n`` steps as the agent takes them: assemble (every request must fit), compact with baton's fallback summary
    (the model unavailable or its deadline passed) when the compactor says so, stamp the reply against the request
    that produced it. Returns (step, estimated input, thinking left out) per request."""
    history = History(redact=False)
    history.append(user("Design the refund desk scenario from brief.md."))
    asm, event, seen = Assembler(history, policy, agent="init", static=STATIC), None, []
    for i in range(1, n + 1):
        assembled = asm.assemble(event)
        if asm.should_compact(assembled, event):
            event = compact(schema=InitSummary, assembler=asm, previous=event, prompt="Summarise.", call=None,
                            breaker=CircuitBreaker())
            assembled = asm.assemble(event)
        validate(assembled.messages)
        assert fits(assembled, policy), (i, assembled.estimated_input, assembled.layers)
        seen.append((i, assembled.estimated_input, assembled.chain.left_out))
        stamped, _ = bind_reply(assembled.chain.digest, reply(i, signature, data, billed))
        history.append(stamped)
        history.append(result(i))
    return seen


def test_the_estimate_bills_what_the_api_bills_not_the_bytes_of_a_signature_or_redacted_data():
    # The API bills a kept block at the thinking it stands for; signature and data are its encrypted form.
    for chars in (200, 5_000, 60_000):
        assert ThinkingBlock(thinking="", signature=opaque(1, chars), billed=119).tokens == 100
        assert RedactedThinkingBlock(data=opaque(2, chars), billed=119).tokens == 100
    # Without a billed count (a log from before billing was kept), the data stands for the thinking it hides.
    assert RedactedThinkingBlock(data=opaque(3, 4_000)).tokens > 0


def test_signatures_six_times_longer_and_redacted_blocks_keep_the_demo_window():
    seen = play(30, DEMO, signature=6 * 1_900, data=6 * 1_900, billed=140)
    assert max(tokens for _, tokens, _ in seen) + DEMO.max_tokens <= DEMO.window


def test_thinking_that_alone_fills_the_window_is_left_out_rather_than_overflowing():
    # Each kept step's thinking billed at 3,000 tokens: three kept steps alone are over the window.
    seen = play(12, DEMO, signature=2_000, data=2_000, billed=3_000)
    assert any(left_out for _, _, left_out in seen)  # the request shrank: the thinking went, the steps stayed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(signature=st.integers(0, 80_000), data=st.integers(0, 80_000), billed=st.integers(0, 6_000),
       lines=st.integers(1, 300))
def test_any_size_of_signature_redacted_data_and_billed_thinking_fits_after_compaction(signature, data, billed, lines):
    history = History(redact=False)
    history.append(user("Design the refund desk scenario from brief.md."))
    asm, event = Assembler(history, DEMO, agent="init", static=STATIC), None
    for i in range(1, 9):
        assembled = asm.assemble(event)
        if asm.should_compact(assembled, event):
            event = compact(schema=InitSummary, assembler=asm, previous=event, prompt="Summarise.", call=None,
                            breaker=CircuitBreaker())
            assembled = asm.assemble(event)
        assert fits(assembled, DEMO), (i, assembled.estimated_input, assembled.layers)
        stamped, _ = bind_reply(assembled.chain.digest, reply(i, signature, data, billed))
        history.append(stamped)
        history.append(result(i, lines))
    assert math.isfinite(assembled.estimated_input)

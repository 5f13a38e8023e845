"""The ``api`` compactor (context.api_compaction): the API's summary block first, the kept turns after it exactly as
they were sent, their thinking still sent back, the pinned opening after them; and every way it falls back to
baton's own summary, with the reason in the event."""

import json

import pytest

from context.api_compaction import CompactionReply, CompactionRequest
from context.assembly import COMPACT_BETA, PINNED_OPENING, Assembler
from context.compaction import CircuitBreaker, KnownFacts, fallback_summary
from context.history import History
from context.messages import CompactionBlock, Message, ThinkingBlock, ToolResultBlock, ToolUseBlock, Usage, user
from context.policy import Policy
from context.prefix import bind_reply
from context.protocol import validate
from context.summary_schemas import ExecuteSummary

BRIEF = "Iteration: 1\nBuild the refund tools; report to execution_outputs/iteration_1."


def policy(**kw) -> Policy:
    return Policy(**{"window": 200_000, "threshold": 150_000, "keep_last_steps": 3, "batch": 1, "start_tokens": 0,
                     "payback_calls": 0, "compactor": "api", **kw})


def thinking_log(asm_policy: Policy, n_steps: int) -> tuple[History, Assembler]:
    """A log whose replies carry thinking stamped as the API would sign it: each after the request that produced it."""
    h = History(redact=False)
    h.append(user(BRIEF))
    asm = Assembler(h, asm_policy, agent="execute")
    for i in range(1, n_steps + 1):
        chain = asm.assemble().chain
        reply = Message(role="assistant", content=[ThinkingBlock(thinking="", signature=f"sig{i}"),
                                                   ToolUseBlock(id=f"toolu_{i:04d}", name="Bash",
                                                                input={"command": f"cat f{i}"})])
        stamped, _ = bind_reply(chain.digest, reply)
        h.append(stamped)
        h.append(user(ToolResultBlock(tool_use_id=f"toolu_{i:04d}", content="line\n" * 40)))
    return h, asm


def summary_text(h: History) -> str:
    summary = fallback_summary(ExecuteSummary, h, len(h.view), KnownFacts(scenario="refund_desk"), "execute", None)
    summary.pop("fallback")
    return f"<compact_summary>{json.dumps(summary)}</compact_summary>"


class FakeApi:
    """Answers a compaction request as the API does, and remembers what it was asked."""

    def __init__(self, content: str | None, stop_reason: str = "compaction", error: Exception | None = None):
        self.content, self.stop_reason, self.error = content, stop_reason, error
        self.asked: list[CompactionRequest] = []

    def __call__(self, request: CompactionRequest, timeout_s: float) -> CompactionReply:
        self.asked.append(request)
        if self.error:
            raise self.error
        block = None if self.content is None else CompactionBlock(content=self.content, signature="signed")
        usage = Usage(input_tokens=0, output_tokens=0,
                      iterations=[{"type": "compaction", "input_tokens": 900, "output_tokens": 120,
                                   "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}])
        return CompactionReply(block=block if self.stop_reason == "compaction" else None,
                               stop_reason=self.stop_reason, usage=usage)


def compact(asm: Assembler, api, previous=None):
    return asm.compactor.compact(asm, previous, schema=ExecuteSummary, prompt="Summarise as <compact_summary>.",
                                 call=None, breaker=CircuitBreaker(), compaction_call=api)


def test_the_kept_turns_follow_the_block_exactly_as_they_were_sent_and_keep_their_thinking():
    h, asm = thinking_log(policy(), 8)
    before = asm.assemble()
    api = FakeApi(summary_text(h))
    event = compact(asm, api)
    assert event.strategy == "api" and event.error is None and event.block["content"] == api.content
    after = asm.assemble(event)
    validate(after.messages)
    assert after.messages[0].role == "assistant" and isinstance(after.messages[0].content[0], CompactionBlock)
    kept = len(h.view) - h.view_index(event.kept_from_seq)
    # The kept turns are the tail of the last request, unchanged (their thinking included) ...
    assert [m.canonical for m in after.messages[1:kept]] == [m.canonical for m in before.messages[-kept:-1]]
    assert after.chain.left_out == 0 and after.chain.sent == 3
    # ... the compaction request was everything before them, ending where they start ...
    asked = api.asked[0]
    assert [m.canonical for m in asked.messages] == [m.canonical for m in before.messages[:-kept]]
    assert asked.messages[-1].role == "user" and after.messages[1].role == "assistant"
    # ... and the task is pinned after them, on the last message, never between the block and them.
    last = after.messages[-1]
    assert last.content[-1].text == PINNED_OPENING.format(text=BRIEF)
    assert after.layers["pinned_opening"] > 0
    assert COMPACT_BETA in after.betas


def test_baton_s_own_summary_leaves_the_kept_thinking_out():
    h, asm = thinking_log(policy(compactor="summary"), 8)
    event = compact(asm, None)
    after = asm.assemble(event)
    assert after.chain.sent == 0 and after.chain.left_out == 3


def test_the_request_sent_with_the_block_carries_the_compaction_field_and_no_context_editing():
    h, asm = thinking_log(policy(), 8)
    api = FakeApi(summary_text(h))
    compact(asm, api)
    body = api.asked[0].to_request(asm.static, model="claude-opus-5-5", max_tokens=4096)
    assert body["compaction"] == {"type": "summarize", "instructions": "Summarise as <compact_summary>."}
    assert "context_management" not in body


def test_a_second_compaction_summarises_the_first_block_and_what_followed():
    h, asm = thinking_log(policy(), 8)
    first = compact(asm, FakeApi(summary_text(h)))
    for i in range(9, 14):
        h.append(Message(role="assistant", content=[ToolUseBlock(id=f"toolu_{i:04d}", name="Bash", input={})]))
        h.append(user(ToolResultBlock(tool_use_id=f"toolu_{i:04d}", content="x")))
    api = FakeApi(summary_text(h))
    second = compact(asm, api, first)
    assert second.strategy == "api" and second.id == 2
    assert isinstance(api.asked[0].messages[0].content[0], CompactionBlock)  # the old block leads what is summarised
    validate(asm.assemble(second).messages)


@pytest.mark.parametrize("api, reason", [
    (None, "no API compaction"),
    (FakeApi(None, stop_reason="max_tokens"), "'max_tokens'"),
    (FakeApi(None, stop_reason="end_turn"), "no block"),
    (FakeApi("a summary in prose, not the schema"), "compact_summary"),
    (FakeApi("<compact_summary>{}</compact_summary> password=hunter2hunter2"), "secret"),
    (FakeApi("x", error=RuntimeError("400 compaction requires anthropic-beta")), "anthropic-beta"),
])
def test_anything_else_falls_back_to_baton_s_own_summary_saying_why(api, reason):
    h, asm = thinking_log(policy(), 8)
    event = compact(asm, api)
    assert event.strategy == "summary" and event.block is None
    assert "not used" in event.error and reason in event.error
    validate(asm.assemble(event).messages)


def test_a_second_compaction_leaves_the_first_pin_on_a_message_it_keeps():
    h, asm = thinking_log(policy(keep_last_steps=4), 8)
    first = compact(asm, FakeApi(summary_text(h)))
    for i in range(9, 11):  # fewer new steps than are kept: the first pin's message is kept again
        reply = Message(role="assistant", content=[ThinkingBlock(thinking="", signature=f"sig{i}"),
                                                   ToolUseBlock(id=f"toolu_{i:04d}", name="Bash", input={})])
        h.append(bind_reply(asm.assemble(first).chain.digest, reply)[0])
        h.append(user(ToolResultBlock(tool_use_id=f"toolu_{i:04d}", content="x")))
    before = asm.assemble(first)
    second = compact(asm, FakeApi(summary_text(h)), first)
    assert second.strategy == "api" and len(second.pins) == 1
    after = asm.assemble(second)
    kept = len(h.view) - h.view_index(second.kept_from_seq)
    assert [m.canonical for m in after.messages[1:kept]] == [m.canonical for m in before.messages[-kept:-1]]
    assert after.chain.left_out == 0
    pinned = [b for m in after.messages for b in m.content if getattr(b, "text", "").startswith("[baton] This round")]
    # The second compaction's own pin would repeat the same opening after the block: the first one's is kept
    # and stands for it (issue 38: a pin per compaction grew the context past the window).
    assert len(pinned) == 1

"""The summary request reads the prompt cache the steps wrote: its breakpoints sit where the last step request had
them, 4 at most with the system prompt's (docs/context.md, "Compaction")."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context.assembly import Assembler, StaticPrefix
from context.compaction import CircuitBreaker, SummaryReply, SummaryRequest, compact, summary_request
from context.history import History
from context.policy import Policy
from context.protocol import validate
from context.summary_schemas import ExecuteSummary
from tests.logs import messy_log
from tests.test_assembly import run_log, step
from tests.test_compaction import EXECUTE, tagged

STATIC = StaticPrefix(system="You are the Execute agent.", tools=[{"name": "Read", "input_schema": {}}])


def policy(**kw) -> Policy:
    return Policy(**{"window": 200_000, "threshold": 150_000, "keep_last_steps": 3, "batch": 5, "start_tokens": 0,
                     "payback_calls": 0, **kw})


def body(request) -> dict:
    return request.to_request(STATIC, model="m", max_tokens=100)


def marked(request_body: dict) -> list[int]:
    """Indices of the messages that carry a cache breakpoint."""
    return [i for i, m in enumerate(request_body["messages"]) if any("cache_control" in b for b in m["content"])]


def plain(messages: list[dict]) -> list[dict]:
    """Messages without their cache markers: what the cache compares (where a marker sits is not content)."""
    return [{"role": m["role"], "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]}
            for m in messages]


def markers(request_body: dict) -> int:
    return json.dumps(request_body).count('"cache_control"')


def last_step_then_summary(n_steps: int) -> tuple[dict, SummaryRequest]:
    """The body of the last step request sent, and the summary request after one more step."""
    h = run_log(n_steps)
    asm = Assembler(h, policy(), agent="execute", static=STATIC)
    sent = body(asm.assemble())
    for m in step(n_steps + 1):
        h.append(m)
    return sent, summary_request(asm.assemble(), "Summarise.")


def test_summary_breakpoints_sit_where_the_last_step_request_had_them():
    sent, request = last_step_then_summary(13)  # 13 -> 14 steps: no batch leaves the verbatim window
    summary = body(request)
    assert marked(summary) == marked(sent)[:3] and len(marked(summary)) == 3
    for i in marked(summary):  # every breakpoint closes a prefix the step request cached, byte for byte
        assert i in marked(sent) and plain(summary["messages"][: i + 1]) == plain(sent["messages"][: i + 1])
    assert summary["system"] == sent["system"] and summary["tools"] == sent["tools"]
    assert markers(summary) == 4  # the system prompt's and three on messages


def test_after_a_batch_moved_the_previous_batch_end_is_still_read():
    sent, request = last_step_then_summary(12)  # 12 -> 13 steps: a batch of 5 leaves the verbatim window
    summary = body(request)
    first = marked(summary)[0]  # the previous batch end: the step request's stable end
    assert first in marked(sent) and plain(summary["messages"][: first + 1]) == plain(sent["messages"][: first + 1])
    assert markers(summary) <= 4


def test_the_compact_prompt_is_the_last_block_and_carries_no_breakpoint():
    _, request = last_step_then_summary(13)
    last = body(request)["messages"][-1]
    assert last["content"][-1] == {"type": "text", "text": "Summarise."} and last["role"] == "user"
    assert last["content"][:-1] == [b.model_dump(exclude_none=True) for b in request.context[-1].content]


def test_a_summary_request_is_the_sequence_of_its_messages():
    _, request = last_step_then_summary(4)
    validate(request)
    assert len(request) == len(request.context) and request[-1].text.endswith("Summarise.")
    # a caller that sends [m.api for m in request] sends these messages, without the breakpoints
    assert list(request) == request.messages and markers({"messages": [m.api for m in request]}) == 0


def test_a_retry_keeps_the_breakpoints_and_appends_the_exchange():
    h = run_log(8)
    asm = Assembler(h, policy(), agent="execute", static=STATIC)
    seen: list[SummaryRequest] = []

    def call(request: SummaryRequest, timeout: float) -> SummaryReply:
        seen.append(request)
        return SummaryReply(text="oops" if len(seen) == 1 else tagged(EXECUTE))

    compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="P", call=call, breaker=CircuitBreaker())
    first, retry = seen
    assert retry.breakpoints == first.breakpoints and retry.context == first.context
    assert [m.role for m in retry[-2:]] == ["assistant", "user"] and "not usable" in retry[-1].text
    assert marked(body(retry)) == marked(body(first)) and markers(body(retry)) <= 4
    validate(retry)


def test_without_a_system_prompt_the_tools_carry_the_static_breakpoint():
    h = run_log(13)
    static = StaticPrefix(tools=[{"name": "Read"}])
    request = summary_request(Assembler(h, policy(), static=static).assemble(), "P")
    out = request.to_request(static, model="m", max_tokens=10)
    assert "system" not in out and out["tools"][-1]["cache_control"] and markers(out) <= 4


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=messy_log(), keep=st.integers(1, 5), batch=st.integers(1, 5), cuts=st.lists(st.integers(0, 40), max_size=2))
def test_property_summary_requests_are_valid_with_at_most_four_breakpoints(log, keep, batch, cuts):
    h = History(redact=False)
    asm = Assembler(h, policy(keep_last_steps=keep, batch=batch), agent="execute", static=STATIC)
    event = None
    for k, msg in enumerate(log):
        h.append(msg)
        if h.pending_tool_ids or not h.view or h.view[-1].role != "user":
            continue
        assembled = asm.assemble(event)
        request = summary_request(assembled, "Summarise.")
        validate(request)
        out = body(request)
        assert markers(out) <= 4 and all(i < len(assembled.messages) - 1 for i in request.breakpoints)
        assert set(request.breakpoints) >= set(assembled.breakpoints[:-1])  # the step's own prefix marks are kept
        for i in marked(out):  # a marked message is the step's, unchanged but for the marker
            assert plain(out["messages"][i : i + 1]) == [assembled.messages[i].api]
        if k in cuts:
            event = compact(schema=ExecuteSummary, assembler=asm, previous=event, prompt="Summarise.", call=None,
                            breaker=CircuitBreaker())

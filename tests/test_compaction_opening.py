"""The task survives compaction: the latest opening is pinned after the summary, capped, byte-stable
(docs/context.md, "Compaction")."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context.assembly import BRIDGE, PINNED_OPENING, Assembler
from context.compaction import CircuitBreaker, compact
from context.compaction_event import CompactionEvent
from context.history import History
from context.messages import Message, ToolResultBlock, ToolUseBlock, assistant, user
from context.policy import Policy
from context.protocol import validate
from context.summary_schemas import ExecuteSummary
from tests.logs import messy_log
from tests.test_assembly import step
from tests.test_compaction_positions import as_written_before

BRIEF = "Iteration: 1\nBuild the refund tools; sample ids s01-s12; report to execution_outputs/iteration_1."


def policy(**kw) -> Policy:
    return Policy(**{"window": 200_000, "threshold": 150_000, "keep_last_steps": 3, "batch": 1, "start_tokens": 0,
                     "payback_calls": 0, **kw})


def log_of(opening: str, n_steps: int, first: int = 1) -> History:
    h = History(redact=False)
    h.append(user(opening))
    add_steps(h, n_steps, first)
    return h


def add_steps(h: History, n: int, first: int) -> None:
    for i in range(first, first + n):
        for m in step(i, "line\n" * 50):
            h.append(m)


def summarise(asm: Assembler, previous: CompactionEvent | None = None) -> CompactionEvent:
    return compact(schema=ExecuteSummary, assembler=asm, previous=previous, prompt="Summarise.", call=None,
                   breaker=CircuitBreaker())


def reopening(asm: Assembler, event: CompactionEvent) -> Message:
    """The user message right after the summary."""
    messages = asm.assemble(event).messages
    validate(messages)
    return messages[2]


def test_the_opening_is_pinned_between_the_summary_and_the_kept_steps():
    h = log_of(BRIEF, 10)
    asm = Assembler(h, policy(), agent="execute")
    a = asm.assemble(summarise(asm))
    assert [m.role for m in a.messages[:4]] == ["user", "assistant", "user", "assistant"]
    assert [b.text for b in a.messages[2].content] == [PINNED_OPENING.format(text=BRIEF), BRIDGE]
    assert a.layers["pinned_opening"] == a.messages[2].content[0].tokens > 0


def test_the_pin_is_byte_identical_on_every_later_step():
    h = log_of(BRIEF, 10)
    asm = Assembler(h, policy(), agent="execute")
    event = summarise(asm)
    first = [m.canonical for m in asm.assemble(event).messages[:3]]
    for i in range(11, 20):
        add_steps(h, 1, i)
        fresh = Assembler(h, policy(), agent="execute")  # nothing memoised: as the next step's process
        assert [m.canonical for m in fresh.assemble(event).messages[:3]] == first
        assert [m.canonical for m in asm.assemble(event).messages[:3]] == first


def test_a_second_compaction_in_the_same_round_pins_the_same_opening():
    h = log_of(BRIEF, 10)
    asm = Assembler(h, policy(), agent="execute")
    first = summarise(asm)
    add_steps(h, 8, 11)
    second = summarise(asm, previous=first)
    assert second.in_view(h).kept_from > first.in_view(h).kept_from
    assert reopening(asm, second).content[0].text == PINNED_OPENING.format(text=BRIEF)
    # the summary request of the second compaction showed the opening too (the pin of the first)
    assert reopening(asm, first).content[0].text == PINNED_OPENING.format(text=BRIEF)


def test_an_opening_merged_after_a_handoff_result_is_pinned_without_the_result():
    # A turn ends with a tool call (SubmitHandoff); the next opening follows its result: one view message.
    h = log_of(BRIEF, 3)
    h.append(assistant(ToolUseBlock(id="toolu_handoff", name="SubmitHandoff", input={})))
    h.append(user(ToolResultBlock(tool_use_id="toolu_handoff", content='{"status": "ok"}')))
    feedback = "Iteration: 2\nA human rejected the design: R2 and R3 need a precedence."
    h.append(user(feedback))
    add_steps(h, 8, 10)
    asm = Assembler(h, policy(), agent="init")
    assert reopening(asm, summarise(asm)).content[0].text == PINNED_OPENING.format(text=feedback)


def test_baton_notes_are_not_openings():
    h = log_of(BRIEF, 3)
    h.append(assistant("I think I am done."))
    h.append(user("[baton] Your reply had no tool call, but a turn only ends with SubmitHandoff."))
    add_steps(h, 8, 10)
    asm = Assembler(h, policy(), agent="execute")
    assert reopening(asm, summarise(asm)).content[0].text == PINNED_OPENING.format(text=BRIEF)


def test_a_huge_opening_is_cut_with_a_reference_to_its_log_records():
    huge = "Iteration: 1\n" + "payload line with facts 12345\n" * 2_000 + "then call SubmitHandoff"
    h = History(redact=False)
    h.append(user("first part"))
    h.append(user(huge))  # merged with the first: one view message made of log records 1 and 2
    add_steps(h, 10, 1)
    asm = Assembler(h, policy(opening_cap_chars=4_000), agent="execute")
    text = reopening(asm, summarise(asm)).content[0].text
    assert len(text) < 4_000 + 300 and text.count("\n") > 10
    assert "first part" in text and "then call SubmitHandoff" in text  # head and tail
    assert "the whole message is log records 1-2 (lines 1-2 of state/execute/log.jsonl)" in text


def test_a_cap_of_zero_pins_nothing():
    h = log_of(BRIEF, 10)
    asm = Assembler(h, policy(opening_cap_chars=0), agent="execute")
    pinned = reopening(asm, summarise(asm))
    assert [b.text for b in pinned.content] == [BRIDGE]


def test_kept_steps_that_start_at_the_opening_need_no_pin():
    h = log_of(BRIEF, 2)
    h.append(assistant("done"))
    h.append(user("Iteration: 2\nnext task"))
    add_steps(h, 3, 10)
    asm = Assembler(h, policy(keep_last_steps=3), agent="execute")
    event = summarise(asm)
    a = asm.assemble(event)
    validate(a.messages)
    assert a.messages[2].text == "Iteration: 2\nnext task" and a.layers["pinned_opening"] == 0


def test_an_old_event_assembles_with_the_pin_too():
    h = log_of(BRIEF, 10)
    event = summarise(Assembler(h, policy(), agent="execute"))
    old = as_written_before(event, h)  # view indices, as events were written before log positions
    assert old.kept_from_seq is None
    pinned = reopening(Assembler(h, policy(), agent="execute"), old)
    assert pinned.content[0].text == PINNED_OPENING.format(text=BRIEF)


def test_a_new_opening_after_the_compaction_keeps_the_pin_and_follows_it():
    h = log_of(BRIEF, 10)
    asm = Assembler(h, policy(), agent="execute")
    event = summarise(asm)
    before = asm.assemble(event).messages[2].canonical
    h.append(assistant("round done"))
    h.append(user("Iteration: 2\nthe next task"))
    add_steps(h, 2, 30)
    a = asm.assemble(event)
    validate(a.messages)
    assert a.messages[2].canonical == before  # the cached prefix holds across the new round
    assert any(m.text == "Iteration: 2\nthe next task" for m in a.messages[3:])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=messy_log(), keep=st.integers(1, 4), cuts=st.lists(st.integers(0, 40), max_size=3))
def test_property_the_pin_is_stable_while_its_event_is_the_latest(log, keep, cuts):
    h = History(redact=False)
    asm = Assembler(h, policy(keep_last_steps=keep, opening_cap_chars=50), agent="execute")
    event, head = None, None
    for k, msg in enumerate(log):
        h.append(msg)
        if h.pending_tool_ids or not h.view or h.view[-1].role != "user":
            continue
        if k in cuts:
            event, head = summarise(asm, previous=event), None
        if event is None:
            continue
        a = asm.assemble(event)
        validate(a.messages)
        pinned = a.messages[2] if a.messages[2].content[-1].text == BRIDGE else None
        if pinned is not None:
            assert len(pinned.content) <= 2 and all(b.text.startswith("[baton]") for b in pinned.content)
        key = pinned.canonical if pinned else None
        head = key if head is None else head
        assert key == head  # the same bytes on every call until the next compaction


def test_a_reply_without_a_tool_call_and_baton_s_nudge_do_not_open_a_round_so_the_opening_stays_pinned():
    """Found by the example through the double with all five gates: Init answered one step without a tool call,
    baton's note asked it to go on, and the next compaction kept from that note as if it opened a round. The
    request then held no opening at all (the simulated model, which goes by the opening's "Scenario:" line,
    refused it). A note of baton's alone is no new task: the kept steps start after it, and the opening is
    pinned."""
    h = log_of(BRIEF, 3)
    h.append(assistant("I have read everything I need."))  # no tool call, and the turn has not ended
    h.append(user("[baton] Your reply had no tool call, but a turn only ends with SubmitHandoff. Continue."))
    add_steps(h, 3, 4)
    asm = Assembler(h, policy(keep_last_steps=3), agent="execute")
    validate(asm.assemble().messages)
    assert reopening(asm, summarise(asm)).content[0].text == PINNED_OPENING.format(text=BRIEF)

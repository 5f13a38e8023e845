"""Compaction events name log positions; History translates them to view indices; older events still load."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from context.assembly import Assembler, kept_from
from context.compaction import CircuitBreaker, compact
from context.compaction_event import CompactionEvent, ViewSpan
from context.history import History
from context.messages import Message, TextBlock, ToolUseBlock, assistant, user
from context.policy import Policy
from context.summary_schemas import ExecuteSummary
from tests.logs import messy_log
from tests.test_assembly import run_log, step

_SEQ = ("covered_from_seq", "kept_from_seq", "kept_until_seq")


def policy(**kw) -> Policy:
    base = {"window": 200_000, "threshold": 150_000, "keep_last_steps": 3, "batch": 2, "start_tokens": 0,
            "payback_calls": 0, "kept_cap_chars": 300}
    return Policy(**{**base, **kw})


def as_written_before(event: CompactionEvent, history: History) -> CompactionEvent:
    """The same event as it was written before events named log positions: view indices."""
    span = event.in_view(history)
    data = {k: v for k, v in event.model_dump(mode="json").items() if k not in _SEQ}
    data.update(covered_from=span.covered_from, kept_from=span.kept_from, kept_until=span.kept_until)
    return CompactionEvent.model_validate(data)


def request_bytes(history: History, pol: Policy, event: CompactionEvent | None) -> str:
    assembler = Assembler(history, pol, agent="execute")  # a fresh one: nothing memoised from another event
    body = assembler.assemble(event).to_request(assembler.static, model="m", max_tokens=100)
    return json.dumps(body, ensure_ascii=False)


def summarise(history: History, pol: Policy, previous: CompactionEvent | None = None) -> CompactionEvent:
    assembler = Assembler(history, pol, agent="execute")
    return compact(schema=ExecuteSummary, assembler=assembler, previous=previous, prompt="Summarise.", call=None,
                   breaker=CircuitBreaker())


def test_event_names_log_messages_not_view_indices():
    h = History(redact=False)
    h.append(user("task"))
    h.append(user("and also this"))  # merged into the first view message: log and view numbers part here
    for i in range(1, 9):
        for m in step(i, "x" * 500):
            h.append(m)
    ev = summarise(h, policy())
    first_kept = h.steps_in(0)[-3]
    assert ev.kept_from_seq == first_kept + 2 and ev.kept_until_seq == h.raw_count == 18
    assert h.view_index(2) == 0  # the merged message is where it was merged into
    assert ev.in_view(h) == ViewSpan(0, first_kept, len(h))
    written = json.loads(ev.model_dump_json())
    assert {"covered_from_seq", "kept_from_seq", "kept_until_seq"} <= written.keys()
    assert not {"covered_from", "kept_from", "kept_until"} & written.keys()
    assert CompactionEvent.model_validate(written) == ev


def test_old_and_new_event_shapes_assemble_the_same_request():
    h = run_log(12, result="line of output\n" * 60)
    pol = policy()
    first = summarise(h, pol)
    for i in range(13, 20):  # the agent goes on; the kept steps' results now fall under the kept cap
        for m in step(i, "more output\n" * 80):
            h.append(m)
    h.append(assistant("done"))
    h.append(user("next task"))
    second = summarise(h, pol, previous=first)
    for event in (first, second):
        old = as_written_before(event, h)
        assert old.kept_from_seq is None and old.in_view(h) == event.in_view(h)
        assert request_bytes(h, pol, old) == request_bytes(h, pol, event)
    assert request_bytes(h, pol, first) != request_bytes(h, pol, second)


def test_an_old_event_loads_as_written_and_is_written_back_the_same():
    h = run_log(8)
    written = {"kind": "compaction", "id": 1, "covered_from": 0, "kept_from": 9, "kept_until": 17,
               "prompt": "P", "summary": {"key_paths": {}}, "at": "2026-11-01T00:00:00+00:00"}
    old = CompactionEvent.model_validate(written)
    assert old.in_view(h) == ViewSpan(0, 9, 17)
    again = json.loads(old.model_dump_json())
    assert {k: again[k] for k in written} == written and not set(_SEQ) & again.keys()


def test_an_event_without_positions_is_refused():
    with pytest.raises(ValidationError, match="kept_from_seq and kept_until_seq"):
        CompactionEvent(id=1, prompt="P", summary={})


def test_history_rejects_positions_outside_its_log():
    h = run_log(2)
    with pytest.raises(ValueError, match="log message 99 is not in this history of 5 messages"):
        h.view_index(99)
    with pytest.raises(ValueError, match="no log message starts at view index 40"):
        h.seq_at(40)


def test_a_leading_assistant_message_and_its_repair_line_are_one_log_message():
    h = History(redact=False)
    h.append(assistant("I start"))  # repair puts a user line before it
    h.append(user("ok"))
    assert len(h) == 3 and h.view_index(1) == 0 and h.seq_at(0) == 1 and h.view_index(2) == 2


def test_an_interrupted_result_belongs_to_the_step_before():
    h = History(redact=False)
    h.append(user("go"))
    h.append(assistant(ToolUseBlock(id="t1", name="Bash", input={})))
    h.append(assistant("again"))  # repair answers t1 as interrupted, in a view message of its own
    assert [m.role for m in h.view] == ["user", "assistant", "user", "assistant"]
    assert h.view_index(3) == 3 and h.seq_at(3) == 3 and h.view_length(2) == 2 and h.view_length(3) == 4
    with pytest.raises(ValueError):
        h.seq_at(2)


def _nameable(history: History) -> set[int]:
    """Every view index a compaction can name: where `kept_from` puts the verbatim part, from any base it can reach."""
    found, todo = {0}, [0]
    while todo:
        base = todo.pop()
        for keep in range(1, len(history.steps_in(base)) + 1):
            index = kept_from(history, base, keep)
            if index not in found:
                found.add(index)
                todo.append(index)
    return found


def _append(history: History, log: list[Message], k: int, close: bool) -> None:
    history.append(log[k])
    if close and history.pending_tool_ids and k + 1 < len(log) and log[k + 1].role == "assistant":
        history.close_pending()  # as the replay benchmark does before a call whose tool calls never returned


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=messy_log(), close=st.booleans())
def test_property_log_positions_and_view_indices_translate_both_ways(log, close):
    live = History(redact=False)
    for k in range(len(log)):
        _append(live, log, k, close)
        if live.view:
            for index in _nameable(live):
                assert live.view_index(live.seq_at(index)) == index
            assert live.view_length(live.raw_count) == len(live)
    replayed = History(log, redact=False)  # as an agent reloads its log: the same positions
    seqs = range(1, len(log) + 1)
    assert [replayed.view_index(s) for s in seqs] == [live.view_index(s) for s in seqs]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=messy_log(), cuts=st.lists(st.integers(0, 40), max_size=3), keep=st.integers(1, 4), close=st.booleans())
def test_property_old_and_new_events_give_identical_requests(log, cuts, keep, close):
    h = History(redact=False)
    pol = policy(keep_last_steps=keep, batch=1)
    events: list[tuple[CompactionEvent, CompactionEvent]] = []
    for k in range(len(log)):
        _append(h, log, k, close)
        if h.pending_tool_ids or not h.view or h.view[-1].role != "user":
            continue
        if k in cuts:
            new = summarise(h, pol, previous=events[-1][0] if events else None)
            events.append((new, as_written_before(new, h)))
        for new, old in events[-2:]:
            assert request_bytes(h, pol, old) == request_bytes(h, pol, new)


def test_the_summary_pair_is_the_same_for_both_shapes():
    h = run_log(6)
    ev = summarise(h, policy())
    old = as_written_before(ev, h)
    assert [m.canonical for m in old.messages] == [m.canonical for m in ev.messages]
    assert Message(role="user", content=[TextBlock(text="Summarise.")]).canonical == ev.messages[0].canonical

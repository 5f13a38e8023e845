"""bench/prefix_stability.py on request sequences whose breaks and valid thinking blocks are known by
construction (issue 22 item 8)."""

from __future__ import annotations

import copy

import pytest

from tests.bench_scripts import load_bench

prefix_stability = load_bench("prefix_stability")
PrefixTracker = prefix_stability.PrefixTracker

SYSTEM = "You are a careful agent."
CALLS = 10


def reply(k: int) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": f"step {k}"},
                                             {"type": "tool_use", "id": f"t{k}", "name": "Read",
                                              "input": {"path": f"src/f{k}.py", "content": "x" * 50}}]}


def result(k: int) -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{k}", "content": f"line {k}"}]}


def log(j: int) -> list[dict]:
    """The append-only messages of call j: the task, then j replies each answered by its result."""
    out = [{"role": "user", "content": [{"type": "text", "text": "Fix the bug."}]}]
    for k in range(j):
        out += [reply(k), result(k)]
    return out


def body(messages: list[dict], system: str = SYSTEM) -> dict:
    marked = copy.deepcopy(messages)
    marked[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}  # the breakpoint moves every call
    return {"model": "m", "max_tokens": 1, "system": [{"type": "text", "text": system}], "messages": marked}


def replay(make, planned=lambda j: False, system=lambda j: SYSTEM) -> prefix_stability.PrefixStats:
    """Call j sends make(j) and gets reply(j) back."""
    tracker = PrefixTracker()
    for j in range(CALLS):
        tracker.request(body(make(j), system(j)), planned=planned(j))
        tracker.reply(reply(j))
    return tracker.stats


def sends(j: int) -> int:
    return j  # call j carries the replies of calls 0..j-1


ALL_SENDS = sum(sends(j) for j in range(CALLS))


def test_an_append_only_conversation_never_breaks_and_keeps_every_block_valid():
    s = replay(log)
    assert (s.calls, s.breaks, s.sends, s.valid_sends) == (CALLS, 0, ALL_SENDS, ALL_SENDS)
    assert (s.produced, s.valid_next) == (CALLS - 1, CALLS - 1)


def edited(j: int) -> list[dict]:
    """From call 5 on, message 2 (the result of call 0) was rewritten (masked), and stays so."""
    msgs = log(j)
    if j >= 5:
        msgs[2] = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0", "content": "[masked]"}]}
    return msgs


def test_an_edit_invalidates_exactly_the_blocks_after_it_that_were_produced_before_it():
    s = replay(edited)
    assert (s.breaks_planned, s.breaks_unplanned) == (0, 1)
    # Replies 1..4 sit after message 2 and were produced before the edit: invalid at every call from 5 on.
    # Reply 0 sits before it; replies 5.. were produced under the edited prefix.
    invalid = sum(4 for j in range(5, CALLS))
    assert (s.sends, s.valid_sends) == (ALL_SENDS, ALL_SENDS - invalid)
    assert (s.produced, s.valid_next) == (CALLS - 1, CALLS - 2)  # only reply 4 dies at the next call


def test_a_planned_change_is_counted_apart():
    s = replay(edited, planned=lambda j: j == 5)
    assert (s.breaks_planned, s.breaks_unplanned) == (1, 0)


def test_a_reply_whose_own_call_input_is_cut_keeps_its_block_but_not_the_later_ones():
    def cut(j):
        msgs = log(j)
        if j >= 5:
            short = reply(1)
            short["content"][1]["input"]["content"] = "x…"
            msgs[3] = short  # reply 1's tool call, inputs cut: its block's prefix ends before it
        return msgs

    s = replay(cut)
    invalid = sum(3 for j in range(5, CALLS))  # replies 2, 3, 4
    assert (s.breaks, s.sends, s.valid_sends) == (1, ALL_SENDS, ALL_SENDS - invalid)


def test_a_note_appended_to_the_last_message_per_call_breaks_every_call_and_every_block():
    def recap(j):
        msgs = log(j)
        msgs[-1] = {**msgs[-1], "content": [*msgs[-1]["content"], {"type": "text", "text": "Todo: 1 open"}]}
        return msgs

    s = replay(recap)
    assert (s.breaks_unplanned, s.sends, s.valid_sends, s.valid_next) == (CALLS - 1, ALL_SENDS, 0, 0)


def test_a_note_kept_as_its_own_message_in_the_log_breaks_nothing():
    def logged(j):
        msgs = [log(1)[0]]
        for k in range(j):  # each call's note stays where it was sent, the next reply comes after it
            msgs += [{"role": "user", "content": [{"type": "text", "text": f"Todo after {k}"}]}, reply(k), result(k)]
        return msgs + [{"role": "user", "content": [{"type": "text", "text": f"Todo after {j}"}]}]

    s = replay(logged)
    assert (s.breaks, s.valid_sends, s.valid_next) == (0, ALL_SENDS, CALLS - 1)


def test_a_compaction_is_a_planned_break_and_its_summary_is_no_send():
    summary = [{"role": "user", "content": "Summarise."}, {"role": "assistant", "content": "<summary/>"}]

    def compacted(j):
        return log(j) if j < 5 else summary + log(j)[9:]  # from call 5: the summary, then reply 4 on

    s = replay(compacted, planned=lambda j: j == 5)
    assert (s.breaks_planned, s.breaks_unplanned) == (1, 0)
    # From call 5 on the request holds replies 4..j-1; reply 4's prefix changed, the later ones are new.
    expected_sends = sum(sends(j) for j in range(5)) + sum(j - 4 for j in range(5, CALLS))
    assert (s.sends, s.valid_sends) == (expected_sends, expected_sends - (CALLS - 5))


def test_a_new_system_prompt_invalidates_every_block():
    s = replay(log, system=lambda j: SYSTEM if j < 5 else "New rules.")
    assert s.breaks_unplanned == 1
    assert s.valid_sends == sum(sends(j) for j in range(5)) + sum(sends(j) - 5 for j in range(5, CALLS))


def test_a_reply_left_out_breaks_the_prefix():
    def dropped(j):
        msgs = log(j)
        return msgs[:1] + msgs[3:] if j >= 5 else msgs  # reply 0 and its result removed from call 5 on

    s = replay(dropped)
    assert s.breaks_unplanned == 1
    assert s.sends == ALL_SENDS - (CALLS - 5)


def test_a_reply_before_any_request_is_refused():
    with pytest.raises(ValueError, match="request"):
        PrefixTracker().reply(reply(0))

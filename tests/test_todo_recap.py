"""The todo recap (context/todo_recap.py, issues 13.1 and 22): the agent's current TodoWrite list
brought back into view as a new message in the log when the plan has been out of view for a while,
so the plan survives compression and compaction and no earlier message is ever edited."""

from __future__ import annotations

from context.assembly import Assembler, StaticPrefix
from context.compaction import CircuitBreaker, compact
from context.history import History
from context.messages import Message, ToolResultBlock, ToolUseBlock, assistant, user
from context.summary_schemas import ExecuteSummary
from context.todo_recap import HEADER, MAX_OPEN, recap, recap_due
from tests.test_assembly import policy, step

PLAN = [{"content": "write tools.py", "status": "completed"},
        {"content": "write the samples", "status": "in_progress"},
        {"content": "run the evaluation", "status": "pending"},
        {"content": "hand off", "status": "pending"}]


def todo_step(i: int, todos: list) -> list[Message]:
    tid = f"toolu_todo{i}"
    return [assistant("planning", ToolUseBlock(id=tid, name="TodoWrite", input={"todos": todos})),
            user(ToolResultBlock(tool_use_id=tid, content='{"status": "ok"}'))]


def log_with_plan(steps_before: int = 2, steps_after: int = 12, todos: list = PLAN) -> History:
    h = History(redact=False)
    h.append(user("build the scenario"))
    for k in range(1, steps_before + 1):
        for m in step(k, "line\n" * 200):
            h.append(m)
    for m in todo_step(1, todos):
        h.append(m)
    for k in range(steps_before + 1, steps_before + steps_after + 1):
        for m in step(k, "line\n" * 200):
            h.append(m)
    return h


def test_open_items_come_first_then_the_count_of_completed_ones() -> None:
    text = recap(log_with_plan())
    assert text.splitlines() == [HEADER, "- [in_progress] write the samples", "- [pending] run the evaluation",
                                 "- [pending] hand off", "1 of 4 completed."]


def test_a_long_plan_is_capped_and_says_how_much_was_left_out() -> None:
    todos = [{"content": f"item {i}", "status": "pending"} for i in range(MAX_OPEN + 5)]
    lines = recap(log_with_plan(todos=todos)).splitlines()
    assert len(lines) == 1 + MAX_OPEN + 2 and lines[-2] == "- ... and 5 more open items"


def test_no_plan_means_no_recap_and_a_refused_list_is_skipped() -> None:
    assert recap(log_with_plan(todos=[])) is None
    h = History(redact=False)
    h.append(user("go"))
    for m in step(1):
        h.append(m)
    assert recap(h) is None
    for m in todo_step(1, PLAN) + todo_step(2, [{"content": "", "status": "pending"}]):  # the tool refused #2
        h.append(m)
    assert "write the samples" in recap(h)


def test_the_recap_is_due_once_the_plan_has_been_out_of_view_for_n_steps() -> None:
    assert recap_due(log_with_plan(steps_after=7), every=8) is None  # the TodoWrite call is 7 steps back
    text = recap_due(log_with_plan(steps_after=8), every=8)
    assert text is not None and "- [in_progress] write the samples" in text
    h = log_with_plan(steps_after=8)
    h.append(user(text))  # appended: it is in view now, so no second recap until 8 more steps
    assert recap_due(h, every=8) is None
    done = [{**item, "status": "completed"} for item in PLAN]
    assert recap_due(log_with_plan(steps_after=20, todos=done), every=8) is None  # nothing open: nothing to recall


def test_the_recap_is_a_message_in_the_log_so_every_later_request_carries_it_unchanged() -> None:
    h = log_with_plan(steps_after=8)
    static = StaticPrefix(system="You are Execute.")
    text = recap_due(h, every=8)
    h.append(user(text))
    before = Assembler(h, policy(batch=50)).assemble().to_request(static, model="m", max_tokens=100)
    for m in step(99, "more"):
        h.append(m)
    after = Assembler(h, policy(batch=50)).assemble().to_request(static, model="m", max_tokens=100)

    def unmarked(messages: list) -> list:
        return [{**m, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]}
                for m in messages]

    # The recap sits in the results message it followed; the next request starts with this one exactly.
    assert unmarked(after["messages"][: len(before["messages"])]) == unmarked(before["messages"])
    assert any(b.get("text") == text for m in after["messages"] for b in m["content"])


def test_after_a_compaction_that_summarised_the_call_away_the_plan_is_recalled_at_once() -> None:
    h = log_with_plan(steps_before=1, steps_after=14)
    asm = Assembler(h, policy(), agent="execute")
    event = compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="Summarise.", call=None,
                    breaker=CircuitBreaker())
    after = asm.assemble(event)
    assert not any(u.name == "TodoWrite" for m in after.messages for u in m.tool_uses)  # the call is gone
    since = event.in_view(h).kept_from
    assert recap_due(h, every=50) is None  # without the compaction point, the call is still "in view"
    text = recap_due(h, every=50, since=since)
    assert text is not None and "- [in_progress] write the samples" in text

"""The todo recap (context/todo_recap.py, issue 13.1): the agent's current TodoWrite list as the
last block of every request, after the last cache breakpoint, so the plan survives compression
and compaction and costs only its own tokens."""

from __future__ import annotations

from context.assembly import Assembler, StaticPrefix
from context.compaction import CircuitBreaker, compact
from context.history import History
from context.messages import Message, ToolResultBlock, ToolUseBlock, assistant, user
from context.policy import Policy
from context.summary_schemas import ExecuteSummary
from context.todo_recap import HEADER, MAX_OPEN, recap
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


def test_every_request_ends_with_the_recap_after_the_last_breakpoint() -> None:
    h = log_with_plan()
    static = StaticPrefix(system="You are Execute.")
    with_recap = Assembler(h, policy()).assemble()
    without = Assembler(h, policy(todo_recap=False)).assemble()
    body = with_recap.to_request(static, model="m", max_tokens=100)
    plain = without.to_request(static, model="m", max_tokens=100)
    last = body["messages"][-1]["content"]
    assert last[-1] == {"type": "text", "text": with_recap.recap} and "cache_control" not in last[-1]
    assert "cache_control" in last[-2]  # the breakpoint stays on the block before it
    # Everything up to the recap is the request without it: the cached prefix does not move.
    assert {**body, "messages": [*body["messages"][:-1], {**body["messages"][-1], "content": last[:-1]}]} == plain
    assert with_recap.layers["todo_recap"] > 0 and "todo_recap" not in without.layers
    assert with_recap.estimated_input > without.estimated_input


def test_the_plan_survives_a_compaction_that_summarised_the_call_away() -> None:
    h = log_with_plan(steps_before=1, steps_after=14)
    asm = Assembler(h, policy(), agent="execute")
    event = compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="Summarise.", call=None,
                    breaker=CircuitBreaker())
    after = asm.assemble(event)
    assert not any(u.name == "TodoWrite" for m in after.messages for u in m.tool_uses)  # the call is gone
    assert after.recap is not None and "- [in_progress] write the samples" in after.recap


def test_the_recap_is_part_of_what_the_threshold_sees() -> None:
    h = log_with_plan()
    plain = Assembler(h, Policy(**{**policy().model_dump(), "todo_recap": False})).assemble()
    assert Assembler(h, policy()).assemble().raw_tokens - plain.raw_tokens > 10

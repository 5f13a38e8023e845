import pytest
from hypothesis import given, settings

from context.history import History
from context.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, assistant, user
from context.protocol import INTERRUPTED, ProtocolError, problems, repair, validate
from tests.logs import messy_log


def call(i: str, name: str = "Bash") -> ToolUseBlock:
    return ToolUseBlock(id=i, name=name, input={"command": "ls"})


def result(i: str, text: str = "ok") -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=i, content=text)


def test_valid_conversation_passes():
    validate([user("hi"), assistant("a", call("t1")), user(result("t1")), assistant("done")])


def test_empty_request_is_rule_1():
    with pytest.raises(ProtocolError) as err:
        validate([])
    assert err.value.rule == 1


@pytest.mark.parametrize(
    "messages, index, rule, words",
    [
        ([assistant("x")], 0, 1, "first message"),
        ([user("a"), user("b")], 1, 1, "in a row"),
        ([user("a"), assistant(call("t1")), user("no result")], 2, 2, "not answered"),
        ([user("a"), assistant("x"), user(result("t9"))], 2, 2, "answers no tool_use"),
        (
            [user("a"), assistant(call("t1")), Message(role="user", content=[TextBlock(text="x"), result("t1")])],
            2,
            2,
            "before any other",
        ),
        ([user("a"), assistant(call("t1"))], 1, 2, "never answered"),
    ],
)
def test_each_broken_rule_names_index_and_rule(messages, index, rule, words):
    with pytest.raises(ProtocolError) as err:
        validate(messages)
    assert (err.value.index, err.value.rule) == (index, rule)
    assert words in str(err.value) and f"message {index}" in str(err.value)


def test_pending_tool_call_allowed_only_when_asked():
    msgs = [user("a"), assistant(call("t1"))]
    validate(msgs, allow_pending=True)
    assert problems(msgs)


def test_rule_3_window():
    msgs = [user("hello " * 100)]
    with pytest.raises(ProtocolError) as err:
        validate(msgs, window=50, max_tokens=10, estimate=lambda m: sum(x.tokens for x in m))
    assert err.value.rule == 3 and "window of 50" in str(err.value)


def test_repair_answers_interrupted_call_and_drops_orphans():
    log = [
        user("task"),
        assistant(call("t1"), call("t2")),
        user(result("t1"), result("ghost")),
        user("[Request interrupted by user]"),
        assistant("stopped"),
    ]
    fixed = repair(log)
    validate(fixed)
    answered = {r.tool_use_id: r for r in fixed[2].tool_results}
    assert set(answered) == {"t1", "t2"}
    assert answered["t2"].is_error and answered["t2"].content == INTERRUPTED
    assert "[Request interrupted by user]" in fixed[2].text


def test_repair_merges_neighbours_and_fixes_leading_assistant():
    fixed = repair([assistant("a"), assistant("b"), user("c"), user("d"), Message(role="user", content=[])])
    validate(fixed)
    assert [m.role for m in fixed] == ["user", "assistant", "user"]
    assert fixed[1].text == "a\nb" and fixed[2].text == "c\nd"


def test_repair_keeps_valid_messages_as_the_same_objects():
    log = [user("a"), assistant(call("t1")), user(result("t1")), assistant("b")]
    assert all(x is y for x, y in zip(repair(log), log))


def test_repair_of_empty_log_is_empty():
    assert repair([]) == []


@settings(max_examples=300, deadline=None)
@given(messy_log())
def test_repair_always_yields_a_valid_log(log):
    fixed = repair(log)
    if fixed:  # a log of only orphans and empties repairs to nothing at all
        validate(fixed)
    assert repair(fixed) == fixed  # idempotent


@settings(max_examples=200, deadline=None)
@given(messy_log())
def test_incremental_history_view_equals_repair_of_the_prefix(log):
    history = History(redact=False)
    for k, msg in enumerate(log, 1):
        history.append(msg)
        expected = repair(log[:k], close_pending=False)
        assert [m.canonical for m in history.view] == [m.canonical for m in expected]
    # the index agrees with a from-scratch scan
    view = history.view
    assert history.step_starts == [i for i, m in enumerate(view) if m.role == "assistant"]
    assert history.tokens() == sum(m.tokens for m in view)


def test_a_system_message_in_a_log_joins_the_user_message_it_follows_in_the_view() -> None:
    """History accepts a logged ``role: "system"`` note; the view keeps it as text of the user message before it
    (after a user turn) or as a user message of its own (after the agent's reply, where no system message may go)."""
    from context.history import History
    from context.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, assistant, user
    from context.protocol import validate as check

    note = Message(role="system", content=[TextBlock(text="[baton] recap")])
    call = assistant(ToolUseBlock(id="t1", name="Read", input={}))
    history = History([user("task"), call, user(ToolResultBlock(tool_use_id="t1", content="ok")), note,
                       assistant("done"), note], redact=False)
    view = history.view
    assert [m.role for m in view] == ["user", "assistant", "user", "assistant", "user"]
    assert view[2].content[-1].text == "[baton] recap" and view[4].text == "[baton] recap"
    check(view)

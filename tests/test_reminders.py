"""baton's reminders (context/reminders.py): the plan's recap and a change of conventions go out as a
mid-conversation system message on a model that takes one, as user text on one that does not; the log
keeps them as flagged text blocks, so every later request, the summary's included, sends a logged
message the same way and the prefix only appends. The double and baton decide which models take one
with the same function."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from agents.agent import Agent
from agents.disk import AgentDisk, open_turn
from agents.models import ModelRequest
from agents.openings import init_opening
from agents.settings_layers import resolve_config
from agents.simulated import Conversation, SimulatedModel
from agents.step import CONVENTIONS_CHANGED, run_step
from context.assembly import Assembler, StaticPrefix
from context.compaction import summary_request
from context.history import History
from context.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, assistant, parse_message, user
from context.prefix import bind_reply
from context.protocol import validate
from context.redaction import redact_message
from context.reminders import reminder, takes_system_messages
from tests.agent_run import copy_example
from tests.fake_api_support import sdk_client, serving, stats
from tests.test_assembly import policy, step
from workers.fake_api.catalogue import DEFAULT_MODELS
from workers.fake_api.server import FakeApi

TAKES, DOES_NOT = "claude-opus-5-5", "claude-sonnet-4-6"
RECAP = "[baton] Your current plan (the last TodoWrite), open items first:\n- [pending] hand off\n0 of 1 completed."
STATIC = StaticPrefix(system="You are Execute.")


@pytest.mark.parametrize("model, takes", [
    ("claude-opus-4-8", True), ("claude-opus-5", True), ("claude-opus-5-5", True), ("claude-sonnet-5-5", True),
    ("claude-haiku-5-5", True), ("claude-opus-4-8-20260301", True),
    ("claude-opus-6", True), ("claude-sonnet-6-1", True), ("opus", True), ("a-model-from-2030", True),  # newer
    ("claude-opus-4-7", False), ("claude-opus-4-6", False), ("claude-opus-4-1", False), ("claude-haiku-4-5", False),
    ("claude-sonnet-4-6", False), ("claude-sonnet-4-8", False), ("claude-sonnet-5", False),
    ("claude-sonnet-4-20250514", False), ("claude-3-5-sonnet-20241022", False), ("claude-3-opus-20240229", False),
    ("claude-2.1", False), ("claude-instant-1.2", False),
])
def test_which_models_take_a_system_message(model: str, takes: bool) -> None:
    assert takes_system_messages(model) is takes


def test_the_double_asks_the_same_function() -> None:
    assert {m.id: m.system_messages for m in DEFAULT_MODELS} == {m.id: m.id.endswith("-5-5") for m in DEFAULT_MODELS}
    assert all(m.system_messages is takes_system_messages(m.id) for m in DEFAULT_MODELS)
    assert "system_messages" not in DEFAULT_MODELS[0].api()  # the listing does not say it, as the API's does not


def unmarked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]}
            for m in messages]


def checked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` after the protocol's rules, rule 4 (where a system message may go) included."""
    validate([parse_message(m) for m in messages])
    return messages


def recapped(note: TextBlock | str = reminder(RECAP), steps: int = 3) -> History:
    """An opening, ``steps`` steps, and the note after the last step's results."""
    history = History(redact=False)
    history.append(user("build the scenario"))
    for k in range(1, steps + 1):
        for message in step(k):
            history.append(message)
    history.append(user(note))
    return history


def request(history: History, model: str, **policy_fields: Any) -> dict[str, Any]:
    assembled = Assembler(history, policy(**{"batch": 50, **policy_fields})).assemble()
    return assembled.to_request(STATIC, model=model, max_tokens=100)


def test_on_a_model_that_takes_one_the_recap_is_a_system_message_after_the_results() -> None:
    messages = checked(request(recapped(), TAKES)["messages"])
    assert [m["role"] for m in messages[-3:]] == ["assistant", "user", "system"]
    assert [b["type"] for b in messages[-2]["content"]] == ["tool_result"]
    # The last message keeps the request's last breakpoint; the flag itself is never sent.
    assert messages[-1]["content"] == [{"type": "text", "text": RECAP, "cache_control": {"type": "ephemeral"}}]


def test_on_a_model_that_does_not_it_is_user_text_exactly_as_before() -> None:
    as_reminder = request(recapped(), DOES_NOT)
    assert "system" not in [m["role"] for m in checked(as_reminder["messages"])]
    assert as_reminder == request(recapped(note=RECAP), DOES_NOT)  # the bytes of a plain user note
    # and plain user text is never split
    assert request(recapped(note=RECAP), TAKES)["messages"] == as_reminder["messages"]


def test_a_logged_message_goes_out_the_same_way_on_every_later_request() -> None:
    """The recap and a conventions change, then more steps (with batches compressed): each request's
    messages start with the previous request's, reminders split off in both, so the prefix only appends."""
    history = recapped()
    earlier: list[dict[str, Any]] = []
    for k in range(4, 12):
        for message in step(k):
            history.append(message)
        if k == 6:
            history.append(user(reminder(f"{CONVENTIONS_CHANGED}\n\nIds are upper-case.")))
        messages = checked(request(history, TAKES)["messages"])
        assert unmarked(messages[: len(earlier)]) == unmarked(earlier)
        earlier = messages
    assert [m["content"][0]["text"][:40] for m in earlier if m["role"] == "system"] == [
        RECAP[:40], CONVENTIONS_CHANGED[:40]]
    # With steps compressed in batches the view changes where the engine chose to, and the reminders,
    # text blocks, go out the same way in every layout.
    compressed = checked(request(history, TAKES, batch=1, keep_last_steps=2)["messages"])
    assert sum(m["role"] == "system" for m in compressed) == 2


def test_the_summary_request_sends_them_as_the_steps_did_and_the_prompt_last() -> None:
    """The summary request shares the steps' prefix, reminders split off as they were; after the last step,
    where the compact prompt follows, a system message may not go, so that one is user text."""
    history = recapped()
    for message in step(4):
        history.append(message)
    history.append(user(reminder(RECAP + " (again)")))
    assembled = Assembler(history, policy(batch=50)).assemble()
    steps = assembled.to_request(STATIC, model=TAKES, max_tokens=100)["messages"]
    summary = summary_request(assembled, "Summarise.")
    body = checked(summary.to_request(STATIC, model=TAKES, max_tokens=100)["messages"])
    assert unmarked(body[:-1]) == unmarked(steps[:-2])  # up to the newest step's results: the same bytes
    assert [m["role"] for m in body].count("system") == 1
    assert [b.get("text") for b in body[-1]["content"][1:]] == [RECAP + " (again)", "Summarise."]
    plain = checked(summary.to_request(STATIC, model=DOES_NOT, max_tokens=100)["messages"])
    assert "system" not in [m["role"] for m in plain] and len(plain) == len(body) - 1


def test_the_log_keeps_the_flag_and_redaction_keeps_it() -> None:
    note = Message(role="user", content=[reminder(f"{RECAP} token=sk-ant-api03-{'a' * 60}")])
    stored = redact_message(note).stored
    assert stored["content"][0]["reminder"] is True and "sk-ant-api03" not in stored["content"][0]["text"]
    back = parse_message(stored)
    assert back.content[0].reminder and "reminder" not in back.api["content"][0]
    assert back.content[0].digest != TextBlock(text=back.content[0].text).digest  # the chain tells them apart


def test_a_logged_system_message_goes_out_as_one_again() -> None:
    history = recapped(steps=1)
    history.append(assistant("step 2", ToolUseBlock(id="t2", name="Read", input={})))
    history.append(user(ToolResultBlock(tool_use_id="t2", content="ok")))
    history.append(Message(role="system", content=[TextBlock(text="[baton] from a system record")]))
    assert checked(request(history, TAKES)["messages"])[-1]["role"] == "system"


def test_the_simulated_model_reads_the_results_before_a_system_message() -> None:
    messages = request(recapped(steps=2), TAKES)["messages"]
    split = Conversation.of(ModelRequest(model=TAKES, max_tokens=100, messages=messages))
    plain = Conversation.of(ModelRequest(model=TAKES, max_tokens=100, messages=messages[:-1]))
    assert split.last_results() == plain.last_results() and len(split.last_results()) == 1


class Recording(SimulatedModel):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[ModelRequest] = []

    def create(self, request: ModelRequest):  # noqa: ANN201
        self.seen.append(request)
        return super().create(request)


@pytest.mark.parametrize("model, role", [("opus", "system"), (DOES_NOT, "user")])
def test_a_step_tells_a_change_of_conventions_as_the_model_takes_it(tmp_path: Path, model: str, role: str) -> None:
    root = copy_example(tmp_path)
    recording = Recording()
    config = resolve_config("init", scenario_toml=root / "scenario.toml", env={}, overrides={"model": model},
                            profile="demo")
    agent = Agent(config, recording)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    assert run_step(root, agent, step=1).status == "continue"
    (root.parent / "CONVENTIONS.md").write_text("Ids are upper-case.\n", encoding="utf-8")
    assert run_step(root, agent, step=2).status == "continue"
    last = recording.seen[-1].messages[-1]
    assert last["role"] == role and CONVENTIONS_CHANGED in json.dumps(last)
    note = [r for r in AgentDisk.load(root, "init").records if r.kind == "note"][-1]
    assert note.message["content"][-1]["reminder"] is True  # the log says what it is, whatever the model


@pytest.fixture(scope="module")
def client() -> Iterator[tuple[anthropic.Anthropic, str]]:
    with serving(FakeApi()) as running:
        yield sdk_client(running.url), running.url


@pytest.mark.parametrize("model", [TAKES, DOES_NOT])
def test_through_the_double_thinking_sent_back_after_a_reminder_stays_valid(client, model: str) -> None:
    """baton's requests, a recap after every step's results, through the real SDK and the double: each is
    accepted (a system message only where the model takes one), and the thinking baton's prefix chain sends
    back is what the double finds valid."""
    sdk, url = client
    init = Agent(resolve_config("init", env={}, profile="demo"), SimulatedModel())
    static = init.static()
    history = History(redact=False)
    history.append(user(init_opening("refund_desk", 1)))
    before, sent = stats(url), 0
    for k in range(4):
        assembled = Assembler(history, init.config.context).assemble()
        body = assembled.to_request(static, model=model, max_tokens=2048)
        reply = sdk.messages.create(**body)
        sent += assembled.chain.sent
        message = parse_message({"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                                  for b in reply.content]})
        history.append(bind_reply(assembled.chain.digest, message)[0])
        history.append(Message(role="user", content=[
            ToolResultBlock(tool_use_id=u.id, content='{"status": "ok", "data": {}}') for u in message.tool_uses]
            or [TextBlock(text="[baton] Continue with the tools.")]))
        history.append(user(reminder(f"{RECAP} ({k})")))
    after = stats(url)
    thinking = {key: after["thinking"][key] - before["thinking"][key] for key in ("sent_back", "valid", "refused")}
    assert after["errors"] == before["errors"]
    assert thinking == {"sent_back": sent, "valid": sent, "refused": 0}, thinking
    assert sent > 0 or model == DOES_NOT  # the double signs thinking on the 5.5 models
    assert after["system_messages"] - before["system_messages"] == (6 if model == TAKES else 0)

"""Mid-conversation system messages in the API double (workers/fake_api/rules.py, context/protocol.py rule 4):
each placement rule of the platform docs ("Mid-conversation system messages"), the models that take one,
and the thinking prefix they are part of; all through the real SDK over HTTP (``anthropic.types.
SystemMessageParam``: ``{"role": "system", "content": str | [text blocks]}``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from context.protocol import SYSTEM_AFTER, SYSTEM_BEFORE, SYSTEM_FIRST, SYSTEM_TEXT, SYSTEM_TWICE
from tests.fake_api_support import init_body, sdk_client, serving, stats
from workers.fake_api.rules import SYSTEM_UNSUPPORTED
from workers.fake_api.server import FakeApi
from workers.fake_api.thinking import BINDING_BETA

RESULT = '{"status": "ok", "data": {"written": true}}'
RULE = {"role": "system", "content": "From now on, write every file in British English."}


@pytest.fixture(scope="module")
def double() -> Iterator[tuple[anthropic.Anthropic, str]]:
    with serving(FakeApi()) as running:
        yield sdk_client(running.url), running.url


def send(client: anthropic.Anthropic, body: dict[str, Any], **extra: Any) -> Any:
    return client.messages.create(**body, **extra)


def refused(client: anthropic.Anthropic, body: dict[str, Any]) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        send(client, body)
    return caught.value.body["error"]["message"]


def with_messages(*messages: dict[str, Any], model: str = "claude-opus-5-5") -> dict[str, Any]:
    body = init_body(model)
    return {**body, "messages": [*body["messages"], *messages]}


def next_request(body: dict[str, Any], reply: Any) -> dict[str, Any]:
    """``body`` with ``reply`` appended as returned and its tool calls answered."""
    content = [b.model_dump(exclude_none=True) for b in reply.content]
    results = [{"type": "tool_result", "tool_use_id": b["id"], "content": RESULT}
               for b in content if b["type"] == "tool_use"]
    return {**body, "messages": [*body["messages"], {"role": "assistant", "content": content},
                                 {"role": "user", "content": results}]}


def test_a_system_message_after_the_last_user_turn_is_answered_and_counted(double) -> None:
    client, url = double
    before = stats(url)["system_messages"]
    reply = send(client, with_messages(RULE))
    assert reply.stop_reason == "tool_use"
    # Content blocks work as a string does; and it may stand between a user turn and an assistant turn.
    blocks = {"role": "system", "content": [{"type": "text", "text": RULE["content"]}]}
    middle = next_request(with_messages(blocks, model="claude-sonnet-5-5"), reply)
    assert send(client, middle).stop_reason in ("tool_use", "end_turn")
    assert stats(url)["system_messages"] == before + 2


@pytest.mark.parametrize("messages, message", [
    ([RULE], SYSTEM_FIRST),  # the first message
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, RULE], SYSTEM_AFTER),
    ([{"role": "user", "content": "q"}, RULE, {"role": "user", "content": "more"}], SYSTEM_BEFORE),
    ([{"role": "user", "content": "q"}, RULE, RULE], SYSTEM_TWICE),
    ([{"role": "user", "content": "q"}, {"role": "system", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}], SYSTEM_TEXT),
], ids=["first", "after-assistant", "before-user", "twice", "not-text"])
def test_a_misplaced_system_message_is_a_400_saying_which_rule(double, messages, message) -> None:
    client, url = double
    body = {**init_body(), "messages": messages}
    errors = stats(url)["errors"].get("400 invalid_request_error", 0)
    assert message in refused(client, body)
    assert stats(url)["errors"]["400 invalid_request_error"] == errors + 1


def test_a_model_without_mid_conversation_system_messages_refuses_one(double) -> None:
    client, _ = double
    message = refused(client, with_messages(RULE, model="claude-sonnet-4-6"))
    assert message == f"messages.1.role: {SYSTEM_UNSUPPORTED}"
    assert send(client, with_messages(model="claude-sonnet-4-6")).content  # the same request without it is fine


def test_a_system_message_is_part_of_the_thinking_prefix(double) -> None:
    """A reply produced after a system message is signed over it: sent back with the system message as it was,
    its thinking is valid; with the system message edited or removed, it fails the prefix check."""
    client, url = double
    first = with_messages(RULE)
    reply = send(client, first)
    again = next_request(first, reply)
    valid = stats(url)["thinking"]["valid"]
    send(client, again)
    assert stats(url)["thinking"]["valid"] == valid + 1
    edited = {**again, "messages": [*again["messages"][:1], {"role": "system", "content": "Use US English."},
                                    *again["messages"][2:]]}
    removed = {**again, "messages": [again["messages"][0], *again["messages"][2:]]}
    for changed in (edited, removed):
        assert "bound to a different conversation" in refused(client, changed)
        dropped = client.messages.create(**changed, thinking={
            "type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}},
            extra_headers={"anthropic-beta": BINDING_BETA})
        assert [t["type"] for t in dropped.input_transformations] == ["thinking_dropped"]

"""The API double's preserved thinking (workers/fake_api/thinking.py, issue 22): each rule of the platform
docs ("Preserved thinking", "Prefix checks on thinking blocks", the prompt-caching page's invalidation
table), one test each, through the double's request handler; one through the real SDK over HTTP."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.fake_api_support import KEY, init_body, sdk_client
from workers.fake_api.server import FakeApi, start
from workers.fake_api.thinking import BINDING_BETA, REDACTED_EVERY, UPDATES_BETA

HEADERS = {"x-api-key": KEY, "anthropic-version": "2026-10-21"}
DROP = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
RESULT = '{"status": "ok", "data": {"written": true}}'


def call(api: FakeApi, body: dict[str, Any], betas: tuple[str, ...] = (), path: str = "/v1/messages"):
    headers = dict(HEADERS, **({"anthropic-beta": ",".join(betas)} if betas else {}))
    reply = api.handle("POST", path, headers, json.dumps(body).encode())
    return reply.status, reply.body


def followed(body: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """``body`` with ``reply`` appended as returned and its tool calls answered: an append-only next request."""
    results = [{"type": "tool_result", "tool_use_id": b["id"], "content": RESULT}
               for b in reply["content"] if b["type"] == "tool_use"]
    return {**body, "messages": [*body["messages"], {"role": "assistant", "content": reply["content"]},
                                 {"role": "user", "content": results}]}


def two_calls(api: FakeApi, **extra: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    first = {**init_body(), **extra}
    status, reply = call(api, first, (BINDING_BETA,) if "thinking" in extra else ())
    assert status == 200, reply
    return first, reply


def test_every_reply_of_a_55_model_carries_a_signed_thinking_block_empty_at_the_default_display() -> None:
    api = FakeApi()
    _, reply = two_calls(api)
    thinking = reply["content"][0]
    assert thinking["type"] == "thinking" and thinking["thinking"] == "" and len(thinking["signature"]) > 40
    summarized = {**init_body(), "thinking": {"type": "adaptive", "display": "summarized"}}
    status, shown = call(api, summarized)
    assert status == 200 and shown["content"][0]["thinking"].startswith("[simulated]")
    # Thinking is billed as output: the same request costs more output than the simulated answer alone.
    assert reply["usage"]["output_tokens"] > 40


def test_a_redacted_thinking_block_comes_now_and_then() -> None:
    api = FakeApi()
    kinds = [b["type"] for _ in range(REDACTED_EVERY) for b in call(api, init_body())[1]["content"]]
    assert kinds.count("redacted_thinking") == 1 and kinds.count("thinking") == REDACTED_EVERY
    assert api.stats.snapshot()["thinking"]["redacted_produced"] == 1


def test_blocks_sent_back_unchanged_after_an_append_are_valid() -> None:
    api = FakeApi()
    first, reply = two_calls(api)
    status, second = call(api, followed(first, reply))
    assert status == 200, second
    counts = api.stats.snapshot()["thinking"]
    assert (counts["sent_back"], counts["valid"], counts["dropped"], counts["refused"]) == (1, 1, 0, 0)
    status, _ = call(api, followed(followed(first, reply), second))  # and the next one, two blocks back
    assert status == 200 and api.stats.snapshot()["thinking"]["valid"] == 3


def test_an_edited_earlier_message_fails_the_prefix_check_with_the_documented_400() -> None:
    api = FakeApi()
    first, reply = two_calls(api)
    edited = followed(first, reply)
    edited["messages"][0] = {"role": "user", "content": [{"type": "text", "text": "Iteration: 1\nchanged"}]}
    status, error = call(api, edited)
    assert status == 400
    message = error["error"]["message"]
    assert message.startswith("messages.1.content.0: Invalid `signature` in `thinking` block. The block is bound "
                              "to a different conversation.")
    assert "`thinking-binding-controls-2026-08-01` value in the `anthropic-beta` header" in message
    assert api.stats.snapshot()["thinking"]["refused"] == 1
    # count_tokens runs the same check, with the same 400.
    counted = {k: v for k, v in edited.items() if k != "max_tokens"}
    status, error = call(api, counted, path="/v1/messages/count_tokens")
    assert status == 400 and "bound to a different conversation" in error["error"]["message"]


def test_a_changed_system_prompt_fails_it_too() -> None:
    api = FakeApi()
    first, reply = two_calls(api)
    changed = followed(first, reply)
    changed["system"] = [{"type": "text", "text": "You are someone else today."}]
    assert call(api, changed)[0] == 400


def test_drop_block_drops_the_block_and_lists_it_in_input_transformations() -> None:
    api = FakeApi()
    first, reply = two_calls(api, thinking=DROP)
    edited = followed(first, reply)
    opening = edited["messages"][0]["content"][0]["text"]
    edited["messages"][0] = {"role": "user", "content": [{"type": "text", "text": opening + "\n(edited)"}]}
    status, answer = call(api, edited, (BINDING_BETA,))
    assert status == 200, answer
    assert answer["input_transformations"] == [
        {"type": "thinking_dropped", "path": "messages.1.content.0", "reason": "prefix_binding_mismatch"}]
    assert api.stats.snapshot()["thinking"]["dropped"] == 1
    # With nothing to drop, the list is there and empty (the beta header asks for it on every reply).
    assert call(api, followed(first, reply), (BINDING_BETA,))[1]["input_transformations"] == []


def test_drop_block_without_its_beta_header_is_refused() -> None:
    status, error = call(FakeApi(), {**init_body(), "thinking": DROP})
    assert status == 400 and error["error"]["message"] == "thinking.block_binding: Extra inputs are not permitted"


def test_an_edited_thinking_text_is_refused_whatever_the_setting() -> None:
    api = FakeApi()
    first, reply = two_calls(api, thinking=DROP)
    reply["content"][0] = {**reply["content"][0], "thinking": "I changed my mind."}
    status, error = call(api, followed(first, reply), (BINDING_BETA,))
    assert status == 400
    assert error["error"]["message"] == "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_thinking_may_be_dropped_from_the_start_but_not_from_the_middle() -> None:
    api = FakeApi()
    first, r1 = two_calls(api)
    second = followed(first, r1)
    status, r2 = call(api, second)
    third = followed(second, r2)
    status, r3 = call(api, third)
    assert status == 200
    fourth = followed(third, r3)
    no_first = json.loads(json.dumps(fourth))
    no_first["messages"][1]["content"] = [b for b in no_first["messages"][1]["content"]
                                          if b["type"] not in ("thinking", "redacted_thinking")]
    assert call(api, no_first)[0] == 200  # from the start: the blocks after it stay valid
    no_middle = json.loads(json.dumps(fourth))
    no_middle["messages"][3]["content"] = [b for b in no_middle["messages"][3]["content"]
                                           if b["type"] not in ("thinking", "redacted_thinking")]
    status, error = call(api, no_middle)
    assert status == 400 and error["error"]["message"].startswith("messages.5.content.0: Invalid `signature`")


@pytest.mark.parametrize("model, thinking, words", [
    ("claude-opus-5-5", {"type": "disabled"}, '"thinking.type.disabled" is not supported for this model'),
    ("claude-sonnet-5-5", {"type": "disabled"}, 'send "thinking": {"type": "between_tools"} instead'),
    ("claude-opus-5-5", {"type": "enabled", "budget_tokens": 2000}, '"thinking.type.enabled" is not supported'),
    ("claude-opus-5-5", {"type": "between_tools"}, '"thinking.type.between_tools" is not supported for this model'),
    ("claude-sonnet-5-5", {"type": "between_tools", "display": "summarized"}, "Extra inputs are not permitted"),
    ("claude-opus-5-5", {"type": "adaptive", "display": "updates"}, "thinking.display"),
])
def test_thinking_settings_the_55_models_refuse(model: str, thinking: dict, words: str) -> None:
    status, error = call(FakeApi(), {**init_body(model=model), "thinking": thinking})
    assert status == 400 and words in error["error"]["message"]


def test_between_tools_and_the_updates_display_are_taken_where_the_docs_allow() -> None:
    api = FakeApi()
    status, reply = call(api, {**init_body(model="claude-sonnet-5-5"), "thinking": {"type": "between_tools"}})
    kinds = [b["type"] for b in reply["content"]]
    assert status == 200 and kinds.index("thinking") == kinds.index("tool_use") - 1  # a note before the call
    status, _ = call(api, {**init_body(), "thinking": {"type": "adaptive", "display": "updates"}}, (UPDATES_BETA,))
    assert status == 200


def _cache(api: FakeApi, body: dict[str, Any], betas: tuple[str, ...] = ()) -> dict[str, int]:
    status, reply = call(api, body, betas)
    assert status == 200, reply
    return reply["usage"]


def _marked_conversation(api: FakeApi) -> dict[str, Any]:
    first, reply = two_calls(api)
    body = followed(first, reply)
    last = body["messages"][-1]["content"][-1]
    last["cache_control"] = {"type": "ephemeral"}
    return body


@pytest.mark.parametrize("change", [
    {"tool_choice": {"type": "none"}},
    {"thinking": {"type": "adaptive", "display": "summarized"}},  # display alone does not count...
    {"output_config": {"effort": "low"}},
])
def test_tool_choice_thinking_and_effort_changes_invalidate_the_message_blocks_only(change: dict) -> None:
    api = FakeApi()
    body = _marked_conversation(api)
    warm = _cache(api, body)
    again = _cache(api, body)
    assert again["cache_creation_input_tokens"] == 0 and again["cache_read_input_tokens"] == warm[
        "cache_read_input_tokens"] + warm["cache_creation_input_tokens"]
    changed = _cache(api, {**body, **change})
    if "thinking" in change:  # ...the mode does: the same request with between_tools on Sonnet would be a miss
        assert changed["cache_creation_input_tokens"] == 0
        return
    # The tools and the system prompt are still read; every message block is written again.
    assert 0 < changed["cache_read_input_tokens"] < again["cache_read_input_tokens"]
    assert changed["cache_creation_input_tokens"] > 0


def test_a_changed_effort_default_is_no_change_and_a_tools_change_invalidates_everything() -> None:
    api = FakeApi()
    body = _marked_conversation(api)
    _cache(api, body)
    same = _cache(api, {**body, "output_config": {"effort": "medium"}})  # Opus 5.5's own default
    assert same["cache_creation_input_tokens"] == 0
    tools = [dict(t) for t in body["tools"]]
    tools[0]["description"] = "changed"
    # (the thinking is left out: a tools change would fail its prefix check)
    unthought = json.loads(json.dumps(body))
    unthought["messages"][1]["content"] = [b for b in unthought["messages"][1]["content"] if b["type"] != "thinking"]
    fresh = _cache(api, {**unthought, "tools": tools})
    assert fresh["cache_read_input_tokens"] == 0


def test_through_the_sdk_the_signature_is_opaque_and_stats_count_it() -> None:
    running = start(FakeApi())
    try:
        client = sdk_client(running.url)
        body = init_body()
        first = client.beta.messages.create(**body, thinking=DROP, betas=[BINDING_BETA])
        assert first.content[0].type == "thinking" and first.input_transformations == []
        json.loads(base64.b64decode(first.content[0].signature))  # baton never reads it; the double can
        follow = followed(body, first.model_dump(exclude_none=True))
        second = client.beta.messages.create(**follow, thinking=DROP, betas=[BINDING_BETA])
        assert second.input_transformations == []
        assert running.server.api.stats.snapshot()["thinking"]["valid"] == 1
    finally:
        running.stop()


def test_a_refused_block_starts_a_new_thinking_epoch_and_the_run_goes_on(tmp_path) -> None:
    """Should the API refuse a thinking block baton sent back (here: one whose text changed in the log), the
    same request would fail forever. The step leaves every earlier block out and asks once more (issue 22)."""
    from agents.agent import Agent
    from agents.anthropic_model import AnthropicModel
    from agents.disk import AgentDisk, open_turn
    from agents.openings import init_opening
    from agents.settings_layers import resolve_config
    from agents.step import run_step
    from tests.agent_run import copy_example

    root = copy_example(tmp_path)
    running = start(FakeApi())
    try:
        config = resolve_config("init", scenario_toml=root / "scenario.toml", env={}, profile="demo",
                                overrides={"model": "claude-opus-5-5"})
        agent = Agent(config, AnthropicModel(api_key=KEY, base_url=running.url, sleep=lambda s: None))
        open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
        assert run_step(root, agent, step=1).status == "continue"
        assert run_step(root, agent, step=2).status == "continue"
        log = root / "state" / "init" / "log.jsonl"
        lines = log.read_text().splitlines()
        first = json.loads(lines[1])
        assert first["kind"] == "assistant" and first["message"]["content"][0]["type"] == "thinking"
        first["message"]["content"][0]["thinking"] = "something else"  # no longer what was signed
        log.write_text("\n".join([lines[0], json.dumps(first), *lines[2:]]) + "\n")

        refused = run_step(root, agent, step=3)
        assert refused.status == "continue" and "refused a thinking block" in refused.reason
        disk = AgentDisk.load(root, "init")
        assert disk.state.thinking_epoch == 1
        assert [w.code for w in disk.events if w.kind == "warning"] == ["thinking_refused"]
        assert run_step(root, agent, step=3).status == "continue"  # every earlier block left out: accepted
        step3 = [e for e in AgentDisk.load(root, "init").events if e.kind == "step"][-1]
        assert step3.step == 3 and step3.thinking_sent == 0 and step3.thinking_left_out >= 2
        assert run_step(root, agent, step=4).status == "continue"  # and the new blocks are sent back
        step4 = [e for e in AgentDisk.load(root, "init").events if e.kind == "step"][-1]
        assert step4.thinking_sent >= 1
        assert running.server.api.stats.snapshot()["thinking"]["refused"] == 1
    finally:
        running.stop()

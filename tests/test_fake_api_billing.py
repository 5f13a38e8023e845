"""What the API double bills, as the platform docs say, through the real SDK over HTTP: kept thinking as input
at its full count ("Preserved thinking"), cache writes split by TTL ("Prompt caching"), the compaction call
in ``usage.iterations`` ("Compaction on demand"), and the clock a test moves for the cache's TTLs."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from agents.simulated import SUMMARY_ASK, SimulatedModel
from context.tokens import count_text
from tests.fake_api_support import http, init_body, sdk_client, serving, stats
from workers.fake_api.compaction_block import COMPACTION_BETA
from workers.fake_api.counting import PER_BLOCK, claude_tokens
from workers.fake_api.server import FakeApi, Running
from workers.fake_api.thinking import BINDING_BETA

RESULT = '{"status": "ok", "data": {"written": true}}'
HOUR = {"type": "ephemeral", "ttl": "1h"}
FIVE_MINUTES = {"type": "ephemeral", "ttl": "5m"}
DROP = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}


@pytest.fixture
def running() -> Iterator[Running]:
    with serving(FakeApi(model=SimulatedModel("refund_desk"))) as running:
        yield running


@pytest.fixture
def client(running: Running) -> anthropic.Anthropic:
    return sdk_client(running.url)


def send(client: anthropic.Anthropic, body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return client.beta.messages.create(**body, **extra).model_dump(exclude_none=True)


def followed(body: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    results = [{"type": "tool_result", "tool_use_id": b["id"], "content": RESULT}
               for b in reply["content"] if b["type"] == "tool_use"]
    return {**body, "messages": [*body["messages"], {"role": "assistant", "content": reply["content"]},
                                 {"role": "user", "content": results}]}


def without_thinking(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with every thinking block left out (thinking may be dropped from the start)."""
    out = copy.deepcopy(body)
    for message in out["messages"]:
        if isinstance(message["content"], list):
            message["content"] = [b for b in message["content"] if b["type"] not in ("thinking", "redacted_thinking")]
    return out


def total_input(usage: dict[str, Any]) -> int:
    return usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]


def cost(block: dict[str, Any]) -> int:
    """The thinking tokens the double's seal says a block cost (baton never reads a signature; a test may)."""
    return json.loads(base64.b64decode(block["signature"]))["n"]


def counted(client: anthropic.Anthropic, body: dict[str, Any]) -> int:
    return client.beta.messages.count_tokens(**{k: v for k, v in body.items() if k != "max_tokens"}).input_tokens


# ---- thinking kept in context -----------------------------------------------------------------------------


@pytest.mark.parametrize("display", ["omitted", "summarized"])
def test_a_kept_thinking_block_is_billed_as_input_at_its_full_count_not_its_text(client, display) -> None:
    first = {**init_body(), "thinking": {"type": "adaptive", "display": display}}
    reply = send(client, first)
    thinking = reply["content"][0]
    assert thinking["type"] == "thinking" and (thinking["thinking"] == "") == (display == "omitted")
    body = followed(first, reply)
    kept, left_out = send(client, body), send(client, without_thinking(body))
    assert total_input(kept["usage"]) - total_input(left_out["usage"]) == cost(thinking) + PER_BLOCK
    assert counted(client, body) - counted(client, without_thinking(body)) == cost(thinking) + PER_BLOCK
    assert cost(thinking) > 40  # the reasoning, though the 5.5 models show none of it by default


def test_a_dropped_block_is_not_billed(client) -> None:
    first = {**init_body(), "thinking": DROP}
    body = followed(first, send(client, first, betas=[BINDING_BETA]))
    body["messages"][0] = {"role": "user", "content": [{"type": "text", "text": "Iteration: 1\nchanged"}]}
    dropped = send(client, body, betas=[BINDING_BETA])
    assert len(dropped["input_transformations"]) == 1
    unthought = send(client, without_thinking(body), betas=[BINDING_BETA])
    assert total_input(dropped["usage"]) == total_input(unthought["usage"])


# ---- cache writes by TTL, and the clock ------------------------------------------------------------------


def _hour_then_five_minutes() -> dict[str, Any]:
    """The system prompt behind a 1-hour breakpoint, the opening behind a 5-minute one (1h first, as required)."""
    body = copy.deepcopy(init_body())
    body["system"][0]["cache_control"] = HOUR
    body["messages"][0]["content"][-1]["cache_control"] = FIVE_MINUTES
    return body


def test_cache_writes_are_split_by_ttl_in_usage_and_stats(client, running) -> None:
    usage = send(client, _hour_then_five_minutes())["usage"]
    split = usage["cache_creation"]
    assert split["ephemeral_1h_input_tokens"] > 0 and split["ephemeral_5m_input_tokens"] > 0
    assert split["ephemeral_1h_input_tokens"] + split["ephemeral_5m_input_tokens"] == \
        usage["cache_creation_input_tokens"]
    tokens = stats(running.url)["tokens"]
    assert (tokens["cache_write_1h"], tokens["cache_write_5m"]) == (split["ephemeral_1h_input_tokens"],
                                                                    split["ephemeral_5m_input_tokens"])
    plain = send(client, init_body())["usage"]  # a default marker is a 5-minute one
    assert plain["cache_creation"]["ephemeral_1h_input_tokens"] == 0


def test_a_1h_entry_outlives_a_ten_minute_clock_advance_and_a_5m_one_does_not(client, running) -> None:
    body = _hour_then_five_minutes()
    written = send(client, body)["usage"]["cache_creation"]
    status, clock = http(f"{running.url}/clock", "POST", {"advance_s": 600})
    assert status == 200 and clock["advanced_s"] == 600
    later = send(client, body)["usage"]
    assert later["cache_read_input_tokens"] == written["ephemeral_1h_input_tokens"]
    assert later["cache_creation"] == {"ephemeral_1h_input_tokens": 0,
                                       "ephemeral_5m_input_tokens": written["ephemeral_5m_input_tokens"]}
    assert http(f"{running.url}/clock")[1]["advanced_s"] == 600


@pytest.mark.parametrize("move", [{"advance_s": -1}, {"advance_s": 1, "reverse": True}, {}])
def test_the_clock_only_moves_forward(running, move) -> None:
    status, error = http(f"{running.url}/clock", "POST", move)
    assert status == 400 and error["error"]["type"] == "invalid_request_error"


# ---- a compaction's call --------------------------------------------------------------------------------------


def test_the_compaction_call_is_billed_in_iterations_on_the_requests_breakpoints(client, running) -> None:
    instructions = f"Summarize as JSON inside {SUMMARY_ASK}...</compact_summary>."
    body = {**init_body(), "compaction": {"type": "summarize", "instructions": instructions}}
    first = send(client, body, betas=[COMPACTION_BETA])["usage"]
    assert total_input(first) == first["output_tokens"] == 0  # not in the top-level counts
    [call] = first["iterations"]
    # Its prompt: the messages as count_tokens says, then the instructions in the last user message.
    prompt = counted(client, init_body()) + claude_tokens(count_text(instructions)) + PER_BLOCK
    assert total_input(call) == prompt and call["cache_creation_input_tokens"] > 0
    again = send(client, body, betas=[COMPACTION_BETA])["usage"]["iterations"][0]
    assert again["cache_read_input_tokens"] == call["cache_creation_input_tokens"]  # the system prompt, read
    compaction = stats(running.url)["by_purpose"]["compaction"]
    assert compaction["requests"] == 2 and compaction["output"] == call["output_tokens"] + again["output_tokens"]


def test_a_pre_warm_writes_the_prefix_and_samples_nothing(client) -> None:
    warm = send(client, {**init_body(), "max_tokens": 0})
    assert warm["content"] == [] and warm["stop_reason"] == "max_tokens"
    assert warm["usage"]["output_tokens"] == 0 and warm["usage"]["cache_creation_input_tokens"] > 0
    assert send(client, init_body())["usage"]["cache_read_input_tokens"] == warm["usage"]["cache_creation_input_tokens"]

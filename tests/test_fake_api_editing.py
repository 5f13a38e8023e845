"""The API double's context editing (workers/fake_api/editing.py), through the real SDK over HTTP: the edits
as the platform docs give them ("Context editing"), what the model then reads, what is billed and cached,
and the thinking that stays valid because the client sends its history unchanged."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from agents.models import ModelRequest, ModelResponse
from agents.simulated import SimulatedModel
from tests.fake_api_support import EPHEMERAL, init_body, sdk_client, serving, stats
from workers.fake_api.editing import EDITING_BETA, PLACEHOLDER
from workers.fake_api.server import FakeApi, Running

# A tool result the size of a real one: clearing it is worth something.
RESULT = json.dumps({"status": "ok", "data": {"written": True, "listing": [f"file_{i}.md" for i in range(150)]}})
CLEAR_OLD = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 1},
             "keep": {"type": "tool_uses", "value": 1}}


class Recording(SimulatedModel):
    """The simulated model, remembering what each request let it read."""

    def __init__(self) -> None:
        super().__init__("refund_desk")
        self.read: list[ModelRequest] = []

    def create(self, request: ModelRequest) -> ModelResponse:
        self.read.append(request)
        return super().create(request)


@pytest.fixture
def model() -> Recording:
    return Recording()


@pytest.fixture
def running(model: Recording) -> Iterator[Running]:
    with serving(FakeApi(model=model)) as running:
        yield running


@pytest.fixture
def client(running: Running) -> anthropic.Anthropic:
    return sdk_client(running.url)


def send(client: anthropic.Anthropic, body: dict[str, Any], edits: list[dict[str, Any]] | None = None
         ) -> dict[str, Any]:
    extra = {} if edits is None else {"context_management": {"edits": edits}, "betas": [EDITING_BETA]}
    return client.beta.messages.create(**body, **extra).model_dump(exclude_none=True)


def refused(client: anthropic.Anthropic, body: dict[str, Any], edits: list[dict[str, Any]]) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        send(client, body, edits)
    return caught.value.body["error"]["message"]


def followed(body: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    results = [{"type": "tool_result", "tool_use_id": b["id"], "content": RESULT}
               for b in reply["content"] if b["type"] == "tool_use"]
    return {**body, "messages": [*body["messages"], {"role": "assistant", "content": reply["content"]},
                                 {"role": "user", "content": results}]}


def history(client: anthropic.Anthropic, turns: int) -> dict[str, Any]:
    """The request after ``turns`` replies, each with one tool call answered (TodoWrite, LS, Read, ...)."""
    body = init_body()
    for _ in range(turns):
        body = followed(body, send(client, body))
    return body


def total_input(usage: dict[str, Any]) -> int:
    return usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]


def results_read(request: ModelRequest) -> list[Any]:
    return [b["content"] for m in request.messages if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]


# ---- what is refused ----------------------------------------------------------------------------------------


def test_context_management_needs_its_beta_header(client) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.beta.messages.create(**init_body(), context_management={"edits": [CLEAR_OLD]})
    assert caught.value.body["error"]["message"] == "context_management: Extra inputs are not permitted"


@pytest.mark.parametrize("edits, words", [
    ([CLEAR_OLD, {"type": "clear_thinking_20251015"}], "must be listed first"),
    ([{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}}], "keep"),
    ([{"type": "clear_tool_uses_20250919", "keep": {"type": "thinking_turns", "value": 2}}], "keep"),
    ([{"type": "clear_tool_uses_20250919", "trigger": {"type": "messages", "value": 2}}], "trigger"),
    ([{"type": "clear_tool_uses_20250919", "clear_results": True}], "clear_results"),
    ([CLEAR_OLD, CLEAR_OLD], "once"),
    ([{"type": "compact_20260112"}], "compact_20260112"),
])
def test_edits_the_docs_do_not_take_are_refused(client, edits, words) -> None:
    assert words in refused(client, init_body(), edits)


# ---- clearing tool results ----------------------------------------------------------------------------------


def test_the_oldest_results_are_cleared_and_reported_and_billed_no_more(client, model) -> None:
    body = history(client, 3)
    whole = send(client, body)
    edited = send(client, body, [CLEAR_OLD])
    [applied] = edited["context_management"]["applied_edits"]
    assert applied["type"] == "clear_tool_uses_20250919" and applied["cleared_tool_uses"] == 2
    assert applied["cleared_input_tokens"] > 200
    assert total_input(whole["usage"]) - total_input(edited["usage"]) == applied["cleared_input_tokens"]
    # The model read placeholders for the two oldest results and the newest one whole.
    assert results_read(model.read[-1]) == [PLACEHOLDER, PLACEHOLDER, RESULT]


def test_a_trigger_not_reached_clears_nothing_and_the_list_is_empty(client, model) -> None:
    body = history(client, 3)
    default = send(client, body, [{"type": "clear_tool_uses_20250919"}])  # 100,000 input tokens
    assert default["context_management"] == {"applied_edits": []}
    assert PLACEHOLDER not in results_read(model.read[-1])


def test_excluded_tools_are_kept_and_clear_at_least_can_hold_the_edit_back(client) -> None:
    body = history(client, 3)  # tool uses: TodoWrite, LS, Read
    kept_todo = send(client, body, [{**CLEAR_OLD, "exclude_tools": ["TodoWrite"]}])
    assert kept_todo["context_management"]["applied_edits"][0]["cleared_tool_uses"] == 1
    held = send(client, body, [{**CLEAR_OLD, "clear_at_least": {"type": "input_tokens", "value": 1_000_000}}])
    assert held["context_management"]["applied_edits"] == []  # "the strategy will not be applied"


def test_clear_tool_inputs_clears_the_calls_too(client, model) -> None:
    body = history(client, 3)
    send(client, body, [{**CLEAR_OLD, "clear_tool_inputs": True}])
    uses = [b for m in model.read[-1].messages if m["role"] == "assistant" for b in m["content"]
            if b.get("type") == "tool_use"]
    assert [bool(u["input"]) for u in uses] == [False, False, True]


def test_a_cleared_request_reads_the_cache_up_to_its_first_cleared_piece(client) -> None:
    body = copy.deepcopy(history(client, 3))  # u0 a1 u1 a2 u2 a3 u3; CLEAR_OLD clears the results in u1, u2
    body["messages"][1]["content"][-1]["cache_control"] = EPHEMERAL  # a1's tool call, just before u1's result
    before_cleared = send(client, body)["usage"]
    prefix = before_cleared["cache_read_input_tokens"] + before_cleared["cache_creation_input_tokens"]
    body["messages"][-1]["content"][-1]["cache_control"] = EPHEMERAL
    whole = send(client, body)["usage"]  # the unedited prompt, cached to its end
    assert whole["cache_read_input_tokens"] == prefix and whole["cache_creation_input_tokens"] > 0
    assert send(client, body)["usage"]["cache_read_input_tokens"] == total_input(whole) - whole["input_tokens"]
    edited = send(client, body, [CLEAR_OLD])["usage"]
    # The cleared result changes the key from its piece on: the read stops where the clearing starts.
    assert edited["cache_read_input_tokens"] == prefix and edited["cache_creation_input_tokens"] > 0
    again = send(client, body, [CLEAR_OLD])["usage"]  # the same edit again reads what the first one wrote
    assert again["cache_read_input_tokens"] == total_input(edited) - edited["input_tokens"]


def test_thinking_stays_valid_under_clear_tool_uses(client, running) -> None:
    body = history(client, 3)
    reply = send(client, body, [CLEAR_OLD])
    send(client, followed(body, reply), [CLEAR_OLD])  # the client's history, unchanged, reply appended
    thinking = stats(running.url)["thinking"]
    assert thinking["refused"] == 0 and thinking["sent_back"] == thinking["valid"] >= 7


# ---- clearing thinking --------------------------------------------------------------------------------------


def test_clear_thinking_keeps_the_last_turns_and_bills_the_cleared_ones_no_more(client, model, running) -> None:
    body = history(client, 3)  # three assistant turns with thinking
    whole = send(client, body)
    keep_one = [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]
    edited = send(client, body, keep_one)
    [applied] = edited["context_management"]["applied_edits"]
    assert applied["type"] == "clear_thinking_20251015" and applied["cleared_thinking_turns"] == 2
    assert total_input(whole["usage"]) - total_input(edited["usage"]) == applied["cleared_input_tokens"] > 0
    kinds = [[b["type"] for b in m["content"]] for m in model.read[-1].messages if m["role"] == "assistant"]
    assert [("thinking" in k) for k in kinds] == [False, False, True]
    # The prefix check ran on the messages as sent: every block sent back was valid.
    thinking = stats(running.url)["thinking"]
    assert thinking["refused"] == 0 and thinking["sent_back"] == thinking["valid"]
    assert send(client, body, [{"type": "clear_thinking_20251015", "keep": "all"}])["context_management"] == \
        {"applied_edits": []}


def test_both_strategies_report_in_their_order_and_count_tokens_says_both_counts(client) -> None:
    body = history(client, 3)
    both = [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}, CLEAR_OLD]
    applied = send(client, body, both)["context_management"]["applied_edits"]
    assert [a["type"] for a in applied] == ["clear_thinking_20251015", "clear_tool_uses_20250919"]
    counted = {k: v for k, v in body.items() if k != "max_tokens"}
    count = client.beta.messages.count_tokens(**counted, context_management={"edits": both}, betas=[EDITING_BETA])
    assert count.context_management.original_input_tokens - count.input_tokens == \
        sum(a["cleared_input_tokens"] for a in applied)

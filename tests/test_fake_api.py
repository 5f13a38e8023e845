"""``baton fake-api`` through the real SDK over real HTTP on 127.0.0.1: the catalogue, each 400 rule,
count_tokens, prompt-cache accounting and each model fault (docs/fake-api.md)."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from datetime import datetime, timezone

import anthropic
import pytest
from typer.testing import CliRunner

from agents.anthropic_model import AnthropicModel
from agents.models import ModelError, PromptTooLong
from context.messages import TextBlock, ThinkingBlock, ToolUseBlock
from tests.fake_api_support import (
    EPHEMERAL,
    KEY,
    free_port,
    http,
    init_body,
    init_request,
    queue_fault,
    sdk_client,
    stats,
)
from workers.cli import cli
from workers.fake_api.cache import PromptCache
from workers.fake_api.catalogue import DEFAULT_MODELS, Catalogue, ModelEntry
from workers.fake_api.command import fault_order
from workers.fake_api.counting import Piece
from workers.fake_api.faults import FaultOrder
from workers.fake_api.server import FakeApi, Running, start


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(clock: Clock) -> Iterator[Running]:
    tiny = ModelEntry(id="claude-tiny", display_name="Tiny", created_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                      max_input_tokens=500, max_tokens=1000)
    running = start(FakeApi(catalogue=Catalogue([*DEFAULT_MODELS, tiny]), cache=PromptCache(clock), hang_s=5.0))
    yield running
    running.stop()


@pytest.fixture
def client(server: Running) -> anthropic.Anthropic:
    return sdk_client(server.url)


def model(server: Running, **kwargs) -> AnthropicModel:
    return AnthropicModel(api_key=KEY, base_url=server.url, sleep=lambda s: None, **kwargs)


# ---- the catalogue -----------------------------------------------------------------------------------


def test_the_catalogue_lists_current_and_deprecated_models_newest_first(client):
    listed = list(client.models.list())  # the SDK follows the pages itself
    ids = [m.id for m in listed]
    assert ids[:3] == ["claude-haiku-5-5", "claude-sonnet-5-5", "claude-opus-5-5"]
    assert "claude-opus-4-1" not in ids  # retired: only when asked for
    assert [m.id for m in client.models.list(lifecycle=["retired"])] == ["claude-opus-4-1"]
    newest = {m.line: m.id for m in reversed(listed) if m.lifecycle == "active"}
    assert newest["opus"] == "claude-opus-5-5" and newest["sonnet"] == "claude-sonnet-5-5"
    assert all(m.max_input_tokens == 1_000_000 for m in listed if m.id in ("claude-opus-5-5", "claude-sonnet-4-6"))


def test_models_page_and_retrieve_like_the_api(client):
    page = client.models.list(limit=2)
    assert [m.id for m in page.data] == ["claude-haiku-5-5", "claude-sonnet-5-5"] and page.has_more
    following = page.get_next_page()
    assert following.first_id == "claude-opus-5-5"
    back = client.models.list(limit=2, before_id="claude-opus-5-5")
    assert [m.id for m in back.data] == ["claude-haiku-5-5", "claude-sonnet-5-5"] and not back.has_more
    old = client.models.retrieve("claude-sonnet-4-5")
    assert (old.lifecycle, old.max_input_tokens, old.line) == ("deprecated", 200_000, "sonnet")
    assert old.retires_at.date().isoformat() == "2026-11-30" and old.deprecated_at is not None
    assert client.models.retrieve("claude-opus-4-1").lifecycle == "retired"
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("claude-nonesuch")
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        client.models.list(limit=0)


def test_a_catalogue_file_replaces_the_table(tmp_path):
    path = tmp_path / "catalogue.json"
    path.write_text(json.dumps([DEFAULT_MODELS[0].api()]))
    assert [m.id for m in Catalogue.from_file(path).models] == ["claude-haiku-5-5"]
    path.write_text(json.dumps([{"id": "x"}]))
    result = baton("fake-api", "--port", str(free_port()), "--catalogue", str(path))
    assert result.exit_code == 2 and "display_name" in result.output


def baton(*args: str):
    # The CLI exports BATON_SCENARIOS_DIR; given as None, the runner puts it back as it was.
    return CliRunner().invoke(cli, list(args), env={"BATON_SCENARIOS_DIR": None})


def test_the_command_checks_its_options():
    assert fault_order("refusal:2") == FaultOrder(fault="refusal", count=2)
    result = baton("fake-api", "--port", "1", "--fault", "lightning")
    assert result.exit_code == 2 and "unknown fault 'lightning'" in result.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = baton("fake-api", "--port", str(taken.getsockname()[1]))
    assert result.exit_code == 2 and "cannot listen on 127.0.0.1" in result.output


# ---- a message ---------------------------------------------------------------------------------------


def test_a_message_is_the_simulated_models_answer_in_the_apis_shape(client, server):
    message = client.messages.create(**init_body())
    assert message.type == "message" and message.role == "assistant" and message.model == "claude-opus-5-5"
    # The 5.5 models think: a signed thinking block first, empty at the default display (omitted).
    assert message.content[0].type == "thinking" and message.content[0].thinking == ""
    assert message.content[0].signature
    assert message.content[1].text.startswith("[simulated]")
    assert message.stop_reason == "tool_use" and message.content[-1].type == "tool_use"
    assert message.usage.cache_creation_input_tokens > 0 and message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0 and message.stop_sequence is None


def test_baton_s_model_gets_the_same_answer_over_http(server):
    response = model(server).create(init_request())
    assert isinstance(response.content[0], ThinkingBlock) and isinstance(response.content[1], TextBlock)
    assert isinstance(response.content[-1], ToolUseBlock)
    assert response.stop_reason == "tool_use" and response.usage.total_input > 0


# ---- the rules: each is a 400 (or 401/404) in the API's error shape ------------------------------------


def _with(**changes):
    body = init_body()
    body.update(changes)
    return body


def _five_breakpoints():
    body = init_body()
    body["tools"] = [{**tool, "cache_control": EPHEMERAL} for tool in body["tools"][:4]]
    return body


def _unanswered_tool_call():
    body = init_body()
    call = {"type": "tool_use", "id": "toolu_1", "name": "LS", "input": {"path": "."}}
    body["messages"] += [{"role": "assistant", "content": [call]}, {"role": "user", "content": "go on"}]
    return body


@pytest.mark.parametrize("body, status, error_type, words", [
    (_with(model="claude-nonesuch"), 404, "not_found_error", "claude-nonesuch"),
    (_with(model="claude-opus-4-1"), 400, "invalid_request_error", "retired"),
    (_with(temperature=0.0), 400, "invalid_request_error", "temperature: sampling parameters"),
    (_with(top_p=0.9), 400, "invalid_request_error", "top_p"),
    (_with(top_k=5), 400, "invalid_request_error", "top_k"),
    (_with(max_tokens=128_001), 400, "invalid_request_error", "max_tokens: 128001 > 128000"),
    (_five_breakpoints(), 400, "invalid_request_error", "A maximum of 4 blocks with cache_control"),
    (_unanswered_tool_call(), 400, "invalid_request_error", "messages.2: tool_use ids ['toolu_1']"),
    (_with(model="claude-tiny", max_tokens=100), 400, "invalid_request_error", "prompt is too long: "),
    (_with(messages=[{"role": "user", "content": [{"type": "nonesuch"}]}]), 400, "invalid_request_error",
     "messages.0.content"),
    (_with(stream=True), 400, "invalid_request_error", "non-streaming"),
])
def test_each_rule_is_an_api_error(server, body, status, error_type, words):
    got, answer = http(f"{server.url}/v1/messages", "POST", body,
                       {"authorization": f"Bearer {KEY}", "anthropic-version": "2026-10-21"})
    assert (got, answer["type"], answer["error"]["type"]) == (status, "error", error_type)
    assert words in answer["error"]["message"]
    assert stats(server.url)["errors"] == {f"{status} {error_type}": 1}


def test_the_sdk_sees_the_rules_as_its_typed_errors(client, server):
    with pytest.raises(anthropic.BadRequestError, match="sampling parameters"):
        client.messages.create(**init_body(), extra_body={"temperature": 1.0})
    with pytest.raises(PromptTooLong, match=r"prompt is too long: \d+ tokens > 500 maximum"):
        model(server).create(init_request(model="claude-tiny", max_tokens=100))
    with pytest.raises(ModelError, match="404") as raised:
        model(server).create(init_request(model="claude-nonesuch"))
    assert not isinstance(raised.value, PromptTooLong)


def test_a_key_and_an_api_version_are_required_and_the_key_never_comes_back(server, caplog):
    caplog.set_level(logging.DEBUG)
    url = f"{server.url}/v1/messages"
    status, answer = http(url, "POST", init_body(), {"anthropic-version": "2026-10-21"})
    assert (status, answer["error"]["type"]) == (401, "authentication_error")
    status, answer = http(url, "POST", _with(model="claude-nonesuch"), {"x-api-key": KEY})
    assert status == 400 and "anthropic-version" in answer["error"]["message"]
    status, answer = http(url, "POST", _with(model="claude-nonesuch"),
                          {"x-api-key": KEY, "anthropic-version": "2026-10-21"})
    assert status == 404 and KEY not in json.dumps(answer)
    assert KEY not in caplog.text and KEY not in json.dumps(stats(server.url))


# ---- count_tokens and the prompt cache -----------------------------------------------------------------


def test_count_tokens_is_the_count_usage_reports(client):
    body = init_body()
    counted = client.messages.count_tokens(**{k: v for k, v in body.items() if k != "max_tokens"}).input_tokens
    usage = client.messages.create(**body).usage
    assert counted == usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens


def test_a_prefix_seen_within_five_minutes_is_read_and_stats_agree(client, server, clock):
    first = client.messages.create(**init_body()).usage
    second = client.messages.create(**init_body()).usage
    assert first.cache_read_input_tokens == 0 and first.cache_creation_input_tokens > 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0 and second.input_tokens == first.input_tokens
    clock.now += 301  # past the 5-minute TTL: written again
    third = client.messages.create(**init_body()).usage
    assert third.cache_creation_input_tokens == first.cache_creation_input_tokens
    tokens = stats(server.url)["tokens"]
    assert tokens["cache_read"] == second.cache_read_input_tokens
    assert tokens["cache_write"] == 2 * first.cache_creation_input_tokens
    assert tokens["input"] == 3 * first.input_tokens
    assert tokens["output"] == first.output_tokens + second.output_tokens + third.output_tokens


def _pieces(*sizes: int, marks: tuple[int, ...] = ()) -> list[Piece]:
    return [Piece(f"p{i}", size, 300.0 if i in marks else None) for i, size in enumerate(sizes)]


def test_a_moved_breakpoint_reads_the_longest_cached_prefix_within_twenty_blocks(clock):
    cache = PromptCache(clock)
    first = cache.account(_pieces(100, 10, 20, marks=(0, 2)))
    assert (first.read, first.written, first.plain) == (0, 130, 0)
    grown = cache.account(_pieces(100, 10, 20, 30, 40, 5, marks=(0, 4)))
    assert (grown.read, grown.written, grown.plain) == (130, 70, 5)
    cache = PromptCache(clock)
    cache.account(_pieces(100, 1, 1, marks=(0, 2)))  # caches p0 and p0..p2
    far = cache.account(_pieces(100, *[1] * 30, marks=(0, 30)))
    assert (far.read, far.written) == (100, 30)  # p0..p2 ends 28 blocks before the breakpoint: not looked at
    near = cache.account(_pieces(100, *[1] * 22, marks=(0, 22)))
    assert (near.read, near.written) == (102, 20)  # 20 blocks back: found
    clock.now += 299
    assert cache.account(_pieces(100, marks=(0,))).read == 100  # a read refreshes the entry...
    clock.now += 299
    assert cache.account(_pieces(100, marks=(0,))).read == 100  # ...so it lives 5 minutes from then


# ---- model faults --------------------------------------------------------------------------------------


def test_max_tokens_cut_stops_inside_a_tool_call(server):
    whole = model(server).create(init_request())
    queue_fault(server.url, fault="max_tokens_cut")
    cut = model(server).create(init_request())
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2048
    assert isinstance(cut.content[-1], ToolUseBlock) and cut.content[-1].id == whole.content[-1].id
    assert len(json.dumps(cut.content[-1].input)) < len(json.dumps(whole.content[-1].input))
    assert model(server).create(init_request()).stop_reason == "tool_use"  # count 1: served once
    assert stats(server.url)["faults"] == {"max_tokens_cut": 1}


def test_refusal_and_context_window_exceeded(server):
    queue_fault(server.url, fault="refusal")
    queue_fault(server.url, fault="context_window_exceeded")
    refused = model(server).create(init_request())
    assert refused.stop_reason == "refusal" and refused.content == []
    stopped = model(server).create(init_request())
    assert stopped.stop_reason == "model_context_window_exceeded"
    assert stats(server.url)["stop_reasons"] == {"refusal": 1, "model_context_window_exceeded": 1}


def test_a_hang_times_the_client_out_and_its_retry_gets_the_answer(server):
    # The retry's answer gets the same timeout: 0.8 s leaves a loaded machine room to answer it (0.2 s did not).
    queue_fault(server.url, fault="hang", hang_s=2.0)
    response = model(server, max_retries=1).create(init_request(timeout_s=0.8))
    assert response.stop_reason == "tool_use"
    # Two requests: the client gave the hung one up after 0.2 s and retried (one that waited the hang out,
    # which then answers, sends only one). No wall-clock bound: the retry's back-off is random and the
    # machine is shared.
    assert stats(server.url)["requests"]["POST /v1/messages"] == 2


def test_a_fault_waits_for_a_request_that_matches(server):
    pending = queue_fault(server.url, fault="refusal", count=2, match="Scenario: some_other_desk")["pending"]
    assert pending == [{"fault": "refusal", "count": 2, "match": "Scenario: some_other_desk", "left": 2}]
    assert model(server).create(init_request()).stop_reason == "tool_use"
    assert http(f"{server.url}/faults", "DELETE")[1] == {"pending": []}
    status, answer = http(f"{server.url}/faults", "POST", {"fault": "lightning"})
    assert status == 400 and answer["error"]["message"].startswith("fault:")

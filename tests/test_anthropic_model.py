"""AnthropicModel against an HTTP-level mock of the Messages API.

The real SDK builds and sends every request; only the transport is fake
(``httpx2.MockTransport``: SDK 2.x runs on httpx2). Bodies follow the shapes
documented for the Messages API, errors included.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import time
from typing import Any

import httpx2
import pytest

from agents.anthropic_model import AnthropicModel, MissingApiKey, count_cache_markers
from agents.models import (
    BadResponse,
    ModelError,
    ModelRequest,
    ModelUnavailable,
    PromptTooLong,
)
from context.messages import RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock

KEY = "sk-ant-api03-TESTKEY_x9Qm2vLr7Zp4Wc8Hn1Jd6Tf3Ys5Bk0Gu-AAAA"
EPHEMERAL = {"type": "ephemeral"}

TEXT_BODY: dict[str, Any] = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-opus-4-5-20251101",
    "content": [{"type": "text", "text": "Hello! The scenario design is ready for review."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 2095,
        "cache_creation_input_tokens": 1800,
        "cache_read_input_tokens": 14200,
        "cache_creation": {"ephemeral_5m_input_tokens": 1800, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 503,
        "service_tier": "standard",
    },
}

TOOL_USE_BODY: dict[str, Any] = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "text", "text": "I'll list the scenario folder first."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "LS",
            "input": {"path": "tools", "ignore": ["__pycache__"]},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 472,
        "cache_creation_input_tokens": None,
        "cache_read_input_tokens": None,
        "output_tokens": 91,
        "service_tier": "standard",
    },
}

JSON_HEADERS = {"content-type": "application/json", "request-id": "req_011CSHoEeqs5C35K2UUqR7Fy"}


def ok(body: dict[str, Any]) -> httpx2.Response:
    return httpx2.Response(200, json=body, headers=JSON_HEADERS)


def api_error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}
    return httpx2.Response(status, json=body, headers={**JSON_HEADERS, **(headers or {})})


RATE_LIMITED = (
    "rate_limit_error",
    "This request would exceed the rate limit for your organization of 30,000 input tokens per minute.",
)
OVERLOADED = ("overloaded_error", "Overloaded")
INTERNAL = ("api_error", "Internal server error")
TOO_LONG = "prompt is too long: 210000 tokens > 200000 maximum"


class FakeApi:
    """A scripted Messages endpoint: each call takes the next reply (the last one repeats)."""

    def __init__(self, *replies: httpx2.Response | Exception) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def body(self, i: int = -1) -> dict[str, Any]:
        return json.loads(self.requests[i].content)


class Rng(random.Random):
    """Records every jitter draw and returns a fixed factor, so delays are exact."""

    def __init__(self, factor: float = 0.75) -> None:
        super().__init__(0)
        self.factor = factor
        self.draws: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.draws.append((a, b))
        return self.factor


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    # The SDK reads these; a developer's shell must not steer the tests.
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)


def make(api: FakeApi, sleeps: list[float] | None = None, **kwargs: Any) -> AnthropicModel:
    client = httpx2.Client(transport=httpx2.MockTransport(api))
    recorder = sleeps.append if sleeps is not None else _no_sleep
    return AnthropicModel(api_key=KEY, http_client=client, sleep=recorder, rng=kwargs.pop("rng", Rng()), **kwargs)


def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"unexpected sleep({seconds})")


def tool(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"The {name} tool.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }


def request(**overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": "claude-opus-4-5",
        "max_tokens": 8000,
        "system": [{"type": "text", "text": "You design evaluation scenarios.", "cache_control": EPHEMERAL}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Design a refund-policy scenario.", "cache_control": EPHEMERAL}],
            },
        ],
        "tools": [tool("LS"), tool("Read")],
    }
    return ModelRequest(**(fields | overrides))


def marked(n: int) -> list[dict[str, Any]]:
    """n user/assistant exchanges, each user message carrying a cache breakpoint."""
    messages: list[dict[str, Any]] = []
    for i in range(n):
        messages.append({"role": "user", "content": [{"type": "text", "text": f"q{i}", "cache_control": EPHEMERAL}]})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"a{i}"}]})
    return messages + [{"role": "user", "content": "go on"}]


def sent_markers(body: dict[str, Any]) -> int:
    return json.dumps(body).count('"cache_control"')


# -- responses ------------------------------------------------------------


def test_text_response_is_converted():
    api = FakeApi(ok(TEXT_BODY))
    response = make(api).create(request())
    assert response.id == "msg_01XFDUDYJgAACzvnptvVoYEL"
    assert response.model == "claude-opus-4-5-20251101"
    assert response.stop_reason == "end_turn"
    assert response.content == [TextBlock(text="Hello! The scenario design is ready for review.")]
    assert response.simulated is False
    assert response.message().role == "assistant"
    assert len(api.requests) == 1
    assert api.requests[0].url.path == "/v1/messages"


def test_tool_use_response_keeps_the_call_and_its_input():
    response = make(FakeApi(ok(TOOL_USE_BODY))).create(request())
    assert response.stop_reason == "tool_use"
    text, call = response.content
    assert isinstance(text, TextBlock)
    assert call == ToolUseBlock(
        id="toolu_01A09q90qw90lq917835lq9", name="LS", input={"path": "tools", "ignore": ["__pycache__"]}
    )


def test_usage_maps_cache_fields_and_none_is_zero():
    usage = make(FakeApi(ok(TEXT_BODY))).create(request()).usage
    assert (usage.input_tokens, usage.output_tokens) == (2095, 503)
    assert usage.cache_creation_input_tokens == 1800
    assert usage.cache_read_input_tokens == 14200
    assert usage.total_input == 2095 + 1800 + 14200
    nulls = make(FakeApi(ok(TOOL_USE_BODY))).create(request()).usage
    assert (nulls.cache_creation_input_tokens, nulls.cache_read_input_tokens) == (0, 0)


def test_unknown_blocks_are_skipped_and_text_and_thinking_kept():
    body = TEXT_BODY | {
        "content": [
            {"type": "thinking", "thinking": "The user wants a policy check.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"},
            {
                "type": "server_tool_use",
                "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
                "name": "web_search",
                "input": {"query": "refund policy"},
            },
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "content": []},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
            {
                "type": "text",
                "text": "Found it.",
                "citations": [{"type": "web_search_result_location", "url": "https://example.com"}],
            },
        ]
    }
    content = make(FakeApi(ok(body))).create(request()).content
    # Both kinds of thinking are kept, in order: dropping one would break every later block's prefix.
    assert content == [
        ThinkingBlock(thinking="The user wants a policy check.", signature="EqQBCgIYAhIM1gbcDa9GJwZA"),
        RedactedThinkingBlock(data="EmwKAhgBEgy3va3pzix/LafPsn4a"),
        TextBlock(text="Found it."),
    ]


@pytest.mark.parametrize(
    "reply, words",
    [
        (
            httpx2.Response(
                200, content=b"<html><body>502 Bad Gateway</body></html>", headers={"content-type": "text/html"}
            ),
            "not valid JSON",
        ),
        (
            httpx2.Response(
                200, content=b'{"id": "msg_01", "type": "mess', headers={"content-type": "application/json"}
            ),
            "not valid JSON",
        ),
        (httpx2.Response(200, content=b"", headers={"content-type": "application/json"}), "not valid JSON"),
        (ok({k: v for k, v in TEXT_BODY.items() if k != "content"}), "missing 'content'"),
        (ok(TEXT_BODY | {"content": "Hello"}), "'content' of type str"),
        (httpx2.Response(200, json=[TEXT_BODY], headers=JSON_HEADERS), "JSON list"),
        (ok(TEXT_BODY | {"type": "error"}), "type 'error'"),
        (
            ok(TEXT_BODY | {"content": [{"type": "tool_use", "name": "LS", "input": {}}]}),
            r"block 0 \(tool_use\) is invalid: id",
        ),
        (ok(TEXT_BODY | {"usage": "lots"}), "'usage' of type str"),
    ],
)
def test_a_body_that_is_not_a_message_is_a_bad_response(reply, words):
    api = FakeApi(reply)
    with pytest.raises(BadResponse, match=words):
        make(api).create(request())
    assert len(api.requests) == 1  # not retried: the caller decides


# -- the request the SDK sent ---------------------------------------------


def test_request_body_carries_cache_markers_and_a_tool_breakpoint():
    api = FakeApi(ok(TEXT_BODY))
    req = request()
    make(api).create(req)
    body = api.body()
    assert body["model"] == "claude-opus-4-5"
    assert body["max_tokens"] == 8000
    assert body["system"] == [{"type": "text", "text": "You design evaluation scenarios.", "cache_control": EPHEMERAL}]
    assert body["messages"] == req.messages
    assert [t["name"] for t in body["tools"]] == ["LS", "Read"]
    assert body["tools"][-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in body["tools"][0]
    assert sent_markers(body) == 3  # system, one message, the last tool: within the 4 allowed
    assert "temperature" not in body
    assert "cache_control" not in req.tools[-1]  # the frozen request was not mutated


def test_never_a_fifth_cache_marker():
    api = FakeApi(ok(TEXT_BODY))
    req = request(messages=marked(3))
    assert count_cache_markers(req) == 4
    make(api).create(req)
    body = api.body()
    assert sent_markers(body) == 4
    assert all("cache_control" not in t for t in body["tools"])


def test_a_marked_last_tool_is_left_as_it_is():
    tools = [tool("LS"), tool("Read") | {"cache_control": EPHEMERAL}]
    api = FakeApi(ok(TEXT_BODY))
    make(api).create(request(tools=tools))
    assert api.body()["tools"] == tools
    assert sent_markers(api.body()) == 3


def test_markers_inside_tool_results_are_counted_but_not_schema_properties():
    schema_tool = tool("Config") | {
        "input_schema": {"type": "object", "properties": {"cache_control": {"type": "string"}}}
    }
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "ok", "cache_control": EPHEMERAL}],
    }
    req = request(
        messages=marked(2)[:-1] + [{"role": "user", "content": [result]}],
        tools=[schema_tool],
    )
    assert count_cache_markers(req) == 4  # system + 2 messages + the nested result part
    api = FakeApi(ok(TEXT_BODY))
    make(api).create(req)
    assert "cache_control" not in api.body()["tools"][0]


def test_no_tools_sends_no_tools_and_a_string_system_is_kept():
    api = FakeApi(ok(TEXT_BODY))
    make(api).create(request(tools=[], system="Be brief.", messages=[{"role": "user", "content": "hi"}]))
    body = api.body()
    assert "tools" not in body
    assert body["system"] == "Be brief."


def test_temperature_is_not_sent_because_the_api_version_rejects_it(caplog):
    # SDK 2.x sends anthropic-version 2026-10-21, which answers 400 to any
    # temperature (even 1.0), and its create() has no temperature argument.
    api = FakeApi(ok(TEXT_BODY))
    model = make(api)
    with caplog.at_level(logging.INFO, logger="agents.anthropic_model"):
        model.create(request(temperature=0.0, purpose="summary"))
        model.create(request(temperature=0.0, purpose="summary"))
    assert all("temperature" not in json.loads(r.content) for r in api.requests)
    assert sum("temperature" in r.getMessage() for r in caplog.records) == 1  # said once, not per call


def test_timeout_is_passed_per_request():
    api = FakeApi(ok(TEXT_BODY))
    make(api).create(request(timeout_s=42.0))
    assert api.requests[0].extensions["timeout"]["read"] == 42.0


# SDK 2.12 flags claude-sonnet-4-5 (the Execute model) as deprecated, end of life 2026-11-30.
@pytest.mark.filterwarnings("ignore:The model 'claude-sonnet-4-5' is deprecated:DeprecationWarning")
def test_betas_go_in_the_anthropic_beta_header_only_when_given():
    api = FakeApi(ok(TEXT_BODY))
    model = make(api)
    model.create(request(model="claude-sonnet-4-5", betas=["context-1m-2025-08-07"]))
    model.create(request(model="claude-sonnet-4-5"))
    with_beta, without = api.requests
    assert "context-1m-2025-08-07" in with_beta.headers["anthropic-beta"].split(",")
    assert "anthropic-beta" not in without.headers
    assert "betas" not in api.body(0)  # a header, not a body field
    assert with_beta.url.path == without.url.path == "/v1/messages"


def test_several_betas_are_comma_joined():
    api = FakeApi(ok(TEXT_BODY))
    make(api).create(request(betas=["context-1m-2025-08-07", "interleaved-thinking-2025-05-14"]))
    assert api.requests[0].headers["anthropic-beta"] == "context-1m-2025-08-07,interleaved-thinking-2025-05-14"


# -- the API key ------------------------------------------------------------


def test_the_key_is_sent_but_never_shown():
    api = FakeApi(ok(TEXT_BODY))
    model = make(api)
    model.create(request())
    headers = api.requests[0].headers
    # SDK 2.12 sends the key as a bearer token; older SDKs used x-api-key.
    assert headers.get("x-api-key") == KEY or headers.get("authorization") == f"Bearer {KEY}"
    assert "anthropic-version" in headers
    assert KEY not in repr(model) and KEY not in str(model)


@pytest.mark.parametrize(
    "reply",
    [
        api_error(401, "authentication_error", "invalid x-api-key"),
        api_error(403, "permission_error", f"key {KEY} may not use this model"),  # an echo, scrubbed
        api_error(400, "invalid_request_error", f"bad header value: Bearer {KEY}"),
    ],
)
def test_errors_never_contain_the_key(reply):
    with pytest.raises(ModelError) as err:
        make(FakeApi(reply)).create(request())
    assert KEY not in str(err.value) and KEY not in repr(err.value)
    assert err.value.__cause__ is None and err.value.__context__ is None  # no SDK error (with the header) chained


PREFIX_MISMATCH = (
    "messages.1.content.0: Invalid `signature` in `thinking` block. The block is bound to a different conversation. "
    "Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to \"drop_block\"."
)


def test_a_short_key_does_not_corrupt_error_texts():
    # A test's or a placeholder's key ("x") used to be replaced inside every word:
    # "prefi<REDACTED>_mismatch_behavior". Only the key standing alone is scrubbed.
    api = FakeApi(api_error(400, "invalid_request_error", f"{PREFIX_MISMATCH} Your key: x."))
    client = httpx2.Client(transport=httpx2.MockTransport(api))
    model = AnthropicModel(api_key="x", http_client=client, sleep=_no_sleep, rng=Rng())
    with pytest.raises(ModelError) as err:
        model.create(request())
    assert PREFIX_MISMATCH in str(err.value)
    assert "Your key: <REDACTED>." in str(err.value)


def test_key_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    api = FakeApi(ok(TEXT_BODY))
    model = AnthropicModel(http_client=httpx2.Client(transport=httpx2.MockTransport(api)))
    model.create(request())
    assert KEY in (api.requests[0].headers.get("authorization", "") + api.requests[0].headers.get("x-api-key", ""))
    assert model.label == "anthropic"


def test_missing_key_says_what_to_do():
    with pytest.raises(MissingApiKey) as err:
        AnthropicModel()
    assert "ANTHROPIC_API_KEY" in str(err.value)
    assert "simulated" in str(err.value)
    assert isinstance(err.value, ModelError)


def test_an_httpx_client_is_refused_because_the_sdk_uses_httpx2():
    import httpx

    with pytest.raises(TypeError, match="httpx2"):
        AnthropicModel(api_key=KEY, http_client=httpx.Client())  # type: ignore[arg-type]


# -- retries ----------------------------------------------------------------


def test_429_honours_retry_after_seconds():
    api = FakeApi(api_error(429, *RATE_LIMITED, headers={"retry-after": "2"}), ok(TEXT_BODY))
    sleeps: list[float] = []
    response = make(api, sleeps).create(request())
    assert response.id == TEXT_BODY["id"]
    assert sleeps == [2.0]
    assert len(api.requests) == 2


def test_retry_after_as_http_date_ms_or_unreadable_and_waited_in_full_over_the_backoff_cap():
    past = email.utils.formatdate(time.time() - 3600, usegmt=True)
    api = FakeApi(
        api_error(429, *RATE_LIMITED, headers={"retry-after": "900"}),  # above max_delay_s: still waited, whole
        api_error(429, *RATE_LIMITED, headers={"retry-after": past}),
        api_error(429, *RATE_LIMITED, headers={"retry-after-ms": "1500"}),
        api_error(429, *RATE_LIMITED, headers={"retry-after": "soon"}),  # unreadable: backoff instead
        ok(TEXT_BODY),
    )
    sleeps: list[float] = []
    make(api, sleeps, max_delay_s=30.0).create(request())
    assert sleeps == [900.0, 0.0, 1.5, 0.75 * 8]  # the backoff (base * 2**3, jittered) stays capped at 30


def test_a_retry_after_date_beyond_the_longest_wait_gives_up_at_once():
    future = email.utils.formatdate(time.time() + 3600, usegmt=True)
    api = FakeApi(api_error(429, *RATE_LIMITED, headers={"retry-after": future}), ok(TEXT_BODY))
    with pytest.raises(ModelUnavailable, match=r"asked to wait 3\d\d\ds before retrying \(retry-after\), and a call "
                                               r"without a deadline waits at most 900s") as gave_up:
        make(api, []).create(request())
    assert len(api.requests) == 1 and gave_up.value.attempts == 1


def test_529_overloaded_backs_off_with_growing_jittered_delays():
    rng = Rng(factor=0.75)
    api = FakeApi(api_error(529, *OVERLOADED), api_error(529, *OVERLOADED), ok(TEXT_BODY))
    sleeps: list[float] = []
    make(api, sleeps, rng=rng, base_delay_s=1.0).create(request())
    assert len(api.requests) == 3
    assert sleeps == [0.75, 1.5]  # base * 2**attempt, scaled by the jitter draw
    assert rng.draws == [(0.5, 1.0), (0.5, 1.0)]


def test_real_jitter_stays_within_its_band():
    api = FakeApi(*[api_error(529, *OVERLOADED)] * 4, ok(TEXT_BODY))
    sleeps: list[float] = []
    make(api, sleeps, rng=random.Random(7), base_delay_s=1.0).create(request())
    for attempt, delay in enumerate(sleeps):
        assert 0.5 * 2**attempt <= delay <= 2**attempt


def test_500_until_retries_run_out_is_unavailable():
    api = FakeApi(api_error(500, *INTERNAL))
    sleeps: list[float] = []
    with pytest.raises(ModelUnavailable) as err:
        make(api, sleeps, max_retries=3, base_delay_s=10.0, max_delay_s=25.0).create(request())
    assert len(api.requests) == 4
    assert err.value.attempts == 4
    assert err.value.status == 500
    assert err.value.retryable is True
    assert "after 4 attempt" in str(err.value) and "500" in str(err.value) and "Internal server error" in str(err.value)
    assert sleeps == [7.5, 15.0, 18.75]  # 10, 20, then capped at 25; each times 0.75


def test_a_non_json_5xx_page_is_retried_and_reported():
    page = httpx2.Response(502, content=b"<html>502 Bad Gateway</html>", headers={"content-type": "text/html"})
    with pytest.raises(ModelUnavailable, match="502.*Bad Gateway"):
        make(FakeApi(page), [], max_retries=1).create(request())


def test_timeouts_are_retried_then_unavailable():
    api = FakeApi(httpx2.ReadTimeout("timed out"))
    sleeps: list[float] = []
    with pytest.raises(ModelUnavailable, match="timeout") as err:
        make(api, sleeps, max_retries=2).create(request())
    assert len(api.requests) == 3
    assert len(sleeps) == 2
    assert err.value.status is None


def test_a_timeout_then_success():
    api = FakeApi(httpx2.ReadTimeout("timed out"), ok(TEXT_BODY))
    assert make(api, []).create(request()).id == TEXT_BODY["id"]
    assert len(api.requests) == 2


def test_connection_errors_are_retried():
    api = FakeApi(httpx2.ConnectError("[Errno 111] Connection refused"), ok(TEXT_BODY))
    sleeps: list[float] = []
    make(api, sleeps).create(request())
    assert len(api.requests) == 2 and len(sleeps) == 1


def test_retries_are_logged_without_the_key(caplog):
    api = FakeApi(api_error(429, *RATE_LIMITED, headers={"retry-after": "3"}), ok(TEXT_BODY))
    with caplog.at_level(logging.DEBUG):
        make(api, []).create(request())
    retry = [r for r in caplog.records if r.name == "agents.anthropic_model" and "retrying" in r.getMessage()]
    assert len(retry) == 1
    text = retry[0].getMessage()
    assert "429" in text and "1/6" in text and "3.00s" in text
    assert any(r.name.startswith("anthropic") for r in caplog.records)  # the SDK's debug lines were captured too
    assert all(KEY not in r.getMessage() for r in caplog.records)


# -- no retry ---------------------------------------------------------------


def test_prompt_too_long_is_raised_at_once():
    api = FakeApi(api_error(400, "invalid_request_error", TOO_LONG))
    with pytest.raises(PromptTooLong) as err:
        make(api).create(request())
    assert len(api.requests) == 1
    assert "210000 tokens > 200000" in str(err.value)
    assert err.value.status == 400


def test_prompt_too_long_matches_any_case_and_413_too():
    shouting = FakeApi(api_error(400, "invalid_request_error", "Prompt Is Too Long: 1000001 tokens > 1000000 maximum"))
    with pytest.raises(PromptTooLong):
        make(shouting).create(request())
    too_large = FakeApi(api_error(413, "request_too_large", "Request exceeds the maximum allowed number of bytes."))
    with pytest.raises(PromptTooLong):
        make(too_large).create(request())
    assert len(shouting.requests) == len(too_large.requests) == 1


def test_input_plus_max_tokens_over_the_window_is_also_too_long():
    # The API's wording when the prompt fits but prompt + max_tokens does not.
    message = (
        "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
        "decrease input length or `max_tokens` and try again"
    )
    api = FakeApi(api_error(400, "invalid_request_error", message))
    with pytest.raises(PromptTooLong, match="188240"):
        make(api).create(request())
    assert len(api.requests) == 1


@pytest.mark.parametrize(
    "status, kind, message",
    [
        (400, "invalid_request_error", "messages.1.content.0.tool_use.id: Field required"),
        (401, "authentication_error", "invalid x-api-key"),
        (403, "permission_error", "Your API key does not have permission to use the specified resource."),
        (404, "not_found_error", "model: claude-opus-9"),
        (422, "invalid_request_error", "Unprocessable"),
    ],
)
def test_other_client_errors_are_not_retried(status, kind, message):
    api = FakeApi(api_error(status, kind, message))
    with pytest.raises(ModelError) as err:
        make(api).create(request())
    assert type(err.value) is ModelError
    assert len(api.requests) == 1
    assert message in str(err.value) and str(status) in str(err.value)
    assert err.value.status == status and err.value.error_type == kind


def test_zero_retries_means_one_call():
    api = FakeApi(api_error(529, *OVERLOADED))
    with pytest.raises(ModelUnavailable, match="after 1 attempt.*overloaded_error: Overloaded") as err:
        make(api, max_retries=0).create(request())
    assert len(api.requests) == 1 and err.value.attempts == 1

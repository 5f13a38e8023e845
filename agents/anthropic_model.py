"""The real model: Anthropic's Messages API through the official SDK.

baton does its own retries (the SDK client is built with ``max_retries=0``) so
every retry is logged, testable with an injected ``sleep`` and random source,
and ends in one of the typed errors of ``agents.models``:

- 429, 529, other 5xx, 408, timeouts, connection errors: retried with
  exponential backoff and jitter (or the server's ``retry-after``), then
  ``ModelUnavailable``;
- a server's ``x-should-retry`` wins, as in the SDK: ``true`` retries any error,
  ``false`` makes a retryable one final (``ModelUnavailable`` at once);
- a ``retry-after`` is waited in full, however long, if the call has room for it
  (its deadline, else ``max_retry_after_s``); otherwise ``ModelUnavailable`` at once,
  saying how long the server asked to wait;
- 400 "prompt is too long" and 413: ``PromptTooLong`` at once (compaction fixes it);
- any other 4xx: ``ModelError`` at once (retrying cannot fix it);
- a 200 whose body is not a Messages response: ``BadResponse``.

A request's ``deadline_s`` (a summary's) bounds all its attempts: each one's HTTP timeout
is the time left, and none starts that could not finish in time (``ModelUnavailable``).
``count_tokens`` asks the free count endpoint once: its caller has an estimate.

The API key never appears in ``repr``, logs or error text.

``request.temperature`` is not sent: SDK 2.x has no such argument and the API
version it speaks (``anthropic-version: 2026-10-21``) rejects sampling parameters.

Note on SDK 2.x: it runs on ``httpx2`` (not ``httpx``), so a custom
``http_client`` must be an ``httpx2.Client``; the SDK rejects an ``httpx.Client``.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anthropic
from pydantic import ValidationError

from agents.models import (
    API_KEY_ENV,
    BadResponse,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelUnavailable,
    PromptTooLong,
    ThinkingRefused,
)
from context.messages import CompactionBlock, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock, Usage

if TYPE_CHECKING:  # the SDK's transport; only needed for the type hints
    from collections.abc import Mapping

    import httpx2

log = logging.getLogger(__name__)
E = TypeVar("E", bound=ModelError)

MAX_CACHE_MARKERS = 4  # the API rejects a request with more cache_control breakpoints
EPHEMERAL = {"type": "ephemeral"}
# Without an explicit timeout the SDK refuses non-streaming calls whose max_tokens
# suggest more than 10 minutes of generation; an explicit one skips that guard.
DEFAULT_TIMEOUT_S = 600.0
# Under a deadline, an attempt with less time left than this cannot get an answer (a round
# trip alone takes about this long), so the call gives up instead of starting it.
MIN_ATTEMPT_S = 1.0
COUNT_TIMEOUT_S = 30.0  # the count endpoint answers at once; the step waits no longer for it
RETRYABLE_STATUS = frozenset({408, 429})  # plus every 5xx, 529 "overloaded" included
# Wordings of "the input does not fit": compaction is the cure for all of them.
TOO_LONG_MARKERS = ("prompt is too long", "exceed context limit")
# The prefix check's 400 (and a signature it cannot verify) start their message this way.
THINKING_REFUSED = "Invalid `signature` in `thinking` block"
# Thinking of both kinds is kept exactly as returned: each block is signed over its prefix, and leaving
# one out breaks every later block's prefix (docs/agents.md, "Thinking and the prefix").
BLOCK_TYPES = {"text": TextBlock, "tool_use": ToolUseBlock, "thinking": ThinkingBlock,
               "redacted_thinking": RedactedThinkingBlock, "compaction": CompactionBlock}


class MissingApiKey(ModelError):
    """No API key: the real model cannot be used on this machine."""


# The longest retry-after a call without a deadline (a step) waits for. A step waiting holds a worker thread and
# its agent's lock; rate limits refill within a minute, so a longer ask means an outage or a spending limit, which
# a run resumed later (`baton resume`) gets over better than a worker sleeping. 15 minutes still covers the
# multi-minute waits the API asks for under heavy load, and 5 retries of it (75 minutes) stay well inside the
# broker's 4-hour visibility timeout (workers/app.py), so no other worker takes the step meanwhile.
MAX_RETRY_AFTER_S = 900.0


@dataclass(frozen=True)
class _Failure:
    """One failed attempt, described without the SDK exception (which holds the key)."""

    description: str
    status: int | None = None
    error_type: str | None = None
    request_id: str | None = None
    retry_after: float | None = None


def _new_client(key: str, base_url: str | None, http_client: httpx2.Client | None) -> anthropic.Anthropic:
    # max_retries=0: the SDK must not retry behind our back (unlogged, untestable).
    return anthropic.Anthropic(api_key=key, base_url=base_url, http_client=http_client, max_retries=0)


_clients: dict[tuple[str, str | None], anthropic.Anthropic] = {}
_clients_lock = threading.Lock()


def shared_client(key: str, base_url: str | None) -> anthropic.Anthropic:
    """One SDK client per key and address in a process: a worker serving many steps at once
    (threads) shares its connection pool rather than opening one per agent of every scenario.
    The SDK's client is safe to share between threads (its httpx client is)."""
    with _clients_lock:
        if (key, base_url) not in _clients:
            _clients[(key, base_url)] = _new_client(key, base_url, None)
        return _clients[(key, base_url)]


class AnthropicModel:
    """``Model`` backed by the Anthropic SDK, with logged, injectable retries."""

    label = "anthropic"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx2.Client | None = None,
        max_retries: int = 5,
        base_delay_s: float = 1.0,
        max_delay_s: float = 60.0,
        max_retry_after_s: float = MAX_RETRY_AFTER_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        key = api_key or os.environ.get(API_KEY_ENV)
        if not key:
            raise MissingApiKey(
                f"No Anthropic API key: set {API_KEY_ENV} to use the real model, "
                "or run with the simulated model (offline, deterministic)."
            )
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self._api_key = key
        self._base_url = base_url
        self.max_retries = max_retries
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s  # of baton's own backoff; a server's retry-after is not capped by it
        self.max_retry_after_s = max_retry_after_s
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._temperature_noted = False
        self._client = (
            _new_client(key, base_url, http_client) if http_client is not None else shared_client(key, base_url)
        )

    def __repr__(self) -> str:
        return f"AnthropicModel(base_url={self._base_url!r}, max_retries={self.max_retries})"

    __str__ = __repr__

    def create(self, request: ModelRequest) -> ModelResponse:
        self._note_temperature(request)
        kwargs = call_kwargs(request)
        deadline = None if request.deadline_s is None else self._clock() + request.deadline_s
        attempts, timeout = self.max_retries + 1, kwargs["timeout"]
        failure: _Failure | None = None
        for attempt in range(attempts):
            if deadline is not None:  # this attempt may use the time left, no more
                left = deadline - self._clock()
                if left < MIN_ATTEMPT_S:
                    raise _out_of_time(request, failure, attempt)
                kwargs["timeout"] = min(timeout, left)
            outcome = self._attempt(kwargs, request.betas)
            if isinstance(outcome, bytes):
                return parse_response(outcome)
            failure = outcome
            if attempt + 1 == attempts:
                break
            delay = self._delay(attempt, failure.retry_after)
            # Room to wait: what the deadline leaves for the wait and one more attempt, else the longest wait.
            room = self.max_retry_after_s if deadline is None else deadline - self._clock() - MIN_ATTEMPT_S
            if delay > room:
                raise _no_room(request, failure, attempt + 1, delay, room)
            log.warning(
                "anthropic call failed (%s); attempt %d/%d, retrying in %.2fs",
                failure.description, attempt + 1, attempts, delay,
            )
            self._sleep(delay)
        assert failure is not None  # every attempt failed, at least one ran
        raise _unavailable(failure, attempts)

    def count_tokens(self, request: ModelRequest) -> int:
        """The input tokens ``request`` would cost, counted by the API (system prompt and tools included).

        One attempt: a failure raises the typed error at once (``ModelUnavailable`` when it
        could have been retried) and the caller keeps its estimate.
        """
        kwargs = {k: v for k, v in call_kwargs(request).items() if k != "max_tokens"}
        kwargs["timeout"] = min(kwargs["timeout"], COUNT_TIMEOUT_S)
        try:
            if request.betas:
                raw = self._client.beta.messages.with_raw_response.count_tokens(**kwargs, betas=list(request.betas))
            else:
                raw = self._client.messages.with_raw_response.count_tokens(**kwargs)
            return parse_count(raw.http_response.content)
        except anthropic.AnthropicError as err:
            outcome = self._classify(err)
        # Raised outside the except block: the SDK exception carries the auth header (see _attempt).
        raise outcome if isinstance(outcome, ModelError) else _unavailable(outcome, 1)

    # -- one HTTP attempt -------------------------------------------------

    def _attempt(self, kwargs: dict[str, Any], betas: list[str]) -> bytes | _Failure:
        """Send once: the raw body, or a retryable failure; any other error is raised.

        It is raised outside the ``except`` block so the SDK exception (whose
        request carries the auth header) is not chained onto ours.
        """
        try:
            return self._send(kwargs, betas).http_response.content
        except anthropic.AnthropicError as err:
            outcome = self._classify(err)
        if isinstance(outcome, ModelError):
            raise outcome
        return outcome

    def _send(self, kwargs: dict[str, Any], betas: list[str]) -> Any:
        # Raw response: we parse the JSON ourselves, because the SDK's lenient
        # parsing turns a bad body into a str, a Message with content=None, or a
        # bare JSONDecodeError depending on the content-type.
        if betas:
            # The beta endpoint sends the list as one comma-joined `anthropic-beta` header.
            return self._client.beta.messages.with_raw_response.create(**kwargs, betas=list(betas))
        return self._client.messages.with_raw_response.create(**kwargs)

    def _classify(self, err: anthropic.AnthropicError) -> _Failure | ModelError:
        """A retryable failure, or the error to raise now."""
        if isinstance(err, anthropic.APIStatusError):
            return self._status_outcome(err)
        if isinstance(err, anthropic.APITimeoutError):
            return _Failure("timeout")
        if isinstance(err, anthropic.APIConnectionError):
            cause = err.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else err.message
            return _Failure(self._scrub(f"connection error: {detail}"))
        if isinstance(err, anthropic.APIResponseValidationError):
            return BadResponse(self._scrub(f"Anthropic API response failed validation: {err.message}"))
        return ModelError(self._scrub(f"Anthropic SDK error: {type(err).__name__}: {err}"))

    def _status_outcome(self, err: anthropic.APIStatusError) -> _Failure | ModelError:
        status = err.status_code
        message = self._scrub(_api_message(err))
        error_type = err.type if isinstance(err.type, str) else None
        description = f"HTTP {status}" + (f" {error_type}" if error_type else "") + f": {message}"
        retryable = status in RETRYABLE_STATUS or status >= 500
        # The server's own word wins either way, as in the SDK (_base_client.py, _should_retry).
        should_retry = err.response.headers.get("x-should-retry")
        if should_retry == "true" or (retryable and should_retry != "false"):
            if should_retry == "true" and not retryable:
                description += " (x-should-retry: true)"
            return _Failure(description, status, error_type, err.request_id, retry_after_s(err.response.headers))
        if retryable:  # x-should-retry: false
            unavailable = ModelUnavailable(f"Anthropic API unavailable ({description}); the server said not to "
                                           "retry (x-should-retry: false)")
            return _tag(unavailable, status=status, error_type=error_type, request_id=err.request_id, attempts=1)
        if status == 413 or (status == 400 and _is_too_long(message)):
            error: ModelError = PromptTooLong(f"Anthropic API: prompt too long ({description})")
        elif status == 400 and THINKING_REFUSED in message:
            error = ThinkingRefused(f"Anthropic API refused a thinking block ({description})")
        else:
            error = ModelError(f"Anthropic API error ({description})")
        return _tag(error, status=status, error_type=error_type, request_id=err.request_id, attempts=1)

    # -- helpers ----------------------------------------------------------

    def _note_temperature(self, request: ModelRequest) -> None:
        """Say once that temperature is dropped: SDK 2.x has no such argument and the
        API version it sends (2026-10-21) answers 400 to any temperature, even 1.0."""
        if request.temperature is None or self._temperature_noted:
            return
        self._temperature_noted = True
        log.info(
            "temperature=%s not sent: API version %s does not accept sampling parameters",
            request.temperature, self._client.default_headers.get("anthropic-version"),
        )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """The server's retry-after if given, in full (``create`` checks there is room for it), else
        exponential backoff with jitter, capped at ``max_delay_s``."""
        if retry_after is not None and math.isfinite(retry_after):
            return max(retry_after, 0.0)
        ceiling = min(self.max_delay_s, self.base_delay_s * 2**attempt)
        # Jitter spreads retries of many workers apart; the 0.5 floor keeps the backoff real.
        return ceiling * self._rng.uniform(0.5, 1.0)

    def _scrub(self, text: str) -> str:
        """Remove the API key from text that may have echoed it (error bodies, causes).

        Only where it stands alone: a short key (a test's "x") inside a word or a
        dotted name (`thinking.block_binding.prefix_mismatch_behavior`) is not it."""
        if not self._api_key:
            return text
        alone = rf"(?<![\w.-]){re.escape(self._api_key)}(?![\w-]|\.\w)"
        return re.sub(alone, "<REDACTED>", text)


# -- request ---------------------------------------------------------------


def call_kwargs(request: ModelRequest) -> dict[str, Any]:
    """SDK keyword arguments for one request; the request itself is never mutated."""
    kwargs: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": request.messages,
        "timeout": request.timeout_s if request.timeout_s is not None else DEFAULT_TIMEOUT_S,
    }
    if request.system:
        kwargs["system"] = request.system
    if request.tools:
        kwargs["tools"] = with_tool_breakpoint(request)
        if request.tool_choice is not None:
            kwargs["tool_choice"] = request.tool_choice
    if request.thinking is not None:
        kwargs["thinking"] = request.thinking
    if request.output_config is not None:
        kwargs["output_config"] = request.output_config
    if request.compaction is not None:
        kwargs["compaction"] = request.compaction
    if request.context_management is not None:
        kwargs["context_management"] = request.context_management
    return kwargs


def with_tool_breakpoint(request: ModelRequest) -> list[dict[str, Any]]:
    """The tool list with a cache breakpoint on its last tool, if one is still allowed."""
    tools = list(request.tools)
    if "cache_control" in tools[-1] or count_cache_markers(request) >= MAX_CACHE_MARKERS:
        return tools
    # The system prompt's TTL: the API wants 1-hour entries before 5-minute ones, and the tools come first.
    system = request.system if isinstance(request.system, list) else []
    marked = [b["cache_control"] for b in system if isinstance(b, dict) and b.get("cache_control")]
    tools[-1] = {**tools[-1], "cache_control": dict(marked[0]) if marked else dict(EPHEMERAL)}
    return tools


def count_cache_markers(request: ModelRequest) -> int:
    """cache_control markers where the API counts them: system blocks, message
    blocks (tool_result parts too) and tools. Not a deep search: a tool's
    input schema may legitimately have a property called ``cache_control``."""
    count = 0
    if isinstance(request.system, list):
        count += _marked(request.system)
    for message in request.messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        count += _marked(content)
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("content"), list):
                count += _marked(block["content"])
    return count + _marked(request.tools)


def _marked(blocks: list[Any]) -> int:
    return sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control"))


# -- response --------------------------------------------------------------


def parse_response(body: bytes) -> ModelResponse:
    """A raw Messages API body -> ModelResponse; BadResponse names what is wrong."""
    try:
        data = json.loads(body)
    except ValueError as err:
        raise BadResponse(f"Anthropic API response is not valid JSON ({err}): {_preview(body)}") from None
    if not isinstance(data, dict):
        raise BadResponse(f"Anthropic API response is a JSON {type(data).__name__}, not a message object")
    if data.get("type", "message") != "message":
        raise BadResponse(f"Anthropic API response has type {data.get('type')!r}, expected 'message'")
    content = data.get("content")
    if not isinstance(content, list):
        what = "is missing 'content'" if content is None else f"has 'content' of type {type(content).__name__}"
        raise BadResponse(f"Anthropic API response {what} (expected a list of blocks)")
    return ModelResponse(
        id=_str(data.get("id")),
        model=_str(data.get("model")),
        content=_blocks(content),
        stop_reason=data.get("stop_reason") if isinstance(data.get("stop_reason"), str) else None,
        stop_details=data.get("stop_details") if isinstance(data.get("stop_details"), dict) else None,
        usage=_usage(data.get("usage")),
        input_transformations=[t for t in data.get("input_transformations") or [] if isinstance(t, dict)],
        context_management=data.get("context_management") if isinstance(data.get("context_management"), dict)
        else None,
    )


def parse_count(body: bytes) -> int:
    """A raw count_tokens body -> its ``input_tokens``; BadResponse names what is wrong."""
    try:
        data = json.loads(body)
    except ValueError as err:
        raise BadResponse(f"Anthropic count_tokens response is not valid JSON ({err}): {_preview(body)}") from None
    count = data.get("input_tokens") if isinstance(data, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise BadResponse(f"Anthropic count_tokens response has no input_tokens count: {_preview(body)}")
    return count


def _blocks(content: list[Any]) -> list[Any]:
    blocks = []
    for i, raw in enumerate(content):
        kind = raw.get("type") if isinstance(raw, dict) else None
        cls = BLOCK_TYPES.get(kind) if isinstance(kind, str) else None
        if cls is None:
            # Server tool blocks, future types: not part of baton's history format, so they
            # are dropped (the text around them is kept).
            log.info("skipping content block %d of type %r in the response", i, kind)
            continue
        try:
            blocks.append(cls.model_validate(raw))
        except ValidationError as err:
            raise BadResponse(
                f"Anthropic API response: content block {i} ({kind}) is invalid: {_first_error(err)}"
            ) from None
    return blocks


def _usage(raw: Any) -> Usage:
    if raw is None:
        log.warning("Anthropic API response has no usage; counting zero tokens")
        return Usage()
    if not isinstance(raw, dict):
        raise BadResponse(f"Anthropic API response has 'usage' of type {type(raw).__name__}")
    try:
        return Usage.model_validate(raw)  # None cache counts become 0
    except ValidationError as err:
        raise BadResponse(f"Anthropic API response: usage is invalid: {_first_error(err)}") from None


# -- errors and headers ----------------------------------------------------


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait: retry-after-ms, retry-after seconds or HTTP date."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


def _api_message(err: anthropic.APIStatusError) -> str:
    """The API's own error message, else a short preview of the body."""
    if isinstance(err.api_message, str) and err.api_message:
        return err.api_message
    body = err.body
    text = body if isinstance(body, str) else json.dumps(body, default=str)
    return _preview(text.encode()) or "(empty body)"


def _is_too_long(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in TOO_LONG_MARKERS)


def _unavailable(failure: _Failure, attempts: int) -> ModelUnavailable:
    error = ModelUnavailable(f"Anthropic API unavailable after {attempts} attempt(s): {failure.description}")
    return _tag(
        error, status=failure.status, error_type=failure.error_type, request_id=failure.request_id, attempts=attempts
    )


def _out_of_time(request: ModelRequest, failure: _Failure | None, attempts: int) -> ModelUnavailable:
    """The request's deadline leaves no time for another attempt (``failure``: the last one's, if any ran)."""
    error = _unavailable(failure or _Failure("not called"), attempts)
    error.args = (f"{error.args[0]}; the {request.deadline_s:g}s deadline of this {request.purpose} call "
                  "leaves no time for another attempt",)
    return error


def _no_room(request: ModelRequest, failure: _Failure, attempts: int, delay: float, room: float) -> ModelUnavailable:
    """The wait before the next attempt does not fit: the deadline's room, or the longest wait of a step."""
    # baton's own backoff (no usable retry-after): only a deadline can be too short for it.
    if failure.retry_after is None or not math.isfinite(failure.retry_after):
        return _out_of_time(request, failure, attempts)
    error = _unavailable(failure, attempts)
    limit = (f"the {request.deadline_s:g}s deadline of this {request.purpose} call leaves {max(room, 0):.0f}s"
             if request.deadline_s is not None else f"a call without a deadline waits at most {room:.0f}s")
    error.args = (f"{error.args[0]}; the server asked to wait {delay:.0f}s before retrying (retry-after), and "
                  f"{limit}: try again later",)
    return error


def _tag(error: E, **fields: Any) -> E:
    """Attach what callers may branch on or log (status, attempts, request id)."""
    for name, value in fields.items():
        setattr(error, name, value)
    return error


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "block"
    return f"{where}: {first['msg']}"


def _preview(body: bytes, limit: int = 200) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""

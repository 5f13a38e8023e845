"""Faults only a model can produce, queued on demand for the next matching message requests.

``POST /faults`` with ``{"fault": ..., "count": 1, "match": "substring", "hang_s": 0.5}``:

- ``max_tokens_cut``: the reply stops inside its first tool call: that ``tool_use`` keeps
  only the part of its input that fits in half of it, the blocks after it are dropped,
  ``stop_reason`` is ``max_tokens`` and ``output_tokens`` is the request's ``max_tokens``
  (no tool call: the last text is cut in half);
- ``refusal``: no content, ``stop_reason: "refusal"`` with ``stop_details`` of type refusal;
- ``hang``: the server waits ``hang_s`` (or the server's ``--hang-seconds``) before answering;
- ``context_window_exceeded``: cut like ``max_tokens_cut``, with
  ``stop_reason: "model_context_window_exceeded"``;
- ``api_error``: no reply but the API's error answer, with ``status`` (default 529),
  a ``retry-after`` header of ``retry_after_s`` seconds and an ``x-should-retry``
  header of ``should_retry`` when given: the headers AgentBreak cannot send;
- ``compaction_empty``: a compaction request (``compaction``) whose summarisation call produced no
  summary: a 200 with empty ``content`` and ``stop_reason`` (default ``end_turn``; any of the
  docs' table: ``max_tokens``, ``model_context_window_exceeded``, ``tool_use``, ``refusal``),
  still billed in ``usage.iterations``;
- ``compaction_refused``: a compaction request answered with the 400 of a model that does not
  support on-demand compaction.

A fault applies to a request whose raw JSON body contains ``match`` (any request when
it is omitted); each one serves ``count`` requests, in the order they were queued. The two
compaction faults wait for a compaction request and the model faults for a message request;
``hang`` and ``api_error`` serve either.
Transport faults (stalls, malformed bodies, error schedules) are AgentBreak's (docs/fake-api.md); an
``api_error`` is here only for the headers AgentBreak does not send. The steady wait of a real model is ``latency``.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workers.fake_api.rules import ApiError

FaultKind = Literal["max_tokens_cut", "refusal", "hang", "context_window_exceeded", "api_error",
                    "compaction_empty", "compaction_refused"]
FAULT_KINDS: tuple[str, ...] = FaultKind.__args__  # type: ignore[attr-defined]
COMPACTION_FAULTS = ("compaction_empty", "compaction_refused")
EITHER_REQUEST = ("hang", "api_error")  # the rest belong to a message request or to a compaction request
# The stop reasons of a summarisation call that produced no summary (the on-demand compaction page's table).
EmptyStop = Literal["end_turn", "max_tokens", "model_context_window_exceeded", "tool_use", "refusal"]


class FaultOrder(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fault: FaultKind
    count: int = Field(1, ge=1, le=10_000)
    match: str | None = Field(None, min_length=1)
    hang_s: float | None = Field(None, ge=0, le=3600)
    status: int | None = Field(None, ge=400, le=599)  # api_error only, as the three below
    retry_after_s: int | None = Field(None, ge=0, le=86_400)  # whole seconds, as the API sends them
    should_retry: bool | None = None
    stop_reason: EmptyStop | None = None  # compaction_empty only; None: end_turn

    @model_validator(mode="after")
    def _error_fields_for_errors(self) -> FaultOrder:
        given = [name for name in ("status", "retry_after_s", "should_retry") if getattr(self, name) is not None]
        if given and self.fault != "api_error":
            raise ValueError(f"{', '.join(given)}: only for the api_error fault")
        if self.stop_reason is not None and self.fault != "compaction_empty":
            raise ValueError("stop_reason: only for the compaction_empty fault")
        return self

    def serves(self, compaction: bool) -> bool:
        """Whether this order applies to a compaction request (``compaction``) or to a message request."""
        return self.fault in EITHER_REQUEST or (self.fault in COMPACTION_FAULTS) == compaction

    def error(self) -> FaultError:
        """The error answer of an ``api_error`` fault, headers included."""
        status = self.status or 529
        headers = {} if self.retry_after_s is None else {"retry-after": str(self.retry_after_s)}
        if self.should_retry is not None:
            headers["x-should-retry"] = "true" if self.should_retry else "false"
        return FaultError(status, ERROR_TYPES.get(status, "api_error"),
                          f"an api_error fault queued on the fake API (HTTP {status})", headers)


# The API's error type per status (docs: "Errors"); any other status is an api_error.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}


class FaultError(ApiError):
    """An error answer with headers of its own (``retry-after``, ``x-should-retry``)."""

    def __init__(self, status: int, error_type: str, message: str, headers: dict[str, str]) -> None:
        super().__init__(status, error_type, message)
        self.headers = headers


class FaultQueue:
    """Orders still to serve, first queued first served; safe across the server's threads."""

    def __init__(self) -> None:
        self._pending: list[tuple[FaultOrder, int]] = []  # (order, requests it still applies to)
        self._lock = threading.Lock()

    def add(self, order: FaultOrder) -> None:
        with self._lock:
            self._pending.append((order, order.count))

    def take(self, request_text: str, compaction: bool = False) -> FaultOrder | None:
        """The first order matching this request (a compaction request when ``compaction``), counted as
        served once."""
        with self._lock:
            for i, (order, left) in enumerate(self._pending):
                if order.serves(compaction) and (order.match is None or order.match in request_text):
                    if left > 1:
                        self._pending[i] = (order, left - 1)
                    else:
                        del self._pending[i]
                    return order
        return None

    def pending(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{**order.model_dump(exclude_none=True), "left": left} for order, left in self._pending]

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()


def apply(kind: str, message: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """The Messages API body ``message`` as the fault ``kind`` makes it (``hang`` changes nothing)."""
    if kind == "refusal":
        usage = {**message["usage"], "output_tokens": 0}
        details = {"type": "refusal", "category": None, "explanation": None}
        return {**message, "content": [], "stop_reason": "refusal", "stop_details": details, "usage": usage}
    if kind in ("max_tokens_cut", "context_window_exceeded"):
        stop = "max_tokens" if kind == "max_tokens_cut" else "model_context_window_exceeded"
        usage = {**message["usage"], "output_tokens": max_tokens} if kind == "max_tokens_cut" else message["usage"]
        return {**message, "content": cut(message["content"]), "stop_reason": stop, "usage": usage}
    return message


def cut(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The content as if generation stopped halfway through its first tool call (or its last text)."""
    first_use = next((i for i, block in enumerate(content) if block.get("type") == "tool_use"), None)
    if first_use is not None:
        use = content[first_use]
        return [*content[:first_use], {**use, "input": _half_input(use.get("input") or {})}]
    texts = [i for i, block in enumerate(content) if block.get("type") == "text"]
    if not texts:
        return content
    last = texts[-1]
    text = content[last]["text"]
    return [*content[:last], {**content[last], "text": text[: max(1, len(text) // 2)]}]


def _half_input(tool_input: dict[str, Any]) -> dict[str, Any]:
    """The keys that fit in half of the input's JSON; the first string that does not fit, cut short."""
    budget = len(json.dumps(tool_input)) // 2
    kept: dict[str, Any] = {}
    for key, value in tool_input.items():
        size = len(json.dumps({key: value}))
        if size <= budget:
            kept[key], budget = value, budget - size
            continue
        if isinstance(value, str) and budget > len(key) + 6:
            kept[key] = value[: budget - len(key) - 6]
        break
    return kept

"""What the real Messages API rejects, checked in the order it checks: each broken rule is an ``ApiError``.

- the body is a JSON object with ``model``, ``max_tokens`` (not for ``count_tokens``) and ``messages``;
- no sampling parameter (``temperature``, ``top_p``, ``top_k``): API version 2026-10-21 rejects them;
- ``stream`` is not supported by the double (baton never streams);
- the model is in the catalogue (404 ``not_found_error``) and not retired (400);
- ``max_tokens`` is at most the model's ``max_tokens``;
- every message parses (text, image, tool_use, tool_result, thinking, compaction blocks) and the tool_use /
  tool_result pairing holds (``context.protocol``, docs/context.md), a compaction block first standing for
  the messages it summarised (``_protocol_view``; the block itself is checked by ``compaction_block``);
- a ``role: "system"`` message goes only to a model that takes one ("role 'system' is not supported on
  this model") and only where the docs allow it (``context.protocol``, rule 4);
- at most 4 ``cache_control`` breakpoints in tools, system and messages together;
- the input (``counting``) is at most the model's ``max_input_tokens``: else
  "prompt is too long: N tokens > M maximum", which baton turns into a compaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from context.messages import CompactionBlock, Message, TextBlock, parse_message
from context.protocol import ProtocolError, validate
from workers.fake_api.catalogue import Catalogue, ModelEntry
from workers.fake_api.counting import Piece, markers, pieces

SAMPLING_PARAMETERS = ("temperature", "top_p", "top_k")
SYSTEM_UNSUPPORTED = "role 'system' is not supported on this model"
MAX_BREAKPOINTS = 4


class ApiError(Exception):
    """An error answer in the API's shape: ``{"type": "error", "error": {"type": ..., "message": ...}}``."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message

    def body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.error_type, "message": self.message}}


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


class MessagesBody(BaseModel):
    """The fields the double reads; others (metadata, stop_sequences, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=0)  # 0: a cache pre-warm (prompt-caching page), nothing sampled
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: dict[str, Any] | None = None
    stream: bool = False


@dataclass(frozen=True)
class CheckedRequest:
    body: MessagesBody
    model: ModelEntry
    messages: list[Message]
    pieces: list[Piece]

    @property
    def system_messages(self) -> int:
        return sum(1 for m in self.messages if m.role == "system")

    @property
    def input_tokens(self) -> int:
        return sum(p.tokens for p in self.pieces)


def check(raw: Any, catalogue: Catalogue, *, counting_only: bool = False, fits: bool = True) -> CheckedRequest:
    """The request, checked; ``counting_only`` for ``count_tokens`` (no max_tokens, no length limit).
    ``fits=False`` leaves the length limit to a later check: context editing clears before the prompt
    reaches the model, so it is the edited prompt that must fit."""
    if not isinstance(raw, dict):
        raise invalid("the request body must be a JSON object")
    body = _parse(raw, counting_only)
    sent = [name for name in SAMPLING_PARAMETERS if raw.get(name) is not None]
    if sent:
        raise invalid(f"{', '.join(sent)}: sampling parameters are not supported by API version 2026-10-21; "
                      "remove temperature, top_p and top_k from the request")
    if body.stream:
        raise invalid("stream: the fake API answers non-streaming requests only")
    model = _model(body.model, catalogue)
    if not counting_only and body.max_tokens is not None and body.max_tokens > model.max_tokens:
        raise invalid(f"max_tokens: {body.max_tokens} > {model.max_tokens}, which is the maximum allowed "
                      f"number of output tokens for {model.id}")
    messages = _messages(body.messages)
    first = next((i for i, m in enumerate(messages) if m.role == "system"), None)
    if first is not None and not model.system_messages:
        raise invalid(f"messages.{first}.role: {SYSTEM_UNSUPPORTED}")
    view, index = _protocol_view(messages)
    try:
        validate(view)
    except ProtocolError as err:
        raise invalid(f"messages.{index(err.index)}: {err.detail}") from None
    marked = markers(body.tools, body.system, body.messages)
    if marked > MAX_BREAKPOINTS:
        raise invalid(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {marked}.")
    checked = CheckedRequest(body, model, messages, pieces(body.tools, body.system, body.messages, messages))
    if not counting_only and fits and checked.input_tokens > model.max_input_tokens:
        raise invalid(f"prompt is too long: {checked.input_tokens} tokens > {model.max_input_tokens} maximum")
    return checked


def _protocol_view(messages: list[Message]) -> tuple[list[Message], Callable[[int], int]]:
    """The messages the protocol rules run on, and the request's index of a view index.

    A compaction block first stands for the messages it summarised, so what follows it need not start
    with a user message: "Put the block first in `messages`, either as an `assistant` message of its own
    or as the first content block of the first message", and "Two `assistant` messages in a row are fine
    here, because the block still comes first". The view leaves the block out and, when what follows
    starts with an assistant message (or nothing follows), puts a user message in its place."""
    if not (messages and messages[0].content and isinstance(messages[0].content[0], CompactionBlock)):
        return messages, lambda i: i
    summary = messages[0].content[0]
    rest = messages[0].content[1:]
    view = ([Message(role=messages[0].role, content=rest)] if rest else []) + messages[1:]
    shift = 0 if rest else 1  # the request's index of view[0]
    if not view or view[0].role == "assistant":
        view.insert(0, Message(role="user", content=[TextBlock(text=summary.content or "")]))
        shift -= 1
    return view, lambda i: max(0, i + shift)


def _parse(raw: dict[str, Any], counting_only: bool) -> MessagesBody:
    try:
        body = MessagesBody.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise invalid(f"{where}: {first['msg']}") from None
    if body.max_tokens is None and not counting_only:
        raise invalid("max_tokens: Field required")
    return body


def _model(model_id: str, catalogue: Catalogue) -> ModelEntry:
    model = catalogue.get(model_id)
    if model is None:
        raise ApiError(404, "not_found_error", f"model: {model_id}")
    if model.lifecycle == "retired":
        when = f" on {model.retires_at.date().isoformat()}" if model.retires_at else ""
        raise invalid(f"model: {model_id} was retired{when} and can no longer be called; "
                      "GET /v1/models lists the models you can use")
    return model


def _messages(raw: list[dict[str, Any]]) -> list[Message]:
    parsed = []
    for i, message in enumerate(raw):
        if not isinstance(message.get("content"), (str, list)):
            raise invalid(f"messages.{i}.content: must be a string or a list of content blocks")
        try:
            parsed.append(parse_message({"role": message.get("role"), "content": message["content"]}))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise invalid(f"messages.{i}.{where}: {first['msg']}") from None
    return parsed

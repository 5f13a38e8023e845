"""Typed content blocks and messages in the Anthropic Messages format.

These models are the boundary for everything that enters the context engine:
the on-disk log, recorded trajectories and model responses. Messages are
immutable so derived data (token estimates, serialised form) can be cached on
the object and never goes stale.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from context import tokens as raw_counts
from context.text import clean_text

# who speaks; the agents' roles are agents.role.Role. "system": a mid-conversation system message (an instruction
# from the operator, placed after a user turn: context.protocol, rule 4).
MessageRole = Literal["user", "assistant", "system"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class _Counted(_Frozen):
    """A content block whose raw token count is computed once and cached on it."""

    @cached_property
    def tokens(self) -> int:
        return raw_counts.block_tokens(self)

    @cached_property
    def digest(self) -> str:
        """sha256 of the block's request form (``prefix`` and cache_control are never part of it)."""
        return _digest(self.model_dump(exclude_none=True))


def _digest(body: dict[str, Any]) -> str:
    text = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class TextBlock(_Counted):
    type: Literal["text"] = "text"
    text: str
    # baton's own reminder to the agent (the plan's recap, a change of conventions): stored in the log, never
    # sent as a field; it decides how the text goes out (``context.reminders``: a mid-conversation system
    # message on a model that takes one, user text otherwise).
    reminder: bool = Field(False, exclude=True)

    _clean = field_validator("text", mode="before")(lambda cls, v: clean_text(v))

    @cached_property
    def digest(self) -> str:
        """As for any block; a reminder's also says it is one, since it may go out as a system message: the
        prefix chain (``context.prefix``) then tells it from the same text sent as user text."""
        body = self.model_dump(exclude_none=True)
        return _digest({**body, "reminder": True} if self.reminder else body)


class ImageBlock(_Counted):
    """An image, kept opaque: it is passed through and never tokenised as text."""

    type: Literal["image"] = "image"
    source: dict[str, Any]


class ThinkingBlock(_Counted):
    """Claude's thinking, kept exactly as returned: its signature binds it to its text and to its prefix.

    ``prefix`` is baton's own fingerprint (``context.prefix``) of everything sent before the block when
    it was produced; it is stored in the log but never sent (``exclude``): the assembler sends the block
    back only while the prefix before it is still the same (docs/agents.md, "Thinking and the prefix").
    """

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""
    prefix: str | None = Field(None, exclude=True)
    # Its text held a secret: stored redacted, and never sent again (the signature covers the original text).
    withheld: bool = Field(False, exclude=True)
    # Tokens the API billed for it (its share of the reply's thinking): sent back, it is billed as input at that
    # size, not at its visible text's, which the 5.5 models leave empty by default. Stored, never sent.
    billed: int = Field(0, ge=0, exclude=True)


class RedactedThinkingBlock(_Counted):
    """Thinking the API returned encrypted (``data`` is opaque); bound to its prefix like ``ThinkingBlock``."""

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str
    prefix: str | None = Field(None, exclude=True)
    billed: int = Field(0, ge=0, exclude=True)  # as ThinkingBlock's


SignedBlock = Union[ThinkingBlock, RedactedThinkingBlock]


class CompactionBlock(_Counted):
    """A summary the API wrote (on-demand compaction, beta ``compact-2026-09-04``), kept exactly as returned.

    It is sent back first in ``messages``, in place of the messages it summarises, with every field as the
    API returned it (its ``signature`` covers the summary): baton never edits one. ``content`` None is a
    compaction that produced no summary, which baton never sends (it falls back to its own summary).
    Fields as the SDK's ``BetaCompactionBlock`` (types/beta/beta_compaction_block.py).
    """

    model_config = ConfigDict(frozen=True, extra="allow")  # a field newer than this code is sent back too
    type: Literal["compaction"] = "compaction"
    content: str | None = None
    signature: str | None = None
    encrypted_content: str | None = None
    tool_changes: list[dict[str, Any]] | None = None


class ToolUseBlock(_Counted):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)

    @field_validator("input", mode="before")
    @classmethod
    def _input_is_object(cls, value: Any) -> dict[str, Any]:
        # Models occasionally emit a JSON string or null; keep what was said.
        if value is None:
            return {}
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except ValueError:
                return {"raw": value}
            return parsed if isinstance(parsed, dict) else {"raw": parsed}
        if not isinstance(value, dict):
            return {"raw": value}
        return value


ResultPart = Annotated[Union[TextBlock, ImageBlock], Field(discriminator="type")]


class ToolResultBlock(_Counted):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: Union[str, list[ResultPart]] = ""
    is_error: bool = False

    @field_validator("content", mode="before")
    @classmethod
    def _normalise_content(cls, value: Any) -> Any:
        if isinstance(value, list) and all(
            isinstance(p, (TextBlock, ImageBlock))
            or (isinstance(p, dict) and p.get("type") in ("text", "image"))
            for p in value
        ):
            return value
        return clean_text(value)

    @property
    def text(self) -> str:
        """All textual content of the result, images left out."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextBlock))


Block = Annotated[
    Union[TextBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock, ImageBlock,
          CompactionBlock],
    Field(discriminator="type"),
]


_COUNTS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class CacheCreation(_Frozen):
    """A response's cache writes by how long the entry lives (the SDK's ``BetaCacheCreation``)."""

    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0

    @field_validator("*", mode="before")
    @classmethod
    def _none_is_zero(cls, value: Any) -> Any:
        return 0 if value is None else value


class _Counts(_Frozen):
    """The four token counts the API reports, with the cache writes' split by lifetime when it gives one."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation: CacheCreation | None = None

    @field_validator(*_COUNTS, mode="before")
    @classmethod
    def _none_is_zero(cls, value: Any) -> Any:
        return 0 if value is None else value

    @property
    def cache_write_1h(self) -> int:
        """The cache writes of 1-hour entries (billed at 2x input, not 1.25x); 0 without the split."""
        hour = self.cache_creation.ephemeral_1h_input_tokens if self.cache_creation else 0
        return min(hour, self.cache_creation_input_tokens)  # the top-level count is the billed total: never more

    @property
    def cache_write_5m(self) -> int:
        """The rest of the cache writes: without the split (older responses and stored events), all of them."""
        return self.cache_creation_input_tokens - self.cache_write_1h


class UsageIteration(_Counts):
    """One sampling iteration of a response (the SDK's ``Beta*IterationUsage``, told apart by ``type``):
    "message" (its tokens are in the response's top-level counts), "compaction" (the API's summary call,
    whose tokens are not), or a kind newer than this code."""

    type: str
    model: str | None = None


class Usage(_Counts):
    """Token usage the API reported for one response.

    Stored events hold the four counts only, and load as they are: ``cache_creation`` and ``iterations``
    are absent there and left out of the dump when absent, since every step event carries a usage."""

    iterations: list[UsageIteration] | None = None

    @model_serializer(mode="wrap")
    def _only_given_parts(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name in ("cache_creation", "iterations"):
            if not data.get(name):
                data.pop(name, None)
        for entry in data.get("iterations") or ():
            for name in ("cache_creation", "model"):
                if entry.get(name) is None:
                    entry.pop(name, None)
        return data

    @property
    def total_input(self) -> int:
        """What the model actually read: fresh, cache-written and cache-read input (compactions not included)."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @property
    def compactions(self) -> list[UsageIteration]:
        """The API's compaction iterations: paid for, yet not in the top-level counts (the SDK's
        ``BetaIterationsUsage``), so what a response cost is the top level plus these."""
        return [entry for entry in self.iterations or () if entry.type == "compaction"]


class Message(_Frozen):
    role: MessageRole
    content: list[Block]
    usage: Usage | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _string_content(cls, value: Any) -> Any:
        # The API accepts a bare string as shorthand for one text block.
        if isinstance(value, str):
            return [{"type": "text", "text": value}]
        return value

    @cached_property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    @cached_property
    def tool_results(self) -> list[ToolResultBlock]:
        return [b for b in self.content if isinstance(b, ToolResultBlock)]

    @property
    def only_tool_results(self) -> bool:
        return bool(self.content) and len(self.tool_results) == len(self.content)

    @property
    def text(self) -> str:
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def said(self) -> str:
        """What the model said, in order: its text and the notes it wrote between tool calls, which Opus 5.5
        returns inside thinking blocks (with the ``updates`` display; empty under ``omitted``)."""
        parts = [b.text if isinstance(b, TextBlock) else b.thinking for b in self.content
                 if isinstance(b, (TextBlock, ThinkingBlock))]
        return "\n".join(p for p in parts if p.strip())

    @cached_property
    def tokens(self) -> int:
        """Raw (uncalibrated) cl100k tokens of the content, summed from cached block counts."""
        return sum(b.tokens for b in self.content)

    @cached_property
    def api(self) -> dict[str, Any]:
        """The request form of this message (no usage); cached because messages are frozen."""
        return {"role": self.role, "content": [b.model_dump(exclude_none=True) for b in self.content]}

    @cached_property
    def stored(self) -> dict[str, Any]:
        """The log form: the request form plus each thinking block's prefix fingerprint (never sent)."""
        content = [b.model_dump(exclude_none=True) | _stamp(b) for b in self.content]
        return {"role": self.role, "content": content}

    @cached_property
    def signed_blocks(self) -> int:
        return sum(1 for b in self.content if is_signed(b))

    @cached_property
    def chain_ends(self) -> dict[str, str]:
        """``context.prefix``'s memo for this message: the chain digest after it, by the digest before it
        (assembly sends the same messages after the same prefix call after call)."""
        return {}

    @cached_property
    def canonical(self) -> str:
        """Deterministic serialisation: equal strings mean byte-identical request content."""
        return json.dumps(self.api, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _stamp(block: Any) -> dict[str, Any]:
    """What the log keeps of a block besides its request form: a signed block's prefix stamp and whether it
    is withheld, a text block's reminder flag."""
    if isinstance(block, TextBlock):
        return {"reminder": True} if block.reminder else {}
    if not is_signed(block):
        return {}
    return {k: v for k, v in (("prefix", block.prefix), ("withheld", getattr(block, "withheld", False)),
                              ("billed", block.billed)) if v}


def is_signed(block: Any) -> bool:
    """A thinking or redacted_thinking block: signed over its prefix by the API."""
    return isinstance(block, (ThinkingBlock, RedactedThinkingBlock))


def user(*blocks: Block | str) -> Message:
    return Message(role="user", content=[TextBlock(text=b) if isinstance(b, str) else b for b in blocks])


def assistant(*blocks: Block | str) -> Message:
    return Message(role="assistant", content=[TextBlock(text=b) if isinstance(b, str) else b for b in blocks])


def parse_message(data: Any) -> Message:
    """Validate one message from a file or a response; raises ValueError naming the problem."""
    return Message.model_validate(data)

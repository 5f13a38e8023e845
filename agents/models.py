"""The model protocol: a request in, a response out.

Two implementations: ``agents.anthropic_model.AnthropicModel`` (the real SDK)
and ``agents.simulated.SimulatedModel`` (offline, deterministic). The step only
sees this protocol and the typed errors below.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from context.messages import Block, Message, Usage

API_KEY_ENV = "ANTHROPIC_API_KEY"  # the only place the key is read from


class ModelRequest(BaseModel):
    """One Messages API call. ``messages``, ``system`` and ``tools`` are in API form,
    cache_control markers included (see ``context.assembly.Assembled.to_request``)."""

    model_config = ConfigDict(frozen=True)
    model: str
    max_tokens: int = Field(gt=0)
    messages: list[dict[str, Any]]
    system: list[dict[str, Any]] | str | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    temperature: float | None = None
    betas: list[str] = Field(default_factory=list)
    tool_choice: dict[str, Any] | None = None  # {"type": "none"} for summaries: text only
    timeout_s: float | None = None
    purpose: Literal["step", "summary"] = "step"

    def fingerprint(self) -> str:
        """Same request, same fingerprint: used to prove no response is asked for twice."""
        body = self.model_dump(exclude={"timeout_s"})
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


class ModelResponse(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str = ""
    model: str = ""
    content: list[Block]
    stop_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    simulated: bool = False

    def message(self) -> Message:
        return Message(role="assistant", content=self.content, usage=self.usage)


class ModelError(RuntimeError):
    """The model could not answer. ``retryable`` errors were already retried."""

    retryable: bool = False


class PromptTooLong(ModelError):
    """The API said the prompt is too long: the step turns this into a compaction."""


class ModelUnavailable(ModelError):
    """Overloaded, rate limited or unreachable after all retries, or a timeout."""

    retryable = True


class BadResponse(ModelError):
    """The API answered with something that is not a valid Messages response."""


class Model(Protocol):
    label: str  # "anthropic" or "simulated"

    def create(self, request: ModelRequest) -> ModelResponse: ...

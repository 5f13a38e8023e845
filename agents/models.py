"""The model protocol: a request in, a response out.

Two implementations: ``agents.anthropic_model.AnthropicModel`` (the real SDK)
and ``agents.simulated.SimulatedModel`` (offline, deterministic). The step only
sees this protocol and the typed errors below.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from context.messages import Block, Message, Usage

API_KEY_ENV = "ANTHROPIC_API_KEY"  # the only place the key is read from

# Why the model stopped: the SDK's ``StopReason`` literal (anthropic 2.12). A response keeps
# the value as a plain string, so a value a later API adds still loads; the step acts on each
# of these (docs/agents.md, "The durable step") and treats an unknown one by its content.
StopReason = Literal[
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal", "model_context_window_exceeded"
]


class ModelRequest(BaseModel):
    """One Messages API call. ``messages``, ``system`` and ``tools`` are in API form,
    cache_control markers included (see ``context.assembly.Assembled.to_request``)."""

    model_config = ConfigDict(frozen=True)
    model: str
    max_tokens: int = Field(ge=0)  # 0: a cache pre-warm, which samples nothing (agents/cache_prewarm.py)
    messages: list[dict[str, Any]]
    system: list[dict[str, Any]] | str | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    temperature: float | None = None
    betas: list[str] = Field(default_factory=list)
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None  # the role's thinking parameter (agents.thinking); None: not sent
    output_config: dict[str, Any] | None = None  # {"effort": ...}; None: the model's defaults
    timeout_s: float | None = None  # of one HTTP attempt
    # Seconds the whole call may take, retries included; None: no deadline (the step's own retry policy).
    # A summary has one, so a compaction falls back to its deterministic summary in time.
    deadline_s: float | None = Field(None, gt=0)
    purpose: Literal["step", "summary", "compaction"] = "step"
    # The API's on-demand compaction (context.api_compaction): {"type": "summarize", "instructions": ...}.
    compaction: dict[str, Any] | None = None
    # Context editing the server applies (context.api_editing): {"edits": [...]}.
    context_management: dict[str, Any] | None = None

    def fingerprint(self) -> str:
        """Same request, same fingerprint: used to prove no response is asked for twice."""
        body = self.model_dump(exclude={"timeout_s", "deadline_s"})
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


class ModelResponse(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str = ""
    model: str = ""
    content: list[Block]
    stop_reason: str | None = None  # a StopReason, or a value newer than this code
    stop_details: dict[str, Any] | None = None  # e.g. a refusal's category and explanation
    usage: Usage = Field(default_factory=Usage)
    simulated: bool = False
    # Blocks the API changed before the model saw them (dropped thinking): baton's own prefix check missed.
    input_transformations: list[dict[str, Any]] = Field(default_factory=list)
    # The edits the server applied (context editing): {"applied_edits": [...]}, when it says.
    context_management: dict[str, Any] | None = None

    def message(self) -> Message:
        return Message(role="assistant", content=self.content, usage=self.usage)


class ModelError(RuntimeError):
    """The model could not answer. ``retryable`` errors were already retried."""

    retryable: bool = False


class PromptTooLong(ModelError):
    """The API said the prompt is too long: the step turns this into a compaction."""


class ThinkingRefused(ModelError):
    """The API refused a thinking block the request sent back (its prefix check, or a signature it cannot
    verify). Sending the same request again cannot work: the step leaves every earlier block out and asks
    once more (``AgentState.thinking_epoch``)."""


class ModelUnavailable(ModelError):
    """Overloaded, rate limited or unreachable after all retries, or a timeout."""

    retryable = True


class BadResponse(ModelError):
    """The API answered with something that is not a valid Messages response."""


class Model(Protocol):
    label: str  # "anthropic" or "simulated"

    def create(self, request: ModelRequest) -> ModelResponse: ...


@runtime_checkable
class TokenCounter(Protocol):
    """A model that can count a request's input tokens exactly (Anthropic's free count_tokens).

    Optional: the step asks for an exact count near the compaction threshold when its
    model has this method, and trusts the estimate otherwise (the simulated model).
    """

    def count_tokens(self, request: ModelRequest) -> int: ...

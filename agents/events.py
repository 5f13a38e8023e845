"""What happened to an agent, one typed record per line of ``state/<agent>/events.jsonl``.

Every writer (the step, the compaction task) and every reader (the loop, the CLI,
the tests) goes through these models, so a field is named in one place. The
union is discriminated by ``kind``; a line that matches none of them (a torn or
foreign record) is reported as a problem by ``read_events`` and skipped, never
fatal. Timestamps are UTC ISO 8601 with milliseconds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from context.compaction_event import CompactionEvent
from context.redaction import redact_value
from scenarios.folder import of_state
from scenarios.jsonl_cache import JsonlCache, Problem
from scenarios.lease import Lease


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: str
    at: str = Field(default_factory=now)
    # Fields added after events.jsonl files existed: written only when they have a value,
    # so a run that never sets them writes the same lines as before.
    omitted_when_none: ClassVar[frozenset[str]] = frozenset()


class StepEvent(_Event):
    """One model call of a step: what was asked, what it cost, what came back."""

    kind: Literal["step"] = "step"
    step: int
    iteration: int
    model: str
    request: str  # fingerprint of the request, as in the log record
    usage: dict[str, Any]
    estimated_input: int
    threshold: int
    stop_reason: str | None = None
    duration_s: float
    tools: list[str] = Field(default_factory=list)
    # The API's exact count of this request's input (count_tokens), when it was asked near the threshold.
    counted_input: int | None = None
    cost_usd: float | None = None  # the call at its model's price (agents.pricing); none offline or unpriced
    # Thinking and the prefix (context.prefix): signed blocks sent back valid, left out by baton (prefix
    # changed, or a secret in the text), produced by this reply, and dropped by the API after all.
    thinking_sent: int = 0
    thinking_left_out: int = 0
    thinking_produced: int = 0
    thinking_dropped: int = 0
    # Whether this request's messages extend the previous request's plus its reply exactly (None: the first
    # call), and whether the engine changed the view on purpose since (a batch compressed, a compaction).
    prefix_extends: bool | None = None
    view_changed: bool | None = None
    # Context editing (compressor "api"): the input tokens the server cleared from this request, as it said
    # (its context_management.applied_edits); None when the request asked for none.
    cleared_input: int | None = None
    cache_ttl: str | None = None  # "1h" when the request's breakpoints were marked for an hour

    omitted_when_none: ClassVar[frozenset[str]] = frozenset(
        {"counted_input", "cost_usd", "prefix_extends", "view_changed", "cleared_input", "cache_ttl"})


class OutputCutEvent(_Event):
    """A reply stopped at ``max_tokens``. Its unfinished tool call never runs and never reaches the log.

    ``retry_max_tokens`` set: the reply was dropped and the step asks again with that larger
    limit (once). None: the reply was kept without its tool calls (or, text only, as it was)
    and the agent was told it was cut (docs/agents.md, "The durable step").
    """

    kind: Literal["output_cut"] = "output_cut"
    step: int
    max_tokens: int
    usage: dict[str, Any]
    tools: list[str] = Field(default_factory=list)  # the calls in the cut reply; the last one unfinished
    retry_max_tokens: int | None = None


class CompactionRecord(CompactionEvent):
    """A compaction (``context.assembly.CompactionEvent``) and the step it followed (its fencing token)."""

    kind: Literal["compaction"] = "compaction"
    after_step: int | None = None


class WarningEvent(_Event):
    kind: Literal["warning"] = "warning"
    after_step: int
    reason: str
    # "thinking_dropped": the API dropped thinking blocks baton sent (its own prefix check missed them)
    code: str | None = None

    omitted_when_none: ClassVar[frozenset[str]] = frozenset({"code"})


class PromptTooLongEvent(_Event):
    """The API refused a request as too long: a compaction and one retry follow."""

    kind: Literal["prompt_too_long"] = "prompt_too_long"
    step: int
    detail: str
    usage: dict[str, Any] | None = None  # of a reply the window ran out in (model_context_window_exceeded)

    omitted_when_none: ClassVar[frozenset[str]] = frozenset({"usage"})


class ErrorEvent(_Event):
    """The step failed; the run stops with this reason until a human resumes it."""

    kind: Literal["error"] = "error"
    step: int
    reason: str
    stop_reason: str | None = None  # set when the model's own stop caused it (a refusal)
    stop_details: dict[str, Any] | None = None  # what the API said about that stop (a refusal's category)
    usage: dict[str, Any] | None = None  # of that reply, which was not kept: what it cost

    omitted_when_none: ClassVar[frozenset[str]] = frozenset({"stop_reason", "stop_details", "usage"})


class HandoffEvent(_Event):
    kind: Literal["handoff"] = "handoff"
    step: int
    iteration: int
    path: str


class PrewarmEvent(_Event):
    """At a handoff, the agent's prefix written for an hour so it outlives the other agent's turn
    (agents/cache_prewarm.py): a request that samples nothing, paid for like any call."""

    kind: Literal["cache_prewarm"] = "cache_prewarm"
    step: int  # the handoff step it follows
    usage: dict[str, Any]
    cost_usd: float | None = None

    omitted_when_none: ClassVar[frozenset[str]] = frozenset({"cost_usd"})


Event = Annotated[
    StepEvent | CompactionRecord | WarningEvent | PromptTooLongEvent | ErrorEvent | HandoffEvent | OutputCutEvent
    | PrewarmEvent,
    Field(discriminator="kind"),
]
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


def event_record(event: Event) -> dict[str, Any]:
    """The line written for ``event``: kind and time first, secrets redacted."""
    fields = event.model_dump(mode="json")
    for name in getattr(event, "omitted_when_none", ()):  # a CompactionRecord is not an _Event
        if fields.get(name) is None:
            del fields[name]
    return redact_value({"kind": fields.pop("kind"), "at": fields.pop("at"), **fields})


def append_event(path: Path, event: Event, lease: Lease | None = None) -> None:
    """Append ``event``'s line (under ``lease`` when given: ``scenarios.lease``)."""
    of_state(path).append_jsonl(path, event_record(event), lease)


def parse_event(raw: Any) -> Event:
    return _EVENT.validate_python(raw)


def _event_or_problem(number: int, raw: Any) -> Event | Problem:
    try:
        return parse_event(raw)
    except ValidationError as exc:
        kind = raw.get("kind") if isinstance(raw, dict) else None
        return Problem(f"record {number} (kind {kind!r}) is not a known event ({exc.error_count()} problem(s)); "
                       "ignored")


EVENT_FILES = JsonlCache(_event_or_problem)  # events are frozen models: reads may share them


def read_events(path: Path) -> tuple[list[Event], list[str]]:
    """The events of one file, and a line per record that could not be read."""
    parsed = EVENT_FILES.read(path, of_state(path))
    return parsed.items, [f"{path.name} {p}" for p in parsed.line_problems + parsed.record_problems]

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
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from context.compaction_event import CompactionEvent
from context.redaction import redact_value
from scenarios.store import append_jsonl, read_jsonl


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: str
    at: str = Field(default_factory=now)


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


class CompactionRecord(CompactionEvent):
    """A compaction (``context.assembly.CompactionEvent``) and the step it followed (its fencing token)."""

    kind: Literal["compaction"] = "compaction"
    after_step: int | None = None


class WarningEvent(_Event):
    kind: Literal["warning"] = "warning"
    after_step: int
    reason: str


class PromptTooLongEvent(_Event):
    """The API refused a request as too long: a compaction and one retry follow."""

    kind: Literal["prompt_too_long"] = "prompt_too_long"
    step: int
    detail: str


class ErrorEvent(_Event):
    """The step failed; the run stops with this reason until a human resumes it."""

    kind: Literal["error"] = "error"
    step: int
    reason: str


class HandoffEvent(_Event):
    kind: Literal["handoff"] = "handoff"
    step: int
    iteration: int
    path: str


Event = Annotated[
    StepEvent | CompactionRecord | WarningEvent | PromptTooLongEvent | ErrorEvent | HandoffEvent,
    Field(discriminator="kind"),
]
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


def event_record(event: Event) -> dict[str, Any]:
    """The line written for ``event``: kind and time first, secrets redacted."""
    fields = event.model_dump(mode="json")
    return redact_value({"kind": fields.pop("kind"), "at": fields.pop("at"), **fields})


def append_event(path: Path, event: Event) -> None:
    append_jsonl(path, event_record(event))


def parse_event(raw: Any) -> Event:
    return _EVENT.validate_python(raw)


def read_events(path: Path) -> tuple[list[Event], list[str]]:
    """The events of one file, and a line per record that could not be read."""
    lines = read_jsonl(path)
    events: list[Event] = []
    problems = [f"{path.name} {p}" for p in lines.problems]
    for number, raw in enumerate(lines.records, start=1):
        try:
            events.append(parse_event(raw))
        except ValidationError as exc:
            kind = raw.get("kind") if isinstance(raw, dict) else None
            problems.append(f"{path.name} record {number} (kind {kind!r}) is not a known event "
                            f"({exc.error_count()} problem(s)); ignored")
    return events, problems

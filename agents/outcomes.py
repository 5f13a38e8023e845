"""What a step or a compaction reports to whoever runs it (the loop, a Celery task, a test).

The loop decides what runs next from ``status`` and, for a skipped task, from the
typed ``skip`` reason; ``reason`` is the human explanation, never parsed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agents.role import Role

Status = Literal["continue", "compaction_needed", "handoff", "failed", "skipped", "idle"]

# Why a task did nothing. A duplicate or re-delivered task is "already_done"; a compaction for a
# step the log has moved past is "stale", one no step asked for "not_due"; a writer whose lease a
# newer one took ("lease_lost", scenarios.lease) stopped writing and its work was discarded.
SkipReason = Literal["already_done", "not_due", "stale", "already_compacted", "unfinished_tools", "lease_lost",
                     "conventions"]


class StepOutcome(BaseModel):
    agent: Role
    step: int
    status: Status
    reason: str = ""
    skip: SkipReason | None = None
    iteration: int = 0
    tokens_in_context: int = 0
    threshold: int = 0
    handoff_path: str | None = None
    model: str = ""
    stop_reason: str | None = None  # why the model's reply of this step stopped, when the step called it
    usage: dict[str, Any] | None = None  # the usage of this step's model call (its cache split, iterations)
    said: str = ""  # the start of what the reply said (text and notes between tool calls), redacted


class CompactionOutcome(BaseModel):
    agent: Role
    status: Literal["compacted", "skipped"]
    after_step: int
    reason: str = ""
    skip: SkipReason | None = None
    event_id: int | None = None
    fallback: bool = False
    # What asked for it: a step over the threshold, the API's "prompt too long", or a person (forced).
    trigger: Literal["threshold", "prompt_too_long", "forced"] | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    usage: dict[str, Any] | None = None  # the summary call's usage, when the model was asked

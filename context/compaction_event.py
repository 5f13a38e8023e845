"""A compaction, as recorded: the summary and the log messages it stands for.

The event names positions in the append-only log, as OpenHands' condensation names
event ids; the view sent to the model is derived from the log and the latest event
(``context.assembly``). See docs/context.md.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any, NamedTuple

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from context.history import History
from context.messages import CompactionBlock, Message, TextBlock, Usage


class ViewSpan(NamedTuple):
    """A compaction's positions as view indices of one `History`."""

    covered_from: int  # first view index the summary stands for
    kept_from: int  # first view index kept verbatim after the summary
    kept_until: int  # view length when compacted: results before it get the kept cap


# Positions of events written before events named log positions: view indices.
_VIEW_FIELDS = ("covered_from", "kept_from", "kept_until")
_SEQ_FIELDS = ("covered_from_seq", "kept_from_seq", "kept_until_seq")


class CompactionEvent(BaseModel):
    """A compaction: a summary that stands for the log messages before `kept_from_seq`.

    Positions are numbers of log messages (1 for the first message appended to
    the `History`, as the agent's log records are numbered), so the event names
    what it forgets as the append-only log numbers it, not by positions in the
    repaired view; `in_view` resolves them. Events written earlier carry view
    indices instead (`covered_from`, `kept_from`, `kept_until`): they load as they
    are and resolve to those indices. The log is untouched; assembly reads the
    latest event to derive the request.
    """

    kind: str = "compaction"
    id: int = Field(ge=1, description="1 for the first compaction of this agent, then 2, …")
    covered_from_seq: int | None = Field(None, ge=1, description="first log message the summary stands for")
    kept_from_seq: int | None = Field(None, ge=1, description="first log message kept verbatim after the summary")
    kept_until_seq: int | None = Field(None, ge=0, description="last log message when compacted: the steps kept then")
    covered_from: int | None = Field(None, ge=0, description="older events: view index the summary starts at")
    kept_from: int | None = Field(None, ge=0, description="older events: first view index kept verbatim")
    kept_until: int | None = Field(None, ge=0, description="older events: view length when compacted")
    prompt: str
    summary: dict[str, Any]
    tokens_before: int = 0
    tokens_after: int = 0
    duration_s: float = 0.0
    usage: Usage | None = None
    fallback: bool = False
    error: str | None = None
    # How a summary over the cap was kept bounded (context.summary_cap): "asked", "enforced", both, or None.
    condensed: str | None = None
    at: str = ""
    # Who wrote the summary: "summary" (baton's compactor asked the agent's model, or built its fallback) or
    # "api" (the API's on-demand compaction, context.api_compaction). An api compaction keeps the block
    # the API returned, sent back as it came, first in the messages; its parsed `summary` is baton's record.
    strategy: str = "summary"
    block: dict[str, Any] | None = None
    # Where the prefix chain stood (context.prefix) at the start of the compacted request and right after the
    # messages the block replaces: a request that starts the same way continues from the second, so the
    # thinking in the kept turns is sent back, as the API accepts it.
    prefix_start: str | None = None
    prefix_cut: str | None = None
    # Pinned openings an earlier API compaction appended to a message this one keeps: {"seq": the last log
    # message in that view message when it was pinned, "text": the pin}. They stay, so the kept turns go out as sent.
    pins: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _positions(self) -> CompactionEvent:
        if self.kept_from_seq is not None and self.kept_until_seq is not None:
            if self.covered_from_seq is None:
                self.covered_from_seq = 1
        elif self.kept_from is not None and self.kept_until is not None:
            if self.covered_from is None:
                self.covered_from = 0
        else:
            raise ValueError(
                "a compaction event names the log messages it keeps: kept_from_seq and kept_until_seq "
                "(events written before log positions: kept_from and kept_until, view indices)"
            )
        return self

    @model_serializer(mode="wrap")
    def _only_given_positions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An event is written with the one kind of position it has; the other kind stays absent.
        data = handler(self)
        for name in (*_SEQ_FIELDS, *_VIEW_FIELDS, "condensed", "block", "prefix_start",
                     "prefix_cut", "pins"):  # absent unless they happened
            if name in data and data[name] in (None, []):
                del data[name]
        return data

    def in_view(self, history: History) -> ViewSpan:
        """The event's positions as view indices of `history` (the log it was made from, or a longer one)."""
        if self.kept_from_seq is None or self.kept_until_seq is None:
            return ViewSpan(self.covered_from or 0, self.kept_from or 0, self.kept_until or 0)
        return ViewSpan(
            history.view_index(self.covered_from_seq or 1),
            history.view_index(self.kept_from_seq),
            history.view_length(self.kept_until_seq),
        )

    @cached_property
    def messages(self) -> list[Message]:
        """What stands for the compacted messages in a request: the API's block, alone in an assistant message
        (where the docs put it: first in ``messages``), or baton's compact prompt and the summary."""
        if self.block is not None:
            return [Message(role="assistant", content=[CompactionBlock.model_validate(self.block)])]
        text = f"<compact_summary>{json.dumps(self.summary, ensure_ascii=False, sort_keys=True)}</compact_summary>"
        return [
            Message(role="user", content=[TextBlock(text=self.prompt)]),
            Message(role="assistant", content=[TextBlock(text=text)]),
        ]

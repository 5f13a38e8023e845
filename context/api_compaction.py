"""The ``api`` compactor: the API writes the summary (on-demand compaction, beta ``compact-2026-09-04``).

Why beside baton's own: thinking in the turns kept after a summary baton wrote can never be sent back
valid (what precedes it changed), while a summary the API wrote keeps it valid when the kept turns follow
it unchanged, ``system`` and ``tools`` are the same and the compaction ran on a model with preserved
thinking (platform docs, "Compaction and preserved thinking"). baton's keep-last-N design is that shape:

- the compaction request is the step's assembled request cut before the kept steps (the summarised part,
  whose prefix the steps cached), with the role's compact prompt as the API's ``instructions`` (it asks for
  the role's summary schema, as baton's own summary does) and no ``context_management`` (the API refuses
  the two together);
- the API answers with one signed ``compaction`` block (stop reason ``compaction``); later requests send it
  first, alone in an assistant message, then the kept turns exactly as they were sent, then the pinned
  opening appended to the last message at compaction (``Assembler._api_pin``);
- its summary is parsed against the role's schema, redacted and recorded like baton's own, and the block is
  kept in the event exactly as returned (its signature covers the text, so it is never edited).

Anything else falls back to baton's own summary (``context.compaction``) with the reason in the event: no
API call (the simulated model), a stop reason other than ``compaction``, no block or one with no content, a
refused request (the beta, the model), a summary that does not match the schema, or one holding a secret
(it could only be sent back as it is).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel

from context.assembly import Assembled, Assembler, StaticPrefix, kept_from, request_body, with_cache_control
from context.compaction import SummaryCompactor, SummaryError, parse_summary, size_after
from context.compaction_event import CompactionEvent
from context.messages import CompactionBlock, Message, Usage
from context.redaction import redact, redact_value
from context.reminders import split_reminders, takes_system_messages
from context.summary_cap import cap_tokens, condense_note, enforce

MAX_INSTRUCTIONS = 16_384  # characters the API takes as `instructions` (platform docs, "Compaction on demand")


class CompactionReply(BaseModel):
    """What the API answered a compaction request: its block (None when it wrote none), why it stopped."""

    block: CompactionBlock | None = None
    stop_reason: str | None = None
    usage: Usage | None = None


class Unplannable(ValueError):
    """The kept steps are not the tail of the request as sent (trimmed, compressed): nothing to cut at."""


@dataclass(frozen=True)
class CompactionRequest:
    """The summarised part of the step's request, where its cache breakpoints go, and the instructions."""

    messages: tuple[Message, ...]
    breakpoints: tuple[int, ...]
    instructions: str

    def to_request(self, static: StaticPrefix, *, model: str, max_tokens: int, ttl: str = "5m",
                   **extra: Any) -> dict[str, Any]:
        """The Messages API body: the steps' system, tools and breakpoints (a cache read of their prefix), and
        the ``compaction`` parameter. ``ttl`` "1h": a pre-warm of this prefix (``agents/cache_prewarm.py``)."""
        forms = [with_cache_control(m, ttl=ttl) if i in self.breakpoints else m.api
                 for i, m in enumerate(self.messages)]
        if takes_system_messages(model):
            forms = split_reminders(list(self.messages), forms)
        body = request_body(static, forms, model=model, max_tokens=max_tokens, ttl=ttl)
        return body | {"compaction": {"type": "summarize", "instructions": self.instructions}} | extra


CompactionCall = Callable[[CompactionRequest, float], CompactionReply]
"""(compaction request, timeout in seconds) -> the API's reply. Raise on a model error (a refused beta too)."""


def plan(assembler: Assembler, assembled: Assembled, keep: int) -> tuple[Message, ...]:
    """The messages of `assembled` before the kept steps view[keep:], which it must end with, sent as they
    are. A request whose tail was trimmed or compressed has no such cut."""
    n_tail = len(assembler.history.view) - keep
    if assembled.trimmed_steps:
        raise Unplannable(f"the request's {assembled.trimmed_steps} newest step(s) were trimmed to fit the window")
    if n_tail <= 0 or n_tail >= len(assembled.messages):
        raise Unplannable("nothing to summarise before the kept steps")
    # The kept steps go out as the last request sent them (thinking the chain left out stays left out): the
    # request's tail must be those view messages, one for one.
    sent = assembled.messages[-n_tail:]
    kept = [assembler.history.view[i] for i in range(keep, len(assembler.history.view))]
    if [m.role for m in sent] != [m.role for m in kept] or \
            sum(1 for m in sent if m.tool_uses) != sum(1 for m in kept if m.tool_uses):
        raise Unplannable("the kept steps are not the tail of the request as it was sent")
    return tuple(assembled.messages[:-n_tail])


def compaction_request(assembler: Assembler, previous: CompactionEvent | None, prompt: str
                       ) -> tuple[CompactionRequest, Assembled, int]:
    """The compaction request as the context stands (and the step request it is cut from, and where the kept
    steps start): the messages before the kept steps, the step's breakpoints among them and one on the last of
    them, whose entry a pre-warm at a handoff may have written for an hour."""
    history, policy = assembler.history, assembler.policy
    assembled = assembler.assemble(previous)
    base = previous.in_view(history).kept_from if previous else 0
    keep = kept_from(history, base, policy.keep_last_steps)
    summarised = plan(assembler, assembled, keep)
    cap = cap_tokens(policy.summary_cap_share, policy.threshold)
    instructions = (prompt + condense_note(previous.summary if previous else None, cap))[:MAX_INSTRUCTIONS]
    marks = sorted({*[b for b in assembled.breakpoints if b < len(summarised) - 1][-2:], len(summarised) - 1})
    return CompactionRequest(summarised, tuple(marks), instructions), assembled, keep


def fell_back(reason: str, event: CompactionEvent) -> CompactionEvent:
    """baton's own summary, saying why the API's was not used."""
    said = f"the API's compaction was not used ({reason}); baton's own summary instead"
    return event.model_copy(update={"error": f"{said}; {event.error}" if event.error else said})


class ApiCompactor:
    """Compaction by the API's on-demand summary (named ``api`` in ``Policy``); when: as baton's own."""

    def __init__(self) -> None:
        self._own = SummaryCompactor()

    def should_compact(self, assembler: Assembler, assembled: Assembled, event: CompactionEvent | None) -> bool:
        return self._own.should_compact(assembler, assembled, event)

    def request_fields(self, event: CompactionEvent | None) -> dict[str, Any]:
        return {}  # the block is in the messages

    def compact(self, assembler: Assembler, previous: CompactionEvent | None, *,
                compaction_call: CompactionCall | None = None, **inputs: Any) -> CompactionEvent:
        """The event of a new compaction: the API's block when it wrote a usable one, else baton's own summary.
        `inputs` are ``context.compaction.compact``'s (schema, prompt, call, breaker, facts, timeout_s)."""
        if compaction_call is None:
            return fell_back("no API compaction for this model (the simulated model has none)",
                             self._own.compact(assembler, previous, **inputs))
        try:
            event = self._api_event(assembler, previous, compaction_call, **inputs)  # `call` is the summary's
        except (Unplannable, SummaryError) as exc:
            return fell_back(str(exc), self._own.compact(assembler, previous, **inputs))
        except Exception as exc:  # a refused beta or model, an unavailable API: the model error says which
            return fell_back(f"{type(exc).__name__}: {exc}", self._own.compact(assembler, previous, **inputs))
        return event.model_copy(update={"tokens_after": size_after(assembler, event)})

    def _api_event(self, assembler: Assembler, previous: CompactionEvent | None, ask: CompactionCall, *,
                   schema: Any, prompt: str, timeout_s: float = 120.0, **_own: Any) -> CompactionEvent:
        history, policy = assembler.history, assembler.policy
        started = datetime.now(timezone.utc)
        asked, assembled, keep = compaction_request(assembler, previous, prompt)
        summarised = asked.messages
        # A pin an earlier API compaction appended to a message kept again stays on it: the kept turns go as sent.
        pins = [{"seq": max(history.seqs_at(at)), "text": block.text} for at, block in assembler.pins if at >= keep]
        cap = cap_tokens(policy.summary_cap_share, policy.threshold)
        note = condense_note(previous.summary if previous else None, cap)
        reply = ask(asked, timeout_s)
        block = reply.block
        if reply.stop_reason != "compaction" or block is None or not block.content:
            what = "no block" if block is None else "a block with no content"
            raise SummaryError(f"the API stopped with {reply.stop_reason!r} and {what}")
        if redact(block.content) != block.content:
            raise SummaryError("the API's summary holds a secret, and a signed block can only be sent back as it is")
        summary = parse_summary(block.content, schema)
        if previous:  # baton's record carries key paths forward, as its own summaries do
            summary["key_paths"] = {**previous.summary.get("key_paths", {}), **summary.get("key_paths", {})}
        summary, enforced = enforce(summary, schema.narrative, cap)  # the record only: the block stays as sent
        return CompactionEvent(
            id=(previous.id + 1) if previous else 1, covered_from_seq=1, kept_from_seq=history.seq_at(keep),
            kept_until_seq=history.raw_count, prompt=prompt, summary=redact_value(summary),
            tokens_before=assembled.estimated_input, usage=reply.usage, strategy="api",
            block=block.model_dump(exclude_none=True), prefix_start=assembler.static.digest, pins=pins,
            prefix_cut=assembled.chain.ends[len(summarised) - 1] if assembled.chain else None,
            condensed="+".join(w for w, done in (("asked", bool(note)), ("enforced", enforced)) if done) or None,
            duration_s=round((datetime.now(timezone.utc) - started).total_seconds(), 3),
            at=started.isoformat(timespec="seconds"),
        )

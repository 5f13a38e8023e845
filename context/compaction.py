"""The ``summary`` compactor, pure: the model call is injected as a callable.

A compaction asks the agent's own model to summarise the current context as
JSON, validates the summary against the schema the agent passes in (one retry
with the error, then a deterministic fallback), and returns a `CompactionEvent`
naming the log messages the summary stands for. The log is never touched; the
next assembly reads the event. The schemas of baton's roles are in
``context.summary_schemas``; this module defines what a schema must provide.

The summary request (`SummaryRequest`) is the step's assembled request plus the
compact prompt, with the cache breakpoints the last step request had, so the
history it shares with the steps is a cache read (docs/context.md, "Compaction").
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import cached_property
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from context.assembly import (
    Assembled,
    Assembler,
    ContextOverflow,
    StaticPrefix,
    kept_from,
    request_body,
    with_cache_control,
)
from context.compaction_event import CompactionEvent
from context.compression import archive_ref
from context.history import History
from context.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from context.redaction import redact_value
from context.reminders import split_reminders, takes_system_messages
from context.summary_cap import cap_tokens, condense_note, enforce

SUMMARY_TAG = re.compile(r"<compact_summary>(.*?)</compact_summary>", re.DOTALL)
NO_TOOLS = (
    "[baton] No tool runs while the context is being summarised. Reply with the summary only, as asked, "
    "inside <compact_summary>...</compact_summary>."
)
RETRY = (
    "That summary was not usable: {error}. "
    "Reply with the corrected JSON inside <compact_summary>…</compact_summary>."
)


# ---- what a summary schema provides ------------------------------------------------


class KnownFacts(BaseModel):
    """What baton itself knows, to build a summary without the model."""

    scenario: str = ""
    iteration: int = 0
    execution_output_dir: str | None = None
    design_files: list[str] = Field(default_factory=list)
    last_report: dict[str, Any] | None = None
    target_success_rate: float | None = None  # from scenario.toml, when the caller knows it
    key_paths: dict[str, Any] = Field(default_factory=dict)


class FallbackEvidence(BaseModel):
    """What a schema's fallback summary is built from: the facts and what the context shows."""

    facts: KnownFacts
    written: list[str]  # files the agent wrote or edited, in order of first write
    todos: list[str]  # its open todo items
    last_text: str  # the last thing it said
    key_paths: dict[str, Any]  # carried forward from the previous summary, with the facts' and the archive's

    @property
    def report(self) -> dict[str, Any]:
        return self.facts.last_report or {}


class SummarySchema(BaseModel):
    """A role's summary, as the compactor needs it.

    The model validates the summary (extra keys allowed), `label` names the
    schema in error messages, and `fallback` builds a summary of this shape
    without the model. Every schema has a `key_paths` field: it is carried
    forward from one summary to the next, so a later summary cannot lose a path.
    """

    model_config = ConfigDict(extra="allow")
    label: ClassVar[str]
    # Fields (dotted paths) a condensed summary empties first: the story, not the state (context.summary_cap).
    narrative: ClassVar[tuple[str, ...]] = ("last_assistant_text", "recent_tool_results", "files_written")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "key_paths" not in cls.model_fields:
            raise TypeError(f"summary schema {cls.__name__} needs a key_paths field: it is carried forward")

    @classmethod
    def fallback(cls, evidence: FallbackEvidence) -> dict[str, Any]:
        """The summary of this shape built from `evidence` alone."""
        raise NotImplementedError(f"summary schema {cls.__name__} has no fallback")


class SummaryError(ValueError):
    """The model's summary is unusable; the message says what to fix."""


def parse_summary(text: str, schema: type[SummarySchema]) -> dict[str, Any]:
    """Extract and validate the JSON inside <compact_summary>…</compact_summary>."""
    match = SUMMARY_TAG.search(text or "")
    if not match:
        raise SummaryError("no <compact_summary>…</compact_summary> block found; put the JSON summary inside that tag")
    raw = match.group(1).strip()
    if raw.startswith("```"):  # tolerate a fenced block inside the tag
        raw = raw.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        where = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        raise SummaryError(f"the summary is not valid JSON ({where})") from None
    if not isinstance(data, dict):
        raise SummaryError("the summary must be a JSON object with the required keys")
    try:
        schema.model_validate(data)
    except ValidationError as exc:
        issues = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:8])
        raise SummaryError(f"the summary does not match the {schema.label} schema: {issues}") from None
    return data


# ---- the deterministic fallback --------------------------------------------------


def _written_files(history: History, end: int) -> list[str]:
    paths: dict[str, None] = {}
    for msg in history.view[:end]:
        for use in msg.tool_uses:
            path = use.input.get("file_path") or use.input.get("path")
            if use.name in ("Write", "Edit", "MultiEdit") and isinstance(path, str):
                paths[path] = None
    return list(paths)


def _open_todos(history: History, end: int) -> list[str]:
    for msg in reversed(history.view[:end]):
        for use in reversed(msg.tool_uses):
            if use.name == "TodoWrite":
                todos = use.input.get("todos") or []
                return [str(t.get("content", t)) for t in todos
                        if isinstance(t, dict) and t.get("status") != "completed"]
    return []


def _last_assistant_text(history: History, end: int, limit: int = 1_500) -> str:
    for msg in reversed(history.view[:end]):
        if msg.role == "assistant" and msg.said.strip():
            return msg.said.strip()[:limit]
    return ""


def _recent_results(history: History, agent: str, end: int, limit: int = 20) -> list[str]:
    """Archive references of the latest tool results the summary stands for, so the
    agent can Read them back after they left the context."""
    refs: list[str] = []
    for i in range(end - 1, -1, -1):
        msg = history.view[i]
        if msg.role != "user" or not msg.tool_results or i == 0:
            continue
        uses = {u.id: u for u in history.view[i - 1].tool_uses}
        for r in reversed(msg.tool_results):
            use = uses.get(r.tool_use_id)
            what = json.dumps(use.input, ensure_ascii=False, sort_keys=True)[:120] if use else ""
            refs.append(f"{use.name if use else 'tool'} {what} -> {archive_ref(agent, r.tool_use_id)}")
            if len(refs) >= limit:
                return refs
    return refs


def fallback_summary(
    schema: type[SummarySchema], history: History, end: int, facts: KnownFacts, agent: str, previous: dict | None
) -> dict[str, Any]:
    """The schema's summary of view[:end] built from what baton knows, marked `"fallback": true`."""
    written = _written_files(history, end)
    last_text = _last_assistant_text(history, end)
    key_paths = {**(previous or {}).get("key_paths", {}), **facts.key_paths}
    key_paths.setdefault("tool_results_archive", f"state/{agent}/tool_results/")
    evidence = FallbackEvidence(facts=facts, written=written, todos=_open_todos(history, end), last_text=last_text,
                                key_paths=key_paths)
    summary = schema.fallback(evidence)
    summary.update(
        fallback=True,
        scenario=facts.scenario,
        iteration=facts.iteration,
        files_written=written,
        last_assistant_text=last_text,
        recent_tool_results=_recent_results(history, agent, end),
    )
    return summary


# ---- the circuit breaker and the compaction itself --------------------------------


class CircuitBreaker(BaseModel):
    """Stops asking the model for summaries after repeated failures in a session."""

    limit: int = 3
    consecutive_failures: int = 0

    @property
    def open(self) -> bool:
        return self.consecutive_failures >= self.limit

    def record(self, ok: bool) -> None:
        self.consecutive_failures = 0 if ok else self.consecutive_failures + 1

    @property
    def status(self) -> str:
        if self.open:
            return (f"summaries by the model are off for this session after {self.consecutive_failures} "
                    "failures in a row; using the fallback")
        return "ok"


class SummaryReply(BaseModel):
    text: str
    usage: Usage | None = None
    # The summary request keeps the steps' tools (a change of tool_choice would invalidate the cached
    # messages), so a reply may call one instead of answering: it is asked once more (``NO_TOOLS``).
    tool_uses: list[ToolUseBlock] = Field(default_factory=list)


@dataclass(frozen=True)
class SummaryRequest(Sequence[Message]):
    """The summary call's messages: the step's assembled messages, the compact prompt after them (merged
    into a trailing user message), any retry exchange, and where the cache breakpoints go.

    It is a sequence of its messages (what the model reads). `to_request` is the API body with the
    breakpoints: on the system prompt, and on the messages the last step request had them on
    (`summary_breakpoints`), so the history the steps already cached is read at 0.1x, not paid in full.
    """

    context: tuple[Message, ...]  # the step's assembled messages, unchanged
    prompt: str
    breakpoints: tuple[int, ...]  # indices into `context`: the last block of each gets cache_control
    followups: tuple[Message, ...] = ()  # a retry: the unusable reply and the error

    @cached_property
    def messages(self) -> list[Message]:
        msgs = list(self.context)
        ask = TextBlock(text=self.prompt)
        if msgs and msgs[-1].role == "user":
            msgs[-1] = Message(role="user", content=[*msgs[-1].content, ask])
        else:
            msgs.append(Message(role="user", content=[ask]))
        return msgs + list(self.followups)

    def __getitem__(self, index):  # type: ignore[override]  # a Sequence's int and slice forms
        return self.messages[index]

    def __len__(self) -> int:
        return len(self.messages)

    def retry(self, reply: str, error: str) -> SummaryRequest:
        """The same request followed by the unusable reply and the error to fix."""
        exchange = (Message(role="assistant", content=[TextBlock(text=reply or "(empty)")]),
                    Message(role="user", content=[TextBlock(text=RETRY.format(error=error))]))
        return replace(self, followups=self.followups + exchange)

    def refuse_tools(self, reply: SummaryReply) -> SummaryRequest:
        """The same request followed by the reply that called tools and an answer to each call saying why
        none ran: every tool_use must be answered, and the next reply should be the summary."""
        said = [TextBlock(text=reply.text)] if reply.text else []
        results = [ToolResultBlock(tool_use_id=u.id, content=NO_TOOLS, is_error=True) for u in reply.tool_uses]
        exchange = (Message(role="assistant", content=[*said, *reply.tool_uses]),
                    Message(role="user", content=[*results, TextBlock(text=NO_TOOLS)]))
        return replace(self, followups=self.followups + exchange)

    def api_messages(self, model: str) -> list[dict[str, Any]]:
        """The messages in request form for `model`, cache_control on the breakpoints' blocks. Merging the
        prompt only appends a block, so a breakpoint stays on the block the step request had it on, and
        baton's reminders go out as the step requests sent them (``context.reminders``); the ones the prompt
        now follows are user text, as a system message may not come before it."""
        marks = {i: len(self.context[i].content) - 1 for i in self.breakpoints}
        forms = [with_cache_control(m, marks[i]) if i in marks else m.api for i, m in enumerate(self.messages)]
        return split_reminders(self.messages, forms) if takes_system_messages(model) else forms

    def to_request(self, static: StaticPrefix, *, model: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
        """The Messages API body: at most 4 breakpoints, one for the static prefix and 3 on messages."""
        return request_body(static, self.api_messages(model), model=model, max_tokens=max_tokens) | extra


def summary_breakpoints(assembled: Assembled) -> tuple[int, ...]:
    """Where the summary request puts its message breakpoints: where the last step request had them.

    That request wrote cache entries at the previous batch end, the stable end and its own last message,
    the user message before the newest step; the summary request shares that prefix, so a breakpoint at
    each reads it. The newest step was never sent (it is why the context is compacted), and the summary
    request is sent once: a breakpoint after the newest step would only write what no request reads (1.25x).
    """
    marks = set(assembled.breakpoints[:-1])  # the last one marks the newest message
    newest_step = max((i for i, m in enumerate(assembled.messages) if m.role == "assistant"), default=0)
    if newest_step - 1 > max(marks, default=-1):
        marks.add(newest_step - 1)
    return tuple(sorted(marks))


def summary_request(assembled: Assembled, prompt: str) -> SummaryRequest:
    """The current context plus the compact prompt, with the last step request's cache breakpoints."""
    return SummaryRequest(tuple(assembled.messages), prompt, summary_breakpoints(assembled))


SummaryCall = Callable[[SummaryRequest, float], SummaryReply]
"""(summary request, timeout in seconds) -> reply. Send ``request.to_request(static, ...)`` (its cache
breakpoints included); raise on any model error or timeout."""


def _ask_model(
    request: SummaryRequest, schema: type[SummarySchema], call: SummaryCall, timeout_s: float
) -> tuple[dict[str, Any] | None, Usage | None, str | None]:
    """(summary or None, usage of the last reply, the last error): the first answer, then one retry with the error."""
    summary, usage, error = None, None, None
    for _attempt in range(2):
        try:
            reply = call(request, timeout_s)
            usage = reply.usage
            if reply.tool_uses:
                error = f"the summary reply called {', '.join(u.name for u in reply.tool_uses)} instead of answering"
                request = request.refuse_tools(reply)
                continue
            return parse_summary(reply.text, schema), usage, error
        except SummaryError as exc:
            error = str(exc)
            request = request.retry(reply.text, error)
        except Exception as exc:  # model unavailable, timeout: fall back at once
            return None, usage, f"{type(exc).__name__}: {exc}"
    return summary, usage, error


def compact(
    *,
    schema: type[SummarySchema],
    assembler: Assembler,
    previous: CompactionEvent | None,
    prompt: str,
    call: SummaryCall | None,
    breaker: CircuitBreaker,
    facts: KnownFacts | None = None,
    timeout_s: float = 120.0,
    clock: Callable[[], float] = time.monotonic,
) -> CompactionEvent:
    """Summarise the current context as `schema` says and return the compaction event.

    The summary request is the current context (whose first layer is the
    previous summary, so knowledge carries forward, and the pinned opening) plus
    the compact prompt; `call` gets it as a `SummaryRequest`.
    """
    started = clock()
    history, agent = assembler.history, assembler.agent
    try:
        assembled: Assembled | None = assembler.assemble(previous)
        tokens_before = assembled.estimated_input
    except ContextOverflow as exc:  # not even trimmed does the context fit: no summary request can be sent
        assembled, tokens_before = None, exc.needed
    base = previous.in_view(history).kept_from if previous else 0
    keep = kept_from(history, base, assembler.policy.keep_last_steps)
    summary, usage, error = None, None, None
    cap = cap_tokens(assembler.policy.summary_cap_share, assembler.policy.threshold)
    note = condense_note(previous.summary if previous else None, cap)
    if assembled is None:
        error = "the context does not fit the window even trimmed, so no summary request could be sent"
    elif call is not None and not breaker.open:
        summary, usage, error = _ask_model(summary_request(assembled, prompt + note), schema, call, timeout_s)
        breaker.record(summary is not None)
    elif call is not None:
        error = breaker.status
    fallback = summary is None
    if summary is None:
        summary = fallback_summary(schema, history, keep, facts or KnownFacts(), agent,
                                   previous.summary if previous else None)
    elif previous:  # carry key paths forward: a later summary may forget one
        summary["key_paths"] = {**previous.summary.get("key_paths", {}), **summary.get("key_paths", {})}
    summary, enforced = enforce(summary, schema.narrative, cap)
    condensed = "+".join(w for w, done in (("asked", bool(note)), ("enforced", enforced)) if done) or None
    event = CompactionEvent(
        id=(previous.id + 1) if previous else 1,
        covered_from_seq=1,  # the summary stands for everything before the kept steps, earlier summaries included
        kept_from_seq=history.seq_at(keep),
        kept_until_seq=history.raw_count,
        prompt=prompt,
        summary=redact_value(summary),
        tokens_before=tokens_before,
        duration_s=round(clock() - started, 3),
        usage=usage,
        fallback=fallback,
        error=error,
        condensed=condensed,
        at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    return event.model_copy(update={"tokens_after": size_after(assembler, event)})


def size_after(assembler: Assembler, event: CompactionEvent) -> int:
    """The estimated input of the next request assembled from ``event``. When even that does not fit (what is left
    is larger than the window: an opening, a tool call's input), the smallest request's size: the event is still
    recorded, and the step that meets the overflow says so (``agents.step_request``), never a crash here."""
    try:
        return assembler.assemble(event).estimated_input
    except ContextOverflow as exc:
        return exc.needed


class SummaryCompactor:
    """Compaction by a summary of the agent's own model (the default, named ``summary`` in ``Policy``)."""

    def should_compact(self, assembler: Assembler, assembled: Assembled, event: CompactionEvent | None) -> bool:
        """Over the threshold, and a compaction would cover something new. When the kept
        steps alone are over it, compacting again cannot help: assembly's emergency trim
        keeps the request inside the window."""
        policy, history = assembler.policy, assembler.history
        base = event.in_view(history).kept_from if event else 0
        return assembled.estimated_input > policy.threshold and kept_from(history, base, policy.keep_last_steps) > base

    def compact(self, assembler: Assembler, previous: CompactionEvent | None, **inputs: Any) -> CompactionEvent:
        """The event of a new compaction; `inputs` are `compact`'s other arguments (schema, prompt, call, ...).
        The API compactor's own input (its call) is not one of them."""
        inputs.pop("compaction_call", None)
        return compact(assembler=assembler, previous=previous, **inputs)

    def request_fields(self, event: CompactionEvent | None) -> dict[str, Any]:
        return {}  # the summary is in the messages: nothing to add to the request

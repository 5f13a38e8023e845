"""Compaction (SPEC §5), pure: the model call is injected as a callable.

A compaction asks the agent's own model to summarise the current context as
JSON, validates the summary against the role's schema (one retry with the
error, then a deterministic fallback), and returns a `CompactionEvent` saying
which view range the summary stands for. The log is never touched; the next
assembly reads the event.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from context.assembly import Assembled, Assembler, CompactionEvent, kept_from
from context.compression import archive_ref
from context.history import History
from context.messages import Message, TextBlock, Usage
from context.redaction import redact_value

Role = Literal["init", "execute"]
SUMMARY_TAG = re.compile(r"<compact_summary>(.*?)</compact_summary>", re.DOTALL)


# ---- the role schemas (SPEC §5) ---------------------------------------------------


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class DesignSummary(_Open):
    unified_scenario_design: str
    business_rules_key_points: list[str]
    format_specifications: str | dict[str, Any]


class FeedbackSummary(_Open):
    execution_output_dir: str | None
    total_failure_samples: int
    layer1_problems_summary: list[str]


class InitSummary(_Open):
    current_design_summary: DesignSummary
    execute_feedback_summary: FeedbackSummary
    analysis_conclusions: list[str]
    pending_actions: list[str]
    key_paths: dict[str, Any]


class GeneratedComponents(_Open):
    tools: list[str]
    checkers: list[str]
    samples: int | list[str] | str


class EvaluationProgress(_Open):
    current_iteration: int
    success_rate: float | None
    layer_status: dict[str, Any] | str


class IdentifiedIssues(_Open):
    layer2_problems: list[str]
    layer3_problems: list[str]
    fix_attempts: list[str]


class ExecuteKeyPaths(_Open):
    execution_output_dir: str | None


class ExecuteSummary(_Open):
    generated_components: GeneratedComponents
    evaluation_progress: EvaluationProgress
    identified_issues: IdentifiedIssues
    pending_work: list[str]
    key_paths: ExecuteKeyPaths


SCHEMAS: dict[str, type[BaseModel]] = {"init": InitSummary, "execute": ExecuteSummary}


class SummaryError(ValueError):
    """The model's summary is unusable; the message says what to fix."""


def parse_summary(text: str, role: Role) -> dict[str, Any]:
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
        raise SummaryError(f"the summary is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(data, dict):
        raise SummaryError("the summary must be a JSON object with the required keys")
    try:
        SCHEMAS[role].model_validate(data)
    except ValidationError as exc:
        issues = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:8])
        raise SummaryError(f"the summary does not match the {role} schema: {issues}") from None
    return data


# ---- the deterministic fallback --------------------------------------------------


class KnownFacts(BaseModel):
    """What baton itself knows, to build a summary without the model."""

    scenario: str = ""
    iteration: int = 0
    execution_output_dir: str | None = None
    design_files: list[str] = Field(default_factory=list)
    last_report: dict[str, Any] | None = None
    key_paths: dict[str, Any] = Field(default_factory=dict)


def _written_files(history: History, end: int) -> list[str]:
    paths: dict[str, None] = {}
    for msg in history.view[:end]:
        for use in msg.tool_uses:
            if use.name in ("Write", "Edit", "MultiEdit") and isinstance(use.input.get("file_path") or use.input.get("path"), str):
                paths[use.input.get("file_path") or use.input.get("path")] = None
    return list(paths)


def _open_todos(history: History, end: int) -> list[str]:
    for msg in reversed(history.view[:end]):
        for use in reversed(msg.tool_uses):
            if use.name == "TodoWrite":
                todos = use.input.get("todos") or []
                return [str(t.get("content", t)) for t in todos if isinstance(t, dict) and t.get("status") != "completed"]
    return []


def _last_assistant_text(history: History, end: int, limit: int = 1_500) -> str:
    for msg in reversed(history.view[:end]):
        if msg.role == "assistant" and msg.text.strip():
            return msg.text.strip()[:limit]
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


def fallback_summary(role: Role, history: History, end: int, facts: KnownFacts, agent: str, previous: dict | None) -> dict[str, Any]:
    """The role's summary built from what baton knows, marked `"fallback": true`."""
    written = _written_files(history, end)
    todos = _open_todos(history, end)
    last_text = _last_assistant_text(history, end)
    report = facts.last_report or {}
    key_paths = {**(previous or {}).get("key_paths", {}), **facts.key_paths}
    key_paths.setdefault("tool_results_archive", f"state/{agent}/tool_results/")
    recent = _recent_results(history, agent, end)
    if role == "init":
        summary: dict[str, Any] = {
            "current_design_summary": {
                "unified_scenario_design": last_text,
                "business_rules_key_points": [],
                "format_specifications": "",
            },
            "execute_feedback_summary": {
                "execution_output_dir": facts.execution_output_dir,
                "total_failure_samples": int(report.get("failed", 0) or 0),
                "layer1_problems_summary": list(report.get("layer1_problems_summary", []))[:20],
            },
            "analysis_conclusions": [],
            "pending_actions": todos,
            "key_paths": {**key_paths, "design_files": facts.design_files or written},
        }
    else:
        summary = {
            "generated_components": {
                "tools": [p for p in written if "/tools/" in p],
                "checkers": [p for p in written if "/checkers/" in p],
                "samples": len([p for p in written if "/samples/" in p]),
            },
            "evaluation_progress": {
                "current_iteration": facts.iteration,
                "success_rate": report.get("success_rate"),
                "layer_status": report.get("failures_per_layer", {}),
            },
            "identified_issues": {"layer2_problems": [], "layer3_problems": [], "fix_attempts": []},
            "pending_work": todos,
            "key_paths": {**key_paths, "execution_output_dir": facts.execution_output_dir or key_paths.get("execution_output_dir")},
        }
    summary.update(
        fallback=True,
        scenario=facts.scenario,
        iteration=facts.iteration,
        files_written=written,
        last_assistant_text=last_text,
        recent_tool_results=recent,
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
            return f"summaries by the model are off for this session after {self.consecutive_failures} failures in a row; using the fallback"
        return "ok"


class SummaryReply(BaseModel):
    text: str
    usage: Usage | None = None


SummaryCall = Callable[[list[Message], float], SummaryReply]
"""(request messages, timeout in seconds) -> reply. Raise on any model error or timeout."""


def summary_request(assembled: Assembled, prompt: str) -> list[Message]:
    """The current context plus the compact prompt (merged into a trailing user message)."""
    msgs = list(assembled.messages)
    ask = TextBlock(text=prompt)
    if msgs and msgs[-1].role == "user":
        msgs[-1] = Message(role="user", content=[*msgs[-1].content, ask])
    else:
        msgs.append(Message(role="user", content=[ask]))
    return msgs


def compact(
    *,
    role: Role,
    assembler: Assembler,
    previous: CompactionEvent | None,
    prompt: str,
    call: SummaryCall | None,
    breaker: CircuitBreaker,
    facts: KnownFacts | None = None,
    timeout_s: float = 120.0,
    clock: Callable[[], float] = time.monotonic,
) -> CompactionEvent:
    """Summarise the current context and return the compaction event.

    The summary request is the current context (whose first layer is the
    previous summary, so knowledge carries forward) plus the compact prompt.
    """
    started = clock()
    history, agent = assembler.history, assembler.agent
    assembled = assembler.assemble(previous)
    base = previous.kept_from if previous else 0
    keep = kept_from(history, base, assembler.policy.keep_last_steps)
    request = summary_request(assembled, prompt)
    summary, usage, error = None, None, None
    if call is not None and not breaker.open:
        for _attempt in range(2):  # the first answer, then one retry with the error
            try:
                reply = call(request, timeout_s)
                usage = reply.usage
                summary = parse_summary(reply.text, role)
                break
            except SummaryError as exc:
                error = str(exc)
                request = [*request, Message(role="assistant", content=[TextBlock(text=reply.text or "(empty)")]),
                           Message(role="user", content=[TextBlock(text=f"That summary was not usable: {exc}. Reply with the corrected JSON inside <compact_summary>…</compact_summary>.")])]
            except Exception as exc:  # model unavailable, timeout: fall back at once
                error = f"{type(exc).__name__}: {exc}"
                break
        breaker.record(summary is not None)
    elif call is not None:
        error = breaker.status
    fallback = summary is None
    if fallback:
        summary = fallback_summary(role, history, keep, facts or KnownFacts(), agent, previous.summary if previous else None)
    elif previous:  # carry key paths forward: a later summary may forget one
        summary["key_paths"] = {**previous.summary.get("key_paths", {}), **summary.get("key_paths", {})}
    summary = redact_value(summary)
    event = CompactionEvent(
        id=(previous.id + 1) if previous else 1,
        covered_from=0,
        kept_from=keep,
        kept_until=len(history),
        prompt=prompt,
        summary=summary,
        tokens_before=assembled.estimated_input,
        duration_s=round(clock() - started, 3),
        usage=usage,
        fallback=fallback,
        error=error,
        at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    return event.model_copy(update={"tokens_after": assembler.assemble(event).estimated_input})

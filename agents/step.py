"""One durable agent step (SPEC §8), without any Celery.

``run_step(root, agent, step)``:

1. loads the agent's log from disk; if the last step's tool calls have no
   persisted results, it finishes them first (results already archived are
   reused, so a tool that finished before a crash is not run again);
2. if the context is over the threshold (or the API said "prompt too long"),
   returns ``compaction_needed`` instead of compacting inline;
3. otherwise assembles the request, calls the model, persists the response,
   runs the tools one by one (each result archived as it completes), persists
   the results and says what happens next.

The step number is the fencing token: step k is the k-th model response in
the log. A call for a step that is already done, or not yet due, does nothing.
A response that was persisted is never requested again; a crash between the
model call and persisting its answer means that request is sent once more
(nothing was kept, so nothing can be reused).

``run_compaction`` is the separate compaction task; ``run_turn`` drives an
agent in-process until its turn ends (tests, embedded mode).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agents.config import AgentConfig
from agents.models import Model, ModelError, ModelRequest, PromptTooLong
from agents.prompts import prompt
from agents.tooling import ToolContext, definition, parse_envelope, run_tool
from agents.toolset import tools_for
from context.assembly import Assembler, CompactionEvent, ContextOverflow, StaticPrefix
from context.compaction import CircuitBreaker, KnownFacts, SummaryReply, compact
from context.compression import archive_ref
from context.history import History
from context.messages import Message, TextBlock, ToolResultBlock, parse_message
from context.redaction import redact_message, redact_value
from context.tokens import TokenEstimator
from scenarios.store import (
    Layout,
    append_jsonl,
    read_json,
    read_jsonl,
    relative,
    write_atomic,
    write_json,
)

Role = Literal["init", "execute"]
Status = Literal["continue", "compaction_needed", "handoff", "failed", "skipped", "idle"]
Fault = Callable[[str, int], None]  # (point, step): tests inject crashes here

# After this many replies in a row without any tool call, the turn fails.
MAX_NUDGES = 3
NUDGE = (
    "[baton] Your reply had no tool call, but a turn only ends with SubmitHandoff. "
    "Continue the work with the tools, then call SubmitHandoff with your payload."
)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _no_fault(_point: str, _step: int) -> None:
    pass


class StepOutcome(BaseModel):
    agent: Role
    step: int
    status: Status
    reason: str = ""
    iteration: int = 0
    tokens_in_context: int = 0
    threshold: int = 0
    handoff_path: str | None = None
    model: str = ""


class AgentState(BaseModel):
    """What an agent remembers between steps besides its log (``state/<agent>/agent.json``)."""

    estimator: dict[str, Any] = Field(default_factory=dict)
    breaker: CircuitBreaker = Field(default_factory=CircuitBreaker)
    tool_memory: dict[str, Any] = Field(default_factory=dict)
    force_compaction: bool = False  # the API said "prompt too long"
    too_long_after_compaction: int = 0
    nudges: int = 0


class LogRecord(BaseModel):
    """One line of ``state/<agent>/log.jsonl``."""

    seq: int
    kind: Literal["opening", "assistant", "results", "note"]
    step: int  # the step this record belongs to; an opening carries the last finished step
    iteration: int
    message: dict[str, Any]
    key: str | None = None  # idempotency key of an opening
    model: str | None = None
    request: str | None = None  # fingerprint of the request that produced an assistant message
    at: str = ""


# ---- the agent's disk state -------------------------------------------------------


@dataclass
class AgentDisk:
    """Everything about one agent that lives in its state folder, loaded fresh per step."""

    layout: Layout
    agent: Role
    records: list[LogRecord] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    state: AgentState = field(default_factory=AgentState)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, root: Path, agent: Role) -> AgentDisk:
        disk = cls(Layout(Path(root)), agent)
        log = read_jsonl(disk.layout.log(agent))
        for number, raw in enumerate(log.records, start=1):
            try:
                disk.records.append(LogRecord.model_validate(raw))
            except ValueError as exc:
                disk.problems.append(f"log record {number} is not a valid record ({exc.__class__.__name__}); ignored")
        disk.problems += [f"{disk.layout.log(agent).name} {p}" for p in log.problems]
        disk.events = read_jsonl(disk.layout.events(agent)).records
        path = disk.layout.state(agent) / "agent.json"
        if path.exists():
            try:
                disk.state = AgentState.model_validate(read_json(path, f"{agent} agent state"))
            except ValueError as exc:  # a broken state file costs calibration, never the run
                disk.problems.append(f"{path.name} unreadable, starting fresh: {exc}")
        return disk

    # -- reading

    @property
    def steps(self) -> list[LogRecord]:
        return [r for r in self.records if r.kind == "assistant"]

    def messages(self) -> list[Message]:
        return [parse_message(r.message) for r in self.records]

    def history(self) -> History:
        return History(self.messages())

    def last_step(self) -> LogRecord | None:
        steps = self.steps
        return steps[-1] if steps else None

    def pending(self) -> LogRecord | None:
        """The last step if its tool calls have no persisted results yet."""
        last = self.last_step()
        if last is None or not parse_message(last.message).tool_uses:
            return None
        done = any(r.kind == "results" and r.step == last.step for r in self.records)
        return None if done else last

    def iteration(self) -> int:
        openings = [r for r in self.records if r.kind == "opening"]
        return openings[-1].iteration if openings else 0

    def turn_over(self) -> bool:
        """True when the last turn ended with an accepted handoff (and no new opening came)."""
        for rec in reversed(self.records):
            if rec.kind == "opening":
                return False
            if rec.kind == "results":
                return any(_accepted_handoff(b) for b in parse_message(rec.message).tool_results)
        return not self.records

    def steps_this_turn(self) -> int:
        count = 0
        for rec in reversed(self.records):
            if rec.kind == "opening":
                break
            count += rec.kind == "assistant"
        return count

    def compaction(self) -> CompactionEvent | None:
        events = [e for e in self.events if e.get("kind") == "compaction"]
        if not events:
            return None
        return CompactionEvent.model_validate({k: v for k, v in events[-1].items() if k != "after_step"})

    def compacted_after(self) -> int | None:
        events = [e for e in self.events if e.get("kind") == "compaction"]
        return events[-1].get("after_step") if events else None

    # -- writing (append-only log, atomic state)

    def append(self, kind: str, step: int, iteration: int, message: Message, **extra: Any) -> LogRecord:
        rec = LogRecord(seq=len(self.records) + 1, kind=kind, step=step, iteration=iteration,
                        message=redact_message(message).api, at=_now(), **extra)
        append_jsonl(self.layout.log(self.agent), rec.model_dump(exclude_none=True))
        self.records.append(rec)
        return rec

    def event(self, kind: str, **data: Any) -> None:
        record = redact_value({"kind": kind, "at": _now(), **data})
        append_jsonl(self.layout.events(self.agent), record)
        self.events.append(record)

    def save_state(self) -> None:
        write_json(self.layout.state(self.agent) / "agent.json", self.state.model_dump(mode="json"))

    def archive(self, tool_use_id: str) -> Path:
        # The same path the compressed results point the agent to.
        return self.layout.root / archive_ref(self.agent, tool_use_id)


def _accepted_handoff(block: ToolResultBlock) -> bool:
    data = parse_envelope(block.text).get("data")
    return not block.is_error and isinstance(data, dict) and data.get("accepted") is True


# ---- openings ------------------------------------------------------------------------


def open_turn(root: Path, agent: Role, iteration: int, text: str, key: str) -> bool:
    """Append the opening user message of a turn, once per ``key`` (idempotent).

    Returns False when an opening with this key is already in the log.
    """
    disk = AgentDisk.load(root, agent)
    if any(r.kind == "opening" and r.key == key for r in disk.records):
        return False
    if disk.pending():
        raise RuntimeError(f"{agent} has a step with unfinished tool calls; run its step before opening a new turn")
    last = disk.last_step()
    disk.append("opening", last.step if last else 0, iteration, Message(role="user", content=[TextBlock(text=text)]), key=key)
    disk.state.nudges = 0
    disk.save_state()
    return True


# ---- the step ------------------------------------------------------------------------


@dataclass
class Agent:
    """What a step needs besides the disk: the role's settings, its tools, its model."""

    config: AgentConfig
    model: Model

    @property
    def role(self) -> Role:
        return self.config.role

    def tools(self) -> dict[str, Any]:
        return tools_for(self.config)

    def static(self) -> StaticPrefix:
        return StaticPrefix(system=prompt(self.role, "system"), tools=[definition(t) for t in self.tools().values()])

    def context(self, root: Path, iteration: int, memory: dict[str, Any]) -> ToolContext:
        c = self.config
        return ToolContext(
            root=Path(root), agent=self.role, iteration=iteration, bash_enabled=c.bash_enabled,
            bash_timeout_s=c.bash_timeout_s, output_cap_chars=c.output_cap_chars,
            eval_timeout_s=c.eval_timeout_s, eval_memory_mb=c.eval_memory_mb,
            model_label=self.model.label if self.model.label == "simulated" else "", memory=memory,
        )

    def assembler(self, disk: AgentDisk, history: History) -> Assembler:
        estimator = TokenEstimator.from_dict(disk.state.estimator) if disk.state.estimator else TokenEstimator()
        return Assembler(history, self.config.policy(), agent=self.role, static=self.static(), estimator=estimator)


def run_step(root: Path, agent: Agent, step: int | None = None, *, fault: Fault = _no_fault) -> StepOutcome:
    """Run (or finish) one step of ``agent`` in the scenario folder ``root``."""
    disk = AgentDisk.load(root, agent.role)
    pending = disk.pending()
    last = disk.last_step()
    due = pending.step if pending else (last.step + 1 if last else 1)
    base = _base(disk, agent)
    if step is not None and step != due:
        when = "already done" if step < due else f"not due yet (the next step is {due})"
        return StepOutcome(step=step, status="skipped", reason=f"step {step} is {when}; nothing to do", **base)
    if pending:
        return _finish_tools(disk, agent, pending, fault)
    if not disk.records:
        return StepOutcome(step=due, status="idle", reason="the log is empty: no turn was opened", **base)
    if disk.turn_over():
        return StepOutcome(step=due, status="idle", reason="the turn ended with a handoff; waiting for the next opening", **base)
    if disk.steps_this_turn() >= agent.config.max_steps_per_turn:
        return _fail(disk, due, base, f"the turn reached max_steps_per_turn ({agent.config.max_steps_per_turn}) without a handoff")
    return _call_model(disk, agent, due, base, fault)


def _base(disk: AgentDisk, agent: Agent) -> dict[str, Any]:
    """The StepOutcome fields every outcome of this step shares."""
    return {"agent": agent.role, "iteration": disk.iteration(), "threshold": agent.config.threshold, "model": agent.model.label}


def _fail(disk: AgentDisk, step: int, base: dict[str, Any], reason: str) -> StepOutcome:
    disk.event("error", step=step, reason=reason)
    return StepOutcome(step=step, status="failed", reason=reason, **base)


def _call_model(disk: AgentDisk, agent: Agent, step: int, base: dict[str, Any], fault: Fault) -> StepOutcome:
    history = disk.history()
    assembler = agent.assembler(disk, history)
    event = disk.compaction()
    try:
        assembled = assembler.assemble(event)
    except ContextOverflow as exc:
        return StepOutcome(step=step, status="compaction_needed", reason=str(exc), **base)
    base["tokens_in_context"] = assembled.estimated_input
    if disk.state.force_compaction or (assembler.should_compact(assembled, event) and _compaction_can_help(disk, agent, event, step)):
        why = "the API said the prompt is too long" if disk.state.force_compaction else (
            f"~{assembled.estimated_input} tokens in context, over the threshold of {agent.config.threshold}")
        return StepOutcome(step=step, status="compaction_needed", reason=why, **base)

    config, static = agent.config, assembler.static
    body = assembled.to_request(static, model=config.model, max_tokens=config.max_tokens)
    request = ModelRequest(model=config.model, max_tokens=config.max_tokens, messages=body["messages"],
                           system=body.get("system"), tools=body.get("tools", []), temperature=config.temperature,
                           betas=config.betas, purpose="step")
    started = time.monotonic()
    try:
        response = agent.model.create(request)
    except PromptTooLong as exc:
        return _too_long(disk, step, base, exc)
    except ModelError as exc:
        return _fail(disk, step, base, f"model error: {exc}")
    fault("after_model_call", step)

    disk.append("assistant", step, disk.iteration(), response.message(), model=agent.model.label, request=request.fingerprint())
    disk.state.too_long_after_compaction = 0
    estimator = assembler.estimator
    estimator.observe(response.usage, assembled.messages, extra_raw_tokens=static.tokens)
    disk.state.estimator = estimator.to_dict()
    disk.event("step", step=step, iteration=disk.iteration(), model=agent.model.label, request=request.fingerprint(),
               usage=response.usage.model_dump(), estimated_input=assembled.estimated_input,
               threshold=config.threshold, stop_reason=response.stop_reason, duration_s=round(time.monotonic() - started, 3),
               tools=[u.name for u in response.message().tool_uses])
    fault("after_persist_response", step)

    if not response.message().tool_uses:
        return _nudge(disk, step, base)
    disk.state.nudges = 0
    return _finish_tools(disk, agent, disk.records[-1], fault, base)


def _compaction_can_help(disk: AgentDisk, agent: Agent, event: CompactionEvent | None, step: int) -> bool:
    """Whether compacting again is worth a model call.

    When the last compaction could not bring the context under the threshold (the
    kept steps alone are that large), compacting after every step would only
    thrash. Wait until the kept steps have all been replaced by new ones; the
    emergency trim keeps requests inside the window meanwhile.
    """
    if event is None or event.tokens_after < agent.config.threshold:
        return True
    return step - 1 - (disk.compacted_after() or 0) >= agent.config.keep_last_steps


def _too_long(disk: AgentDisk, step: int, base: dict[str, Any], exc: Exception) -> StepOutcome:
    # One compaction and one retry (SPEC §4): a second "too long" right after a compaction fails the step.
    if disk.state.too_long_after_compaction >= 1:
        return _fail(disk, step, base, f"the prompt is still too long after a compaction: {exc}")
    disk.state.force_compaction = True
    disk.save_state()
    disk.event("prompt_too_long", step=step, detail=str(exc))
    return StepOutcome(step=step, status="compaction_needed", reason=f"the API said the prompt is too long: {exc}", **base)


def _nudge(disk: AgentDisk, step: int, base: dict[str, Any]) -> StepOutcome:
    disk.state.nudges += 1
    if disk.state.nudges > MAX_NUDGES:
        disk.save_state()
        return _fail(disk, step, base, f"the agent replied {disk.state.nudges} times in a row without a tool call or a handoff")
    disk.append("note", step, disk.iteration(), Message(role="user", content=[TextBlock(text=NUDGE)]))
    disk.save_state()
    return StepOutcome(step=step, status="continue", reason="reply without tool calls; reminded the agent to hand off", **base)


def _finish_tools(disk: AgentDisk, agent: Agent, record: LogRecord, fault: Fault, base: dict[str, Any] | None = None) -> StepOutcome:
    """Run the tool calls of ``record`` that have no archived result, then persist all results."""
    base = base or _base(disk, agent)
    uses = parse_message(record.message).tool_uses
    ctx = agent.context(disk.layout.root, record.iteration, disk.state.tool_memory)
    tools = agent.tools()
    blocks: list[ToolResultBlock] = []
    handoff: str | None = None
    for i, use in enumerate(uses):
        archive = disk.archive(use.id)
        if archive.exists():  # finished before a crash: reuse, never run twice
            text = archive.read_text(encoding="utf-8")
        else:
            result = run_tool(tools, use.name, dict(use.input), ctx)
            text = result.text()
            write_atomic(archive, text)
            fault(f"after_tool:{i}", record.step)
        block = ToolResultBlock(tool_use_id=use.id, content=text, is_error=parse_envelope(text).get("status") == "error")
        if use.name == "SubmitHandoff" and _accepted_handoff(block):
            handoff = parse_envelope(text)["data"].get("path")
        blocks.append(block)
    fault("before_persist_results", record.step)
    disk.append("results", record.step, record.iteration, Message(role="user", content=blocks))
    disk.state.tool_memory = ctx.memory
    disk.save_state()
    if handoff is not None:
        disk.event("handoff", step=record.step, iteration=record.iteration, path=handoff)
        return StepOutcome(step=record.step, status="handoff", handoff_path=handoff, **base)
    return StepOutcome(step=record.step, status="continue", **base)


# ---- compaction --------------------------------------------------------------------------


class CompactionOutcome(BaseModel):
    agent: Role
    status: Literal["compacted", "skipped"]
    after_step: int
    reason: str = ""
    event_id: int | None = None
    fallback: bool = False
    tokens_before: int = 0
    tokens_after: int = 0


def run_compaction(root: Path, agent: Agent, after_step: int | None = None) -> CompactionOutcome:
    """Compact ``agent``'s context once for the state after step ``after_step`` (fencing token)."""
    disk = AgentDisk.load(root, agent.role)
    last = disk.last_step()
    done = last.step if last else 0
    if disk.pending():
        return CompactionOutcome(agent=agent.role, status="skipped", after_step=done, reason="a step has unfinished tool calls; finish it first")
    if after_step is not None and after_step != done:
        return CompactionOutcome(agent=agent.role, status="skipped", after_step=after_step, reason=f"stale: the log is at step {done}")
    if disk.compacted_after() == done and not disk.state.force_compaction:
        return CompactionOutcome(agent=agent.role, status="skipped", after_step=done, reason=f"already compacted after step {done}")
    history = disk.history()
    assembler = agent.assembler(disk, history)
    event = compact(
        role=agent.role, assembler=assembler, previous=disk.compaction(), prompt=prompt(agent.role, "compact"),
        call=_summary_call(agent, assembler.static), breaker=disk.state.breaker, facts=_facts(disk),
        timeout_s=agent.config.summary_timeout_s,
    )
    disk.event("compaction", after_step=done, **event.model_dump(mode="json", exclude={"kind"}))
    if event.tokens_after >= agent.config.threshold:
        disk.event("warning", after_step=done, reason=(
            f"after compaction {event.id} the context is still ~{event.tokens_after} tokens, over the threshold of "
            f"{agent.config.threshold}: the last {agent.config.keep_last_steps} steps alone are that large; "
            "raise the window and threshold or lower keep_last_steps"))
    if disk.state.force_compaction:
        disk.state.too_long_after_compaction += 1
    disk.state.force_compaction = False
    disk.save_state()
    return CompactionOutcome(agent=agent.role, status="compacted", after_step=done, event_id=event.id, fallback=event.fallback,
                             tokens_before=event.tokens_before, tokens_after=event.tokens_after)


def _summary_call(agent: Agent, static: StaticPrefix) -> Callable[[list[Message], float], SummaryReply]:
    config = agent.config

    def call(messages: list[Message], timeout_s: float) -> SummaryReply:
        # Same system prompt and tools as the steps, so the summary call reads their cache.
        request = ModelRequest(
            model=config.model, max_tokens=config.summary_max_tokens, messages=[m.api for m in messages],
            system=[{"type": "text", "text": static.system, "cache_control": {"type": "ephemeral"}}],
            tools=static.tools, temperature=config.summary_temperature, betas=config.betas,
            timeout_s=timeout_s, purpose="summary", tool_choice={"type": "none"},
        )
        response = agent.model.create(request)
        return SummaryReply(text=response.message().text, usage=response.usage)

    return call


def _facts(disk: AgentDisk) -> KnownFacts:
    layout, iteration = disk.layout, disk.iteration()
    out_dir = layout.outputs(iteration)
    report = None
    if (out_dir / "report.json").exists():
        try:
            report = read_json(out_dir / "report.json", "evaluation report")
        except ValueError:
            report = None
    design = sorted(relative(layout.root, p) for p in layout.design.glob("*") if p.is_file()) if layout.design.exists() else []
    return KnownFacts(
        scenario=layout.name, iteration=iteration, design_files=design, last_report=report,
        execution_output_dir=relative(layout.root, out_dir) if out_dir.exists() else None,
    )


# ---- driving a turn in-process ------------------------------------------------------------


def run_turn(root: Path, agent: Agent, *, max_calls: int = 1_000, fault: Fault = _no_fault) -> StepOutcome:
    """Step (and compact when asked) until the turn ends; for tests and embedded use."""
    outcome: StepOutcome | None = None
    for _ in range(max_calls):
        outcome = run_step(root, agent, fault=fault)
        if outcome.status == "compaction_needed":
            compacted = run_compaction(root, agent)
            if compacted.status == "skipped":
                return outcome.model_copy(update={"status": "failed", "reason": f"{outcome.reason}, but compaction was refused: {compacted.reason}"})
        elif outcome.status != "continue":
            return outcome
    assert outcome is not None
    return outcome.model_copy(update={"status": "failed", "reason": f"no end of turn after {max_calls} calls"})


__all__ = [
    "Agent", "AgentDisk", "AgentState", "CompactionOutcome", "LogRecord", "StepOutcome",
    "open_turn", "run_compaction", "run_step", "run_turn",
]

"""One durable agent step (docs/agents.md, "The durable step"), without any Celery.

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

``run_turn`` drives an agent in-process until its turn ends (tests, embedded mode).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.agent import Agent
from agents.compaction_task import run_compaction
from agents.disk import AgentDisk, LogRecord, accepted_handoff
from agents.events import ErrorEvent, HandoffEvent, PromptTooLongEvent, StepEvent
from agents.models import ModelError, ModelRequest, PromptTooLong
from agents.outcomes import StepOutcome
from agents.tools.base import parse_envelope, run_tool
from context.assembly import ContextOverflow
from context.compaction_event import CompactionEvent
from context.messages import Message, TextBlock, ToolResultBlock, parse_message
from scenarios.store import write_atomic

Fault = Callable[[str, int], None]  # (point, step): tests inject crashes here

# After this many replies in a row without any tool call, the turn fails.
MAX_NUDGES = 3
NUDGE = (
    "[baton] Your reply had no tool call, but a turn only ends with SubmitHandoff. "
    "Continue the work with the tools, then call SubmitHandoff with your payload."
)


def _no_fault(_point: str, _step: int) -> None:
    pass


def run_step(root: Path, agent: Agent, step: int | None = None, *, fault: Fault = _no_fault) -> StepOutcome:
    """Run (or finish) one step of ``agent`` in the scenario folder ``root``."""
    disk = AgentDisk.load(root, agent.role)
    pending = disk.pending()
    due = disk.due()
    base = _base(disk, agent)
    if step is not None and step != due:
        when = "already done" if step < due else f"not due yet (the next step is {due})"
        return StepOutcome(step=step, status="skipped", skip="already_done" if step < due else "not_due",
                           reason=f"step {step} is {when}; nothing to do", **base)
    if pending:
        return _finish_tools(disk, agent, pending, fault)
    if not disk.records:
        return StepOutcome(step=due, status="idle", reason="the log is empty: no turn was opened", **base)
    if disk.turn_over():
        return StepOutcome(
            step=due, status="idle", reason="the turn ended with a handoff; waiting for the next opening", **base
        )
    limit = agent.config.max_steps_per_turn
    if disk.steps_this_turn() >= limit:
        return _fail(disk, due, base, f"the turn reached max_steps_per_turn ({limit}) without a handoff")
    return _call_model(disk, agent, due, base, fault)


def _base(disk: AgentDisk, agent: Agent) -> dict[str, Any]:
    """The StepOutcome fields every outcome of this step shares."""
    return {"agent": agent.role, "iteration": disk.iteration(), "threshold": agent.config.context.threshold,
            "model": agent.model.label}


def _fail(disk: AgentDisk, step: int, base: dict[str, Any], reason: str) -> StepOutcome:
    disk.event(ErrorEvent(step=step, reason=reason))
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
    over = assembler.should_compact(assembled, event) and _compaction_can_help(disk, agent, event, step)
    if disk.state.force_compaction or over:
        why = "the API said the prompt is too long" if disk.state.force_compaction else (
            f"~{assembled.estimated_input} tokens in context, over the threshold of {agent.config.context.threshold}")
        return StepOutcome(step=step, status="compaction_needed", reason=why, **base)

    config, static = agent.config, assembler.static
    model, max_tokens = config.model.name, config.context.max_tokens
    body = assembled.to_request(static, model=model, max_tokens=max_tokens)
    request = ModelRequest(model=model, max_tokens=max_tokens, messages=body["messages"], system=body.get("system"),
                           tools=body.get("tools", []), temperature=config.model.temperature,
                           purpose="step")
    started = time.monotonic()
    try:
        response = agent.model.create(request)
    except PromptTooLong as exc:
        return _too_long(disk, step, base, exc)
    except ModelError as exc:
        return _fail(disk, step, base, f"model error: {exc}")
    fault("after_model_call", step)

    message = response.message()
    disk.append("assistant", step, disk.iteration(), message, model=agent.model.label, request=request.fingerprint())
    disk.state.too_long_after_compaction = 0
    estimator = assembler.estimator
    estimator.observe(response.usage, assembled.messages, extra_raw_tokens=static.tokens)
    disk.state.estimator = estimator.to_dict()
    disk.event(
        StepEvent(
            step=step,
            iteration=disk.iteration(),
            model=agent.model.label,
            request=request.fingerprint(),
            usage=response.usage.model_dump(),
            estimated_input=assembled.estimated_input,
            threshold=config.context.threshold,
            stop_reason=response.stop_reason,
            duration_s=round(time.monotonic() - started, 3),
            tools=[u.name for u in message.tool_uses],
        )
    )
    fault("after_persist_response", step)

    if not message.tool_uses:
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
    policy = agent.config.context
    if event is None or event.tokens_after < policy.threshold:
        return True
    return step - 1 - (disk.compacted_after() or 0) >= policy.keep_last_steps


def _too_long(disk: AgentDisk, step: int, base: dict[str, Any], exc: Exception) -> StepOutcome:
    # One compaction and one retry (docs/agents.md): a second "too long" right after a compaction fails the step.
    if disk.state.too_long_after_compaction >= 1:
        return _fail(disk, step, base, f"the prompt is still too long after a compaction: {exc}")
    disk.state.force_compaction = True
    disk.save_state()
    disk.event(PromptTooLongEvent(step=step, detail=str(exc)))
    return StepOutcome(step=step, status="compaction_needed", reason=f"the API said the prompt is too long: {exc}",
                       **base)


def _nudge(disk: AgentDisk, step: int, base: dict[str, Any]) -> StepOutcome:
    disk.state.nudges += 1
    if disk.state.nudges > MAX_NUDGES:
        disk.save_state()
        return _fail(disk, step, base,
                     f"the agent replied {disk.state.nudges} times in a row without a tool call or a handoff")
    disk.append("note", step, disk.iteration(), Message(role="user", content=[TextBlock(text=NUDGE)]))
    disk.save_state()
    return StepOutcome(step=step, status="continue", reason="reply without tool calls; reminded the agent to hand off",
                       **base)


def _finish_tools(disk: AgentDisk, agent: Agent, record: LogRecord, fault: Fault,
                  base: dict[str, Any] | None = None) -> StepOutcome:
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
        block = ToolResultBlock(
            tool_use_id=use.id, content=text, is_error=parse_envelope(text).get("status") == "error"
        )
        if use.name == "SubmitHandoff" and accepted_handoff(block):
            handoff = parse_envelope(text)["data"].get("path")
        blocks.append(block)
    fault("before_persist_results", record.step)
    disk.append("results", record.step, record.iteration, Message(role="user", content=blocks))
    disk.state.tool_memory = ctx.memory
    disk.save_state()
    if handoff is not None:
        disk.event(HandoffEvent(step=record.step, iteration=record.iteration, path=handoff))
        return StepOutcome(step=record.step, status="handoff", handoff_path=handoff, **base)
    return StepOutcome(step=record.step, status="continue", **base)


def run_turn(root: Path, agent: Agent, *, max_calls: int = 1_000, fault: Fault = _no_fault) -> StepOutcome:
    """Step (and compact when asked) until the turn ends; for tests and embedded use."""
    outcome: StepOutcome | None = None
    for _ in range(max_calls):
        outcome = run_step(root, agent, fault=fault)
        if outcome.status == "compaction_needed":
            compacted = run_compaction(root, agent)
            if compacted.status == "skipped":
                reason = f"{outcome.reason}, but compaction was refused: {compacted.reason}"
                return outcome.model_copy(update={"status": "failed", "reason": reason})
        elif outcome.status != "continue":
            return outcome
    assert outcome is not None
    return outcome.model_copy(update={"status": "failed", "reason": f"no end of turn after {max_calls} calls"})

"""The tool calls of a step's reply, each run to completion at most once, then their results persisted.

A call's result is archived as it completes, so a step finished after a crash reuses it rather than
running the call again; a call a crash cut short is rolled back through its journal and runs again on
exactly what it first saw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import tracing
from agents.agent import Agent
from agents.disk import AgentDisk, LogRecord, accepted_handoff, handoff_path_of
from agents.events import HandoffEvent
from agents.outcomes import StepOutcome
from agents.tools.base import Tool, ToolContext, parse_envelope, run_tool
from context.history import History
from context.messages import Message, ToolResultBlock, ToolUseBlock, parse_message
from context.reminders import reminder
from context.todo_recap import recap_due
from scenarios.journal import Journal
from scenarios.store import relative

Fault = Callable[[str, int], None]  # (point, step): tests inject crashes here


def no_fault(_point: str, _step: int) -> None:
    pass


def finish_tools(disk: AgentDisk, agent: Agent, record: LogRecord, fault: Fault, base: dict[str, Any],
                 history: History | None = None) -> StepOutcome:
    """Run the tool calls of ``record`` that have no archived result, then persist all results. ``history``:
    the step's history up to ``record``, if it has one (else the log is read again for the plan's recap)."""
    uses = parse_message(record.message).tool_uses
    ctx = agent.context(disk.layout.root, record.iteration, disk.state.tool_memory)
    tools = agent.tools()
    blocks: list[ToolResultBlock] = []
    handoff: str | None = None
    for i, use in enumerate(uses):
        text = _tool_result(disk, tools, ctx, use, fault, i, record.step)
        block = ToolResultBlock(
            tool_use_id=use.id, content=text, is_error=parse_envelope(text).get("status") == "error"
        )
        if use.name == "SubmitHandoff" and accepted_handoff(block):
            handoff = handoff_path_of(block)
        blocks.append(block)
    fault("before_persist_results", record.step)
    results = Message(role="user", content=blocks)
    disk.append("results", record.step, record.iteration, results)
    if handoff is not None:
        disk.event(HandoffEvent(step=record.step, iteration=record.iteration, path=handoff))
        return StepOutcome(step=record.step, status="handoff", handoff_path=handoff, **base)
    if history is not None:
        history.append(results)
    _recall_plan(disk, agent, record.step, record.iteration, history if history is not None else disk.history())
    return StepOutcome(step=record.step, status="continue", **base)


def _recall_plan(disk: AgentDisk, agent: Agent, step: int, iteration: int, history: History) -> None:
    """Bring the agent's plan back into view when it has been out of it for a while: a new message at the end
    of the log (context.todo_recap), so no earlier message ever changes. A reminder (context.reminders): a
    system message on a model that takes one."""
    policy = agent.config.context
    if not policy.todo_recap:
        return
    event = disk.compaction()
    since = event.in_view(history).kept_from if event else 0
    text = recap_due(history, policy.recap_every_steps, since)
    if text is not None:
        disk.append("note", step, iteration, Message(role="user", content=[reminder(text)]))


def _tool_result(disk: AgentDisk, tools: dict[str, Tool], ctx: ToolContext, use: ToolUseBlock, fault: Fault,
                 index: int, step: int) -> str:
    """One tool call's result, the call run to completion at most once.

    Its file changes go through its journal (``scenarios.journal``): a crash before its result
    was archived undoes them, and the call runs again on exactly what it first saw, so it says
    the same. The tools' memory after the call is saved with its result.
    """
    archive = disk.archive(use.id)
    journal = Journal(disk.layout.root, disk.layout.journal(disk.agent, use.id), disk.lease)
    if disk.folder.is_file(archive):  # finished before a crash: reuse, never run twice
        kept = journal.kept_memory()  # a crash after the archive, before the memory was saved
        if kept is not None:
            ctx.memory.clear()
            ctx.memory.update(kept)
            disk.save_state()
        journal.drop()
        return disk.folder.read_text(archive)
    if journal.pending():
        journal.rollback()  # a crash inside the call: what it changed goes back as it was
    fault(f"before_tool:{index}", step)
    ctx.files = journal
    with tracing.tool_call(use.name, use.id, use.input) as traced:
        text = run_tool(tools, use.name, dict(use.input), ctx).text()
        tracing.tool_result(traced, parse_envelope(text).get("status"), relative(disk.layout.root, archive), text)
    fault(f"before_archive:{index}", step)
    journal.keep_memory(ctx.memory)
    disk.folder.write_atomic(archive, text, disk.lease)
    fault(f"after_tool:{index}", step)
    disk.save_state()  # ctx.memory is the state's tool memory
    journal.drop()
    return text

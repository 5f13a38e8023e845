"""One durable agent step (docs/agents.md, "The durable step"), without any Celery.

``run_step(root, agent, step)``:

1. loads the agent's log from disk; if the last step's tool calls have no
   persisted results, it finishes them first (results already archived are
   reused, so a tool that finished before a crash is not run again);
2. if the context is over the threshold (or the API said "prompt too long"),
   returns ``compaction_needed`` instead of compacting inline;
3. otherwise assembles the request, calls the model, persists the response,
   runs the tools one by one (each result archived as it completes), persists
   the results and says what happens next: the next step, or, when that step's
   context is over the threshold, ``compaction_needed`` for it already, so the
   compaction is sent in its place and the step is sent once, after it.

Its parts, one idea to a module: ``step_request`` (the request, and when the
context must be compacted first; near the threshold the API's exact token count
decides), ``step_call`` (the model call, every stop reason acted on),
``step_tools`` (the reply's tool calls, each run at most once), ``step_notes``
(what the agent is told between steps) and ``step_outcome`` (what a step
reports). What other modules import from here stays importable from here.

The step number says which step a task means: step k is the k-th model response
in the log, and a call for a step that is already done, or not yet due, does
nothing. The agent's lease (``scenarios.lease``) fences the writes: a step claims
it before it writes, and a writer that lost it (a worker frozen past its lock)
has every later write refused, its work discarded and noted in ``discarded.jsonl``.
A response that was persisted is never requested again; a crash between the
model call and persisting its answer means that request is sent once more
(nothing was kept, so nothing can be reused).

``run_turn`` drives an agent in-process until its turn ends (tests, embedded mode).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.agent import Agent
from agents.compaction_task import run_compaction
from agents.disk import AgentDisk, note_discarded
from agents.outcomes import StepOutcome
from agents.step_call import CUT_MARKER, MAX_RESUMES, call_model
from agents.step_notes import CONVENTIONS_CHANGED, MAX_NUDGES, NUDGE, note_for, remind
from agents.step_outcome import failed, outcome_fields
from agents.step_request import EXACT_COUNT_MARGIN, compaction_first
from agents.step_tools import Fault, finish_tools, no_fault
from scenarios.lease import LeaseBusy, LeaseLost

__all__ = ["CONVENTIONS_CHANGED", "CUT_MARKER", "EXACT_COUNT_MARGIN", "MAX_NUDGES", "MAX_RESUMES", "NUDGE", "Fault",
           "compaction_before", "discarded", "run_step", "run_turn"]


def run_step(root: Path, agent: Agent, step: int | None = None, *, fault: Fault = no_fault) -> StepOutcome:
    """Run (or finish) one step of ``agent`` in the scenario folder ``root``."""
    # A duplicate or early call is answered from a plain read: it must not take the lease
    # from the writer that is running the step it names.
    skipped = _not_this_step(AgentDisk.load(root, agent.role), agent, step)
    if skipped is not None:
        return skipped
    disk = AgentDisk.claim(root, agent.role)
    try:
        return _step(disk, agent, step, fault)
    except LeaseLost as exc:
        return discarded(disk, outcome_fields(disk, agent), step if step is not None else disk.due(), exc)


def _not_this_step(disk: AgentDisk, agent: Agent, step: int | None) -> StepOutcome | None:
    due = disk.due()
    if step is None or step == due:
        return None
    when = "already done" if step < due else f"not due yet (the next step is {due})"
    return StepOutcome(step=step, status="skipped", skip="already_done" if step < due else "not_due",
                       reason=f"step {step} is {when}; nothing to do", **outcome_fields(disk, agent))


def discarded(disk: AgentDisk, base: dict[str, Any], step: int, exc: LeaseLost) -> StepOutcome:
    """A newer writer took this agent over while this one worked: nothing more of it lands, and it says so."""
    note_discarded(disk.layout, disk.agent, step, str(exc))
    return StepOutcome(step=step, status="skipped", skip="lease_lost", reason=str(exc), **base)


def _step(disk: AgentDisk, agent: Agent, step: int | None, fault: Fault) -> StepOutcome:
    skipped = _not_this_step(disk, agent, step)  # the log may have moved on between the read and the claim
    if skipped is not None:
        return skipped
    pending = disk.pending()
    due = disk.due()
    base = outcome_fields(disk, agent)
    if pending:
        return compaction_first(disk, agent, finish_tools(disk, agent, pending, fault, base))
    if not disk.records:
        return StepOutcome(step=due, status="idle", reason="the log is empty: no turn was opened", **base)
    if disk.turn_over():
        return StepOutcome(
            step=due, status="idle", reason="the turn ended with a handoff; waiting for the next opening", **base
        )
    limit = agent.config.max_steps_per_turn
    if disk.steps_this_turn() >= limit:
        return failed(disk, due, base, f"the turn reached max_steps_per_turn ({limit}) without a handoff")
    last = disk.records[-1]
    if last.kind == "assistant":
        # A reply that ran no tool call, whose note a crash (or the failed turn a human now resumes) left
        # out: the request must not end with the agent's own reply, so the note comes first.
        reminded = remind(disk, last.step, base, note_for(disk, last.step))
        if reminded.status == "failed":
            return reminded
    return compaction_first(disk, agent, call_model(disk, agent, due, base, fault))


def compaction_before(root: Path, agent: Agent, step: int) -> StepOutcome | None:
    """``compaction_needed`` for step ``step`` when its request must wait for a compaction (recorded for the
    compaction task), decided before the step is sent; None when the step may be sent as it is.

    For the first step of a turn, which no step before it decided for (``compaction_first`` does that for
    every later step). A step that is not due, or an agent another writer holds, is left to decide itself."""
    if _not_this_step(AgentDisk.load(root, agent.role), agent, step) is not None:
        return None  # answered from a plain read, like a step that is not due: no lease taken
    try:
        disk = AgentDisk.claim(root, agent.role)
    except LeaseBusy:
        return None
    try:
        if disk.due() != step or disk.pending() or not disk.records or disk.turn_over():
            return None
        went_on = StepOutcome(step=step - 1, status="continue", **outcome_fields(disk, agent))
        asked = compaction_first(disk, agent, went_on)
    except LeaseLost:
        return None
    return asked if asked.status == "compaction_needed" else None


def run_turn(root: Path, agent: Agent, *, max_calls: int = 1_000, fault: Fault = no_fault) -> StepOutcome:
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

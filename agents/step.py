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

Every stop reason is acted on: ``tool_use`` runs the calls; ``end_turn`` and
``stop_sequence`` without one get a reminder; ``pause_turn`` is sent back for
the model to go on; ``max_tokens`` never runs a cut call (the reply is asked for
once more with a larger limit, then kept without its calls and the agent told);
``refusal`` fails the step; ``model_context_window_exceeded`` compacts like
"prompt too long". Near the threshold the API's exact token count decides.

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

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from agents import tracing
from agents.agent import Agent
from agents.compaction_task import run_compaction
from agents.conventions import ConventionsError, conventions_for
from agents.disk import AgentDisk, LogRecord, accepted_handoff, handoff_path_of, note_discarded
from agents.events import (
    ErrorEvent,
    HandoffEvent,
    OutputCutEvent,
    PromptTooLongEvent,
    StepEvent,
    WarningEvent,
    event_record,
)
from agents.models import (
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    PromptTooLong,
    ThinkingRefused,
    TokenCounter,
)
from agents.outcomes import StepOutcome
from agents.thinking import thinking_fields
from agents.tools.base import Tool, ToolContext, parse_envelope, run_tool
from context.assembly import Assembled, ContextOverflow, StaticPrefix
from context.compaction_event import CompactionEvent
from context.form_parts import clip_line
from context.history import History
from context.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, parse_message
from context.prefix import bind_reply
from context.redaction import redact
from context.reminders import reminder
from context.todo_recap import recap_due
from scenarios.journal import Journal
from scenarios.lease import LeaseLost
from scenarios.store import relative, write_atomic

Fault = Callable[[str, int], None]  # (point, step): tests inject crashes here
log = logging.getLogger(__name__)

# After this many replies in a row without a tool call that ran, the turn fails.
MAX_NUDGES = 3
NUDGE = (
    "[baton] Your reply had no tool call, but a turn only ends with SubmitHandoff. "
    "Continue the work with the tools, then call SubmitHandoff with your payload."
)
CUT_CALLS = (
    "[baton] Your reply was cut off at the output limit ({max_tokens} tokens) while it was writing a tool "
    "call, so none of its tool calls ran ({calls}). Split the work into smaller tool calls: write a long "
    "file in parts (Write a first part, then Edit to add the rest), one file per call."
)
CUT_TEXT = (
    "[baton] Your reply was cut off at the output limit ({max_tokens} tokens). Continue from where it "
    "stopped, in shorter replies: put long content into files with the tools."
)
CONVENTIONS_CHANGED = "[baton] The team's conventions changed. From now on, follow these:"
CUT_MARKER = "[cut off at the output limit]"  # ends a cut reply in the log, where its tool calls were
# A reply cut at max_tokens is asked for once more with twice the limit, up to the model's own
# limit (ModelSettings.max_output_tokens); offline that limit is unknown and this cap stands in.
FALLBACK_OUTPUT_LIMIT = 32_000
SAID_CHARS = 300  # of what a reply said, in the step's outcome (Flower's task events)
MAX_RESUMES = 3  # a paused turn (pause_turn) is sent back this many times at most
# Near the threshold the estimate (about 1% off) could decide either way: within this share
# of it, the step asks the API for an exact count before deciding to compact.
EXACT_COUNT_MARGIN = 0.10


def _no_fault(_point: str, _step: int) -> None:
    pass


def run_step(root: Path, agent: Agent, step: int | None = None, *, fault: Fault = _no_fault) -> StepOutcome:
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
        return discarded(disk, _base(disk, agent), step if step is not None else disk.due(), exc)


def _not_this_step(disk: AgentDisk, agent: Agent, step: int | None) -> StepOutcome | None:
    due = disk.due()
    if step is None or step == due:
        return None
    when = "already done" if step < due else f"not due yet (the next step is {due})"
    return StepOutcome(step=step, status="skipped", skip="already_done" if step < due else "not_due",
                       reason=f"step {step} is {when}; nothing to do", **_base(disk, agent))


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
    base = _base(disk, agent)
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
    last = disk.records[-1]
    if last.kind == "assistant":
        # A reply that ran no tool call, whose note a crash (or the failed turn a human now resumes) left
        # out: the request must not end with the agent's own reply, so the note comes first.
        reminded = _remind(disk, last.step, base, _note_for(disk, last.step))
        if reminded.status == "failed":
            return reminded
    return _call_model(disk, agent, due, base, fault)


def _note_conventions(disk: AgentDisk, step: int) -> None:
    """Fix the conventions the system prompt carries at the agent's first step; when they change later,
    tell the agent in a new message at the end of its log (a reminder, context.reminders: a system message
    on a model that takes one). The system prompt never changes within a conversation: the thinking
    Claude wrote is signed over it, and the whole cached prefix hangs on it."""
    current = conventions_for(disk.layout.root)
    seen, now = disk.state.conventions, current.fingerprint or "none"
    if disk.state.system_conventions is None:  # the first step: the system prompt takes them as they are
        disk.state.system_conventions = current.text
    elif seen == now:
        return
    else:
        change = "removed" if now == "none" else f"now from {current.sources}"
        text = current.text or "There are no team conventions any more: the earlier ones no longer apply."
        disk.append("note", step - 1, disk.iteration(), Message(role="user", content=[reminder(
            f"{CONVENTIONS_CHANGED}\n\n{text}")]))
        disk.event(WarningEvent(after_step=step - 1, reason=(
            f"the conventions changed ({change}): the agent was told in a new message at the end of its log "
            "(the system prompt stays as it was, so the cache and the thinking before it stay valid)")))
    disk.state.conventions = now
    disk.save_state()


def _base(disk: AgentDisk, agent: Agent) -> dict[str, Any]:
    """The StepOutcome fields every outcome of this step shares."""
    return {"agent": agent.role, "iteration": disk.iteration(), "threshold": agent.config.context.threshold,
            "model": agent.model.label}


def _fail(disk: AgentDisk, step: int, base: dict[str, Any], reason: str) -> StepOutcome:
    disk.event(ErrorEvent(step=step, reason=reason))
    return StepOutcome(step=step, status="failed", reason=reason, **base)


def _call_model(disk: AgentDisk, agent: Agent, step: int, base: dict[str, Any], fault: Fault) -> StepOutcome:
    try:
        _note_conventions(disk, step)
        history = disk.history()
        assembler = agent.assembler(disk, history)
    except ConventionsError as exc:  # a CONVENTIONS.md that cannot be used: the run stops and says which
        return _fail(disk, step, base, str(exc))
    event = disk.compaction()
    try:
        assembled = assembler.assemble(event)
    except ContextOverflow as exc:
        return _ask_compaction(disk, step, base, str(exc))
    base["tokens_in_context"] = assembled.estimated_input
    if disk.state.force_compaction:
        return _ask_compaction(disk, step, base, "the API said the prompt is too long")

    config, static = agent.config, assembler.static
    # An earlier attempt of this step was cut and a crash came before its retry was persisted.
    cuts = [e for e in disk.events if isinstance(e, OutputCutEvent) and e.step == step]
    retry_max_tokens = cuts[0].retry_max_tokens if cuts else None
    request = _request(agent, assembled, static, retry_max_tokens or config.context.max_tokens)
    counted = _exact_count(disk, agent, assembled, request)
    if counted is not None:  # an exact count teaches the estimator as a response's usage does
        assembler.estimator.observe(counted, assembled.messages, extra_raw_tokens=static.tokens)
        disk.state.estimator = assembler.estimator.to_dict()
        disk.save_state()
    tokens = assembled.estimated_input if counted is None else counted
    base["tokens_in_context"] = tokens
    # The compactor decides on the exact count when there is one (it is what the API will see).
    over = assembler.should_compact(replace(assembled, estimated_input=tokens), event)
    if over and _compaction_can_help(disk, agent, event, step):
        why = f"~{tokens} tokens in context, over the threshold of {config.context.threshold}"
        return _ask_compaction(disk, step, base, why)

    started = time.monotonic()
    while True:
        try:
            with tracing.chat(request, agent.model.label) as call:
                response = _ask(agent.model, request)
                tracing.reply(call, response, cost=agent.cost, tokens=tokens,
                              threshold=config.context.threshold)
        except PromptTooLong as exc:
            return _too_long(disk, step, base, f"the API said the prompt is too long: {exc}")
        except ThinkingRefused as exc:
            return _thinking_refused(disk, step, base, str(exc))
        except ModelError as exc:
            return _fail(disk, step, base, f"model error: {exc}")
        fault("after_model_call", step)
        # A tool call cut at max_tokens is unfinished: the reply is dropped (nothing of it is in the
        # log, so asking again breaks no fencing rule) and asked for once more with room to finish.
        larger = _larger_max_tokens(agent, request.max_tokens, tokens)
        if response.stop_reason != "max_tokens" or not response.message().tool_uses or cuts or larger is None:
            break
        cuts.append(_record_cut(disk, step, request, response, retry_max_tokens=larger))
        fault("after_cut", step)
        request = request.model_copy(update={"max_tokens": larger})
    base["stop_reason"] = stop = response.stop_reason
    base["usage"] = response.usage.model_dump()  # what this call cost, for the progress events

    if stop == "refusal":
        return _refused(disk, step, base, response)
    if stop == "model_context_window_exceeded":
        return _too_long(disk, step, base, "the model ran out of context window while it answered "
                                           f"(stop_reason {stop}, {response.usage.output_tokens} tokens written)",
                         usage=response.usage.model_dump())
    message = response.message()
    if stop == "max_tokens":
        # Cut again (or no room to retry): the agent gets the reply without its tool calls, and a note.
        _record_cut(disk, step, request, response, retry_max_tokens=None)
        message = _without_tool_calls(message)
    base["said"] = clip_line(redact(message.said), SAID_CHARS)  # what Flower and the live display show
    chain = assembled.chain
    assert chain is not None  # every assembled request has its prefix chain
    message, reply_digest = bind_reply(chain.digest, message)  # each thinking block knows its prefix
    extends, changed = _prefix_continuity(disk, assembled)
    dropped = _note_dropped_thinking(disk, step, response)

    estimator = assembler.estimator
    estimator.observe(response.usage, assembled.messages, extra_raw_tokens=static.tokens)
    stepped = StepEvent(
        step=step,
        iteration=disk.iteration(),
        model=agent.model.label,
        request=request.fingerprint(),
        usage=response.usage.model_dump(),
        estimated_input=assembled.estimated_input,
        threshold=config.context.threshold,
        stop_reason=stop,
        duration_s=round(time.monotonic() - started, 3),
        tools=[u.name for u in message.tool_uses],
        counted_input=counted,
        cost_usd=agent.cost(response.usage),
        thinking_sent=chain.sent,
        thinking_left_out=chain.left_out,
        thinking_produced=message.signed_blocks,
        thinking_dropped=dropped,
        prefix_extends=extends,
        view_changed=changed,
    )
    # The event and what the estimator learned ride in the log record too: a crash before
    # events.jsonl and agent.json have them loses nothing (AgentDisk.claim restores them).
    disk.append("assistant", step, disk.iteration(), message, model=agent.model.label, request=request.fingerprint(),
                event=event_record(stepped), estimator=estimator.to_dict(),
                prefix_after={"n": len(assembled.messages) + 1, "digest": reply_digest, "plan": assembled.plan})
    fault("after_append_response", step)
    disk.state.too_long_after_compaction = 0
    disk.state.estimator, disk.state.estimator_step = estimator.to_dict(), step
    disk.save_state()
    disk.event(stepped)
    fault("after_persist_response", step)

    if not message.tool_uses:
        return _remind(disk, step, base, _note_for(disk, step))
    disk.state.nudges = 0
    history.append(message)  # the plan's recap reads the history as the log now holds it
    return _finish_tools(disk, agent, disk.records[-1], fault, base, history)


def _request(agent: Agent, assembled: Assembled, static: StaticPrefix, max_tokens: int) -> ModelRequest:
    config = agent.config
    body = assembled.to_request(static, model=config.model.name, max_tokens=max_tokens)
    return ModelRequest(model=config.model.name, max_tokens=max_tokens, messages=body["messages"],
                        system=body.get("system"), tools=body.get("tools", []), temperature=config.model.temperature,
                        purpose="step", **thinking_fields(config.model))


def _prefix_continuity(disk: AgentDisk, assembled: Assembled) -> tuple[bool | None, bool | None]:
    """Whether this request's messages extend the previous request's plus its reply exactly, and whether
    the engine changed the view since on purpose (a batch left the verbatim window, a compaction)."""
    record, chain = disk.last_step(), assembled.chain
    last = record.prefix_after if record is not None else None  # in the log record: as crash-safe as the log
    if not last or chain is None:
        return None, None
    n = int(last.get("n", 0))
    extends = 0 < n <= len(chain.ends) and chain.ends[n - 1] == last.get("digest")
    return extends, assembled.plan != last.get("plan")


def _thinking_refused(disk: AgentDisk, step: int, base: dict[str, Any], error: str) -> StepOutcome:
    """The API refused a thinking block baton sent back. The same request would fail again, so every block
    stamped so far is left out from now on (a new thinking epoch) and the step runs once more; a second
    refusal at the same step fails it, saying so."""
    if disk.state.thinking_epoch_step == step:
        return _fail(disk, step, base, f"the API refused thinking blocks again after baton left every earlier "
                                       f"one out: {error}")
    disk.state.thinking_epoch += 1
    disk.state.thinking_epoch_step = step
    disk.save_state()
    disk.event(WarningEvent(after_step=step - 1, code="thinking_refused", reason=(
        f"{error}; every thinking block produced so far is left out from now on and the step is asked again")))
    return StepOutcome(step=step, status="continue", reason="the API refused a thinking block; asking again "
                       "without the earlier thinking", **base)


def _note_dropped_thinking(disk: AgentDisk, step: int, response: ModelResponse) -> int:
    """Thinking blocks the API dropped (``input_transformations``): baton's own prefix check should have left
    them out, so each reply that lists some is a warning (counted in ``baton status``)."""
    dropped = [t for t in response.input_transformations if t.get("type") == "thinking_dropped"]
    if dropped:
        where = ", ".join(f"{t.get('path')} ({t.get('reason')})" for t in dropped[:5])
        disk.event(WarningEvent(after_step=step - 1, code="thinking_dropped", reason=(
            f"the API dropped {len(dropped)} thinking block(s) that baton sent back: {where}; baton's own prefix "
            "check missed them (docs/agents.md, \"Thinking and the prefix\")")))
    return len(dropped)


def _ask(model: Model, request: ModelRequest) -> ModelResponse:
    """The model's reply to ``request``; a paused turn is sent back, as it is, for the model to go on.

    ``pause_turn`` means the API paused a long turn: the paused reply, as the last (assistant)
    message, asks the model to continue it. The pieces become one reply, persisted once, with
    the first call's input usage (what the estimator learns from) and every call's output.
    """
    first = response = model.create(request)
    content, output_tokens = list(response.content), response.usage.output_tokens
    for _ in range(MAX_RESUMES):
        paused = Message(role="assistant", content=content)
        if response.stop_reason != "pause_turn" or not content or paused.tool_uses:
            break  # a paused reply with tool calls is not continued: its calls run as they are
        response = model.create(request.model_copy(update={"messages": [*request.messages, paused.api]}))
        content += response.content
        output_tokens += response.usage.output_tokens
    if response is first:
        return response
    usage = first.usage.model_copy(update={"output_tokens": output_tokens})
    return response.model_copy(update={"content": content, "usage": usage})


def _exact_count(disk: AgentDisk, agent: Agent, assembled: Assembled, request: ModelRequest) -> int | None:
    """The API's count of ``request``'s input when the estimate could decide wrongly, else None.

    Asked (count_tokens is free) for the agent's first call, when the estimator has seen no
    real usage yet, and whenever the estimate is within EXACT_COUNT_MARGIN of the threshold.
    The count teaches the estimator like a response's usage does. A model without the method
    (the simulated one) is never asked, and a failed count leaves the estimate in charge.
    """
    if not isinstance(agent.model, TokenCounter):
        return None
    threshold = agent.config.context.threshold
    first_call = not any(isinstance(e, StepEvent) for e in disk.events)
    if not first_call and abs(assembled.estimated_input - threshold) > EXACT_COUNT_MARGIN * threshold:
        return None
    try:
        return agent.model.count_tokens(request)
    except ModelError as exc:
        log.warning("no exact token count (%s); the estimate of %d decides", exc, assembled.estimated_input)
        return None


def _larger_max_tokens(agent: Agent, max_tokens: int, input_tokens: int) -> int | None:
    """The doubled output limit for a retry, within the model's limit and the window; None when there is no room."""
    limit = agent.config.model.max_output_tokens or FALLBACK_OUTPUT_LIMIT
    room = agent.config.context.window - input_tokens  # input plus max_tokens must fit the window
    larger = min(2 * max_tokens, limit, room)
    return larger if larger > max_tokens else None


def _record_cut(disk: AgentDisk, step: int, request: ModelRequest, response: ModelResponse,
                retry_max_tokens: int | None) -> OutputCutEvent:
    # Names only: the cut reply's content (an unfinished call's input above all) never reaches disk.
    cut = OutputCutEvent(step=step, max_tokens=request.max_tokens, usage=response.usage.model_dump(),
                         tools=[u.name for u in response.message().tool_uses], retry_max_tokens=retry_max_tokens)
    disk.event(cut)
    return cut


def _without_tool_calls(message: Message) -> Message:
    """A cut reply as the log keeps it: its text, none of its tool calls (the last one is unfinished, and
    the others are left to the agent, which is told which ones did not run)."""
    kept = [b for b in message.content if isinstance(b, TextBlock)]
    if message.tool_uses or not kept:
        kept.append(TextBlock(text=CUT_MARKER))
    return Message(role="assistant", content=kept, usage=message.usage)


def _refused(disk: AgentDisk, step: int, base: dict[str, Any], response: ModelResponse) -> StepOutcome:
    """The model declined: the step fails, nothing of the reply is kept, and no reminder is sent."""
    details = response.stop_details or {}
    said = "; ".join(f"{key} {details[key]}" for key in ("category", "explanation") if details.get(key))
    reason = (f"the model refused to continue (stop_reason refusal{': ' + said if said else ''}); "
              "its reply was not kept. Revise the brief or the design, then resume the run")
    disk.event(ErrorEvent(step=step, reason=reason, stop_reason="refusal", stop_details=response.stop_details,
                          usage=response.usage.model_dump()))
    return StepOutcome(step=step, status="failed", reason=reason, **base)


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


def _too_long(disk: AgentDisk, step: int, base: dict[str, Any], why: str,
              usage: dict[str, Any] | None = None) -> StepOutcome:
    """The context does not fit (the API's "prompt is too long", or the window ran out while the model
    answered): one compaction and one retry (docs/agents.md); a second time right after a compaction fails."""
    if disk.state.too_long_after_compaction >= 1:
        return _fail(disk, step, base, f"still too long after a compaction: {why}")
    disk.state.force_compaction = True
    disk.event(PromptTooLongEvent(step=step, detail=why, usage=usage))
    return _ask_compaction(disk, step, base, why)


def _ask_compaction(disk: AgentDisk, step: int, base: dict[str, Any], why: str) -> StepOutcome:
    """Record that the context after step ``step - 1`` needs compacting (the compaction task checks it), and say so."""
    disk.state.compaction_due = step - 1
    disk.save_state()
    return StepOutcome(step=step, status="compaction_needed", reason=why, **base)


def _note_for(disk: AgentDisk, step: int) -> str:
    """What the agent is told after step ``step``'s reply ran no tool call: why, from the events."""
    kept = [e for e in disk.events if isinstance(e, OutputCutEvent) and e.step == step and e.retry_max_tokens is None]
    if not kept:
        return NUDGE
    cut = kept[-1]
    if cut.tools:
        return CUT_CALLS.format(max_tokens=cut.max_tokens, calls=", ".join(cut.tools))
    return CUT_TEXT.format(max_tokens=cut.max_tokens)


def _remind(disk: AgentDisk, step: int, base: dict[str, Any], note: str) -> StepOutcome:
    """After a reply that ran no tool call: a note saying why and what to do, or a failed turn when it keeps
    happening. A cut reply counts too: a model that keeps overrunning the limit would loop otherwise."""
    disk.state.nudges += 1
    if disk.state.nudges > MAX_NUDGES:
        replies = disk.state.nudges
        disk.state.nudges = 0  # a human who resumes the run gives the agent a fresh count
        disk.save_state()
        return _fail(disk, step, base, f"the agent replied {replies} times in a row without a tool call that ran")
    disk.append("note", step, disk.iteration(), Message(role="user", content=[TextBlock(text=note)]))
    disk.save_state()
    return StepOutcome(step=step, status="continue", reason="reply without a tool call that ran; told the agent why",
                       **base)


def _finish_tools(disk: AgentDisk, agent: Agent, record: LogRecord, fault: Fault,
                  base: dict[str, Any] | None = None, history: History | None = None) -> StepOutcome:
    """Run the tool calls of ``record`` that have no archived result, then persist all results. ``history``:
    the step's history up to ``record``, if it has one (else the log is read again for the plan's recap)."""
    base = base or _base(disk, agent)
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
    if archive.exists():  # finished before a crash: reuse, never run twice
        kept = journal.kept_memory()  # a crash after the archive, before the memory was saved
        if kept is not None:
            ctx.memory.clear()
            ctx.memory.update(kept)
            disk.save_state()
        journal.drop()
        return archive.read_text(encoding="utf-8")
    if journal.folder.exists():
        journal.rollback()  # a crash inside the call: what it changed goes back as it was
    fault(f"before_tool:{index}", step)
    ctx.files = journal
    with tracing.tool_call(use.name, use.id, use.input) as traced:
        text = run_tool(tools, use.name, dict(use.input), ctx).text()
        tracing.tool_result(traced, parse_envelope(text).get("status"), relative(disk.layout.root, archive), text)
    fault(f"before_archive:{index}", step)
    journal.keep_memory(ctx.memory)
    write_atomic(archive, text, disk.lease)
    fault(f"after_tool:{index}", step)
    disk.save_state()  # ctx.memory is the state's tool memory
    journal.drop()
    return text


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

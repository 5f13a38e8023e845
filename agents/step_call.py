"""A step's model call: its request sent, its reply kept, every stop reason acted on.

``tool_use`` runs the calls; ``end_turn`` and ``stop_sequence`` without one get a reminder;
``pause_turn`` is sent back for the model to go on; ``max_tokens`` never runs a cut call (the reply
is asked for once more with a larger limit, then kept without its calls and the agent told);
``refusal`` fails the step; ``model_context_window_exceeded`` compacts like "prompt too long". A
refused thinking block starts a new thinking epoch and the step is asked once more.

The reply is appended to the log with its ``StepEvent`` inside the record, then the event to
``events.jsonl``: a crash between the two loses nothing (the event is owed, agents/disk.py).
"""

from __future__ import annotations

import json
import time
from typing import Any

from agents import tracing
from agents.agent import Agent
from agents.cache_prewarm import prewarm
from agents.conventions import ConventionsError
from agents.disk import AgentDisk
from agents.events import ErrorEvent, OutputCutEvent, StepEvent, WarningEvent, event_record
from agents.models import Model, ModelError, ModelRequest, ModelResponse, PromptTooLong, ThinkingRefused
from agents.outcomes import StepOutcome
from agents.step_notes import note_conventions, note_for, remind
from agents.step_outcome import failed
from agents.step_request import prepare, too_long
from agents.step_tools import Fault, finish_tools
from agents.thinking import with_billed_thinking
from context.assembly import Assembled
from context.form_parts import clip_line
from context.messages import Message, TextBlock
from context.prefix import bind_reply
from context.redaction import redact

CUT_MARKER = "[cut off at the output limit]"  # ends a cut reply in the log, where its tool calls were
# A reply cut at max_tokens is asked for once more with twice the limit, up to the model's own
# limit (ModelSettings.max_output_tokens); offline that limit is unknown and this cap stands in.
FALLBACK_OUTPUT_LIMIT = 32_000
SAID_CHARS = 300  # of what a reply said, in the step's outcome (Flower's task events)
MAX_RESUMES = 3  # a paused turn (pause_turn) is sent back this many times at most


def call_model(disk: AgentDisk, agent: Agent, step: int, base: dict[str, Any], fault: Fault) -> StepOutcome:
    try:
        note_conventions(disk, step)
        history = disk.history()
        assembler = agent.assembler(disk, history)
    except ConventionsError as exc:  # a CONVENTIONS.md that cannot be used: the run stops and says which
        return failed(disk, step, base, str(exc))
    config = agent.config
    # An earlier attempt of this step was cut and a crash came before its retry was persisted.
    cuts = [e for e in disk.events if isinstance(e, OutputCutEvent) and e.step == step]
    retry_max_tokens = cuts[0].retry_max_tokens if cuts else None
    prepared = prepare(disk, agent, assembler, step, base, retry_max_tokens or config.context.max_tokens)
    if isinstance(prepared, StepOutcome):
        return prepared  # compaction_needed
    assembled, request, counted, tokens = prepared.assembled, prepared.request, prepared.counted, prepared.tokens
    static = assembler.static

    started = time.monotonic()
    while True:
        try:
            with tracing.chat(request, agent.model.label) as call:
                response = _ask(agent.model, request)
                tracing.reply(call, response, cost=agent.cost, tokens=tokens,
                              threshold=config.context.threshold)
        except PromptTooLong as exc:
            return too_long(disk, step, base, f"the API said the prompt is too long: {exc}")
        except ThinkingRefused as exc:
            return _thinking_refused(disk, step, base, str(exc))
        except ModelError as exc:
            return failed(disk, step, base, f"model error: {exc}")
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
        return too_long(disk, step, base, "the model ran out of context window while it answered "
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
    message = with_billed_thinking(message, response.usage.output_tokens)
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
        cleared_input=_cleared(request, response),
        cache_ttl="1h" if '"ttl": "1h"' in json.dumps(request.system or "") else None,
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
        return remind(disk, step, base, note_for(disk, step))
    disk.state.nudges = 0
    history.append(message)  # the plan's recap reads the history as the log now holds it
    outcome = finish_tools(disk, agent, disk.records[-1], fault, base, history)
    if outcome.status == "handoff":
        prewarm(disk, agent, step)  # the idle through the other agent's turn is certain now
    return outcome


def _cleared(request: ModelRequest, response: ModelResponse) -> int | None:
    """The input tokens the server's context editing cleared (None when the request asked for no editing)."""
    if request.context_management is None:
        return None
    edits = (response.context_management or {}).get("applied_edits") or []
    return sum(int(e.get("cleared_input_tokens") or 0) for e in edits if isinstance(e, dict))


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
        return failed(disk, step, base, f"the API refused thinking blocks again after baton left every earlier "
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

"""A step's request, and when the context must be compacted before it is sent.

The request is assembled from the log (``Agent.assembler``). Over the threshold, or when it does not fit
(the assembler's ``ContextOverflow``, the API's "prompt is too long"), the step asks for a compaction
instead (``compaction_needed``: the compaction task checks ``AgentState.compaction_due``). Near the
threshold the API's exact token count decides.

The step that goes on makes the same decision for the step after it (``compaction_first``), so a
compaction is sent in that step's place and the step is sent once, by the compaction. The step's own
check stays: a step sent by ``resume``, or one the API finds too long, still asks for its compaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agents.agent import Agent
from agents.conventions import ConventionsError
from agents.disk import AgentDisk
from agents.events import PromptTooLongEvent, StepEvent, WarningEvent
from agents.models import ModelError, ModelRequest, TokenCounter
from agents.outcomes import StepOutcome
from agents.step_outcome import failed
from agents.thinking import request_of
from context.assembly import Assembled, Assembler, ContextOverflow, StaticPrefix
from context.cache_ttl import choose_ttl
from context.compaction_event import CompactionEvent
from context.messages import Usage

log = logging.getLogger(__name__)

# Near the threshold the estimate (about 1% off) could decide either way: within this share
# of it, the step asks the API for an exact count before deciding to compact.
EXACT_COUNT_MARGIN = 0.10
# Before its own gaps say otherwise, the chance that a step is followed by an idle of 5-60 minutes: Init idles
# through Execute's whole turn once per turn of about ten steps; Execute only when a tool or the queue is slow.
LONG_IDLE_PRIOR = {"init": 0.1, "execute": 0.02}
# Warning codes of conditions said once per agent (``say_once``).
SQUEEZED = "context_squeezed"
STILL_OVER = "still_over_threshold"


@dataclass(frozen=True)
class Prepared:
    """A step's request, ready to be sent, with its size."""

    assembled: Assembled
    request: ModelRequest
    counted: int | None  # the API's exact count, when it was asked
    tokens: int  # what decided: the exact count, else the estimate


def prepare(disk: AgentDisk, agent: Agent, assembler: Assembler, step: int, base: dict[str, Any],
            max_tokens: int) -> Prepared | StepOutcome:
    """Step ``step``'s request as the context stands, or ``compaction_needed`` (recorded for the compaction
    task) when the context must be compacted before it is sent. ``base["tokens_in_context"]`` is its size."""
    event = disk.compaction()
    try:
        assembled = assembler.assemble(event)
    except ContextOverflow as exc:
        base["tokens_in_context"] = exc.needed
        if event is not None and disk.compacted_after() == step - 1:  # a compaction just ran and could not help
            return failed(disk, step, base, f"the context does not fit even right after a compaction: {exc}")
        return ask_compaction(disk, step, base, str(exc))
    base["tokens_in_context"] = assembled.estimated_input
    if disk.state.force_compaction:
        return ask_compaction(disk, step, base, "the API said the prompt is too long")
    if assembled.squeezed:
        # It fits only shrunk (assembly's last resorts): the step waits for a compaction, unless one just ran, or
        # the last one could not bring the context under the threshold and its kept steps are still in view (it
        # was late: its deadline passed under load, the model was unavailable; asking again would only thrash);
        # then the shrunk request goes, and the agent says so once.
        policy, since = assembler.policy, step - 1 - (disk.compacted_after() or 0)
        helped = event is None or event.tokens_after < policy.threshold or since >= policy.keep_last_steps
        if since > 0 and helped and assembler.should_compact(replace(assembled, estimated_input=policy.window), event):
            return ask_compaction(disk, step, base, f"the context fits the window only shrunk ({assembled.squeezed})")
        say_once(disk, step - 1, SQUEEZED, (
            f"the context did not fit the window of {assembler.policy.window:,} tokens with the older tool results "
            f"trimmed, so requests are shrunk to fit ({assembled.squeezed}; the log keeps everything) until a "
            "compaction makes room"))

    request = request_for(agent, assembled, assembler.static, max_tokens, ttl=ttl_for(disk, assembler, assembled))
    counted = _counted(disk, agent, assembler, assembled, request)
    tokens = assembled.estimated_input if counted is None else counted
    base["tokens_in_context"] = tokens
    # The compactor decides on the exact count when there is one (it is what the API will see).
    over = assembler.should_compact(replace(assembled, estimated_input=tokens), event)
    if over and compaction_can_help(disk, agent, event, step, tokens):
        why = f"~{tokens} tokens in context, over the threshold of {agent.config.context.threshold}"
        return ask_compaction(disk, step, base, why)
    return Prepared(assembled, request, counted, tokens)


def _counted(disk: AgentDisk, agent: Agent, assembler: Assembler, assembled: Assembled, request: ModelRequest
             ) -> int | None:
    """The exact count of ``request`` when the estimate could decide wrongly (``exact_count``), asked once: a
    request counted before (by the step before, deciding for this one) is not counted again."""
    fingerprint = request.fingerprint()
    if disk.state.counted is not None and disk.state.counted[0] == fingerprint:
        return disk.state.counted[1]  # and the estimator learned from it then
    counted = exact_count(disk, agent, assembled, request)
    if counted is not None:  # an exact count teaches the estimator as a response's usage does
        assembler.estimator.observe(counted, assembled.messages, extra_raw_tokens=assembler.static.tokens)
        disk.state.estimator = assembler.estimator.to_dict()
        disk.state.counted = (fingerprint, counted)
        disk.save_state()
    return counted


def compaction_first(disk: AgentDisk, agent: Agent, outcome: StepOutcome) -> StepOutcome:
    """What follows a step that went on: ``outcome`` itself, or, when the next step's request must wait for a
    compaction, ``compaction_needed`` for that step, decided now as the step itself would decide it when it
    starts (``prepare``). Then the compaction is sent instead of the step, and the step once, after it."""
    if outcome.status != "continue":
        return outcome
    if disk.steps_this_turn() >= agent.config.max_steps_per_turn:
        return outcome  # the next step fails at its start, without a request
    try:
        assembler = agent.assembler(disk, disk.history())
    except ConventionsError:
        return outcome  # the next step fails with the same message
    step = disk.due()
    base = outcome.model_dump(exclude={"step", "status", "reason", "skip"})
    prepared = prepare(disk, agent, assembler, step, base, agent.config.context.max_tokens)
    if isinstance(prepared, Prepared):
        return outcome
    return prepared.model_copy(update={"reason": f"after step {outcome.step}: {prepared.reason}"})


def request_for(agent: Agent, assembled: Assembled, static: StaticPrefix, max_tokens: int, ttl: str = "5m"
                ) -> ModelRequest:
    """The step's request: the assembled body (its breakpoints for ``ttl``), the role's thinking fields, and
    the beta headers and fields the context strategies need (a compaction block, context editing)."""
    config = agent.config
    body = assembled.to_request(static, model=config.model.name, max_tokens=max_tokens, ttl=ttl)
    return request_of(body, config.model, temperature=config.model.temperature, betas=assembled.betas,
                      purpose="step", context_management=body.get("context_management"))


def step_starts(disk: AgentDisk) -> list[tuple[int, float]]:
    """(step, when its request started) for each step event, from its end and duration, in order."""
    starts = []
    for event in disk.events:
        if isinstance(event, StepEvent):
            try:
                ended = datetime.fromisoformat(event.at).timestamp()
            except ValueError:
                continue
            starts.append((event.step, ended - event.duration_s))
    return starts


def step_gaps(disk: AgentDisk) -> list[float]:
    """Seconds from each step's request to the next one's (start to start, as a cache entry's life is counted):
    the gaps the agent's prefix had to outlive."""
    starts = [at for _, at in step_starts(disk)]
    return [b - a for a, b in zip(starts, starts[1:]) if b >= a]


def ttl_for(disk: AgentDisk, assembler: Assembler, assembled: Assembled) -> str:
    """The TTL of this request's breakpoints (``context.cache_ttl``). What an idle would make the next request
    rewrite is the whole prefix; what this one writes is what the last request did not read (all of it for the
    first request and after a compaction), at least its newest step (the last two messages)."""
    scale = assembled.scale
    written = round(sum(m.tokens for m in assembled.messages[-2:]) * scale)
    last = next((e for e in reversed(disk.events) if isinstance(e, StepEvent)), None)
    if last is None or (disk.compacted_after() or 0) >= last.step:
        written = assembled.estimated_input
    else:
        written = max(written, assembled.estimated_input - Usage.model_validate(last.usage).total_input)
    return choose_ttl(step_gaps(disk), assembled.estimated_input, written, assembler.rates,
                      LONG_IDLE_PRIOR.get(disk.agent, 0.0))


def exact_count(disk: AgentDisk, agent: Agent, assembled: Assembled, request: ModelRequest) -> int | None:
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


def compaction_can_help(disk: AgentDisk, agent: Agent, event: CompactionEvent | None, step: int,
                        tokens: int) -> bool:
    """Whether compacting again is worth a model call (``Policy.may_compact_again``), ``tokens`` in context."""
    return agent.config.context.may_compact_again(None if event is None else event.tokens_after,
                                                  step - 1 - (disk.compacted_after() or 0), tokens)


def too_long(disk: AgentDisk, step: int, base: dict[str, Any], why: str,
             usage: dict[str, Any] | None = None) -> StepOutcome:
    """The context does not fit (the API's "prompt is too long", or the window ran out while the model
    answered): one compaction and one retry (docs/agents.md); a second time right after a compaction fails."""
    if disk.state.too_long_after_compaction >= 1:
        return failed(disk, step, base, f"still too long after a compaction: {why}")
    disk.state.force_compaction = True
    disk.event(PromptTooLongEvent(step=step, detail=why, usage=usage))
    return ask_compaction(disk, step, base, why)


def say_once(disk: AgentDisk, after_step: int, code: str, reason: str) -> bool:
    """Record a warning with ``code`` unless the agent has one already: a condition that lasts for many steps
    (a context over the threshold, thinking left out) is said once, not at every step. Whether it was said now."""
    if any(isinstance(e, WarningEvent) and e.code == code for e in disk.events):
        return False
    disk.event(WarningEvent(after_step=after_step, reason=reason, code=code))
    return True


def ask_compaction(disk: AgentDisk, step: int, base: dict[str, Any], why: str) -> StepOutcome:
    """Record that the context after step ``step - 1`` needs compacting (the compaction task checks it), and say so."""
    disk.state.compaction_due = step - 1
    disk.save_state()
    return StepOutcome(step=step, status="compaction_needed", reason=why, **base)

"""A step's request, and when the context must be compacted before it is sent.

The request is assembled from the log (``Agent.assembler``). Over the threshold, or when it does not fit
(the assembler's ``ContextOverflow``, the API's "prompt is too long"), the step asks for a compaction
instead (``compaction_needed``: the compaction task checks ``AgentState.compaction_due``). Near the
threshold the API's exact token count decides.
"""

from __future__ import annotations

import logging
from typing import Any

from agents.agent import Agent
from agents.disk import AgentDisk
from agents.events import PromptTooLongEvent, StepEvent
from agents.models import ModelError, ModelRequest, TokenCounter
from agents.outcomes import StepOutcome
from agents.step_outcome import failed
from agents.thinking import thinking_fields
from context.assembly import Assembled, StaticPrefix
from context.compaction_event import CompactionEvent

log = logging.getLogger(__name__)

# Near the threshold the estimate (about 1% off) could decide either way: within this share
# of it, the step asks the API for an exact count before deciding to compact.
EXACT_COUNT_MARGIN = 0.10


def request_for(agent: Agent, assembled: Assembled, static: StaticPrefix, max_tokens: int) -> ModelRequest:
    config = agent.config
    body = assembled.to_request(static, model=config.model.name, max_tokens=max_tokens)
    return ModelRequest(model=config.model.name, max_tokens=max_tokens, messages=body["messages"],
                        system=body.get("system"), tools=body.get("tools", []), temperature=config.model.temperature,
                        purpose="step", **thinking_fields(config.model))


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


def compaction_can_help(disk: AgentDisk, agent: Agent, event: CompactionEvent | None, step: int) -> bool:
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


def too_long(disk: AgentDisk, step: int, base: dict[str, Any], why: str,
             usage: dict[str, Any] | None = None) -> StepOutcome:
    """The context does not fit (the API's "prompt is too long", or the window ran out while the model
    answered): one compaction and one retry (docs/agents.md); a second time right after a compaction fails."""
    if disk.state.too_long_after_compaction >= 1:
        return failed(disk, step, base, f"still too long after a compaction: {why}")
    disk.state.force_compaction = True
    disk.event(PromptTooLongEvent(step=step, detail=why, usage=usage))
    return ask_compaction(disk, step, base, why)


def ask_compaction(disk: AgentDisk, step: int, base: dict[str, Any], why: str) -> StepOutcome:
    """Record that the context after step ``step - 1`` needs compacting (the compaction task checks it), and say so."""
    disk.state.compaction_due = step - 1
    disk.save_state()
    return StepOutcome(step=step, status="compaction_needed", reason=why, **base)

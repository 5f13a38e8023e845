"""How a step reports back: the fields every outcome of one step shares, and a failed step.

Each part of the step (agents/step.py and the modules it calls) ends with a ``StepOutcome``
built from these; a failure is written to the agent's events before it is returned.
"""

from __future__ import annotations

from typing import Any

from agents.agent import Agent
from agents.disk import AgentDisk
from agents.events import ErrorEvent
from agents.outcomes import StepOutcome


def outcome_fields(disk: AgentDisk, agent: Agent) -> dict[str, Any]:
    """The StepOutcome fields every outcome of this step shares."""
    return {"agent": agent.role, "iteration": disk.iteration(), "threshold": agent.config.context.threshold,
            "model": agent.model.label}


def failed(disk: AgentDisk, step: int, base: dict[str, Any], reason: str) -> StepOutcome:
    disk.event(ErrorEvent(step=step, reason=reason))
    return StepOutcome(step=step, status="failed", reason=reason, **base)

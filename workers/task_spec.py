"""The loop's unit of work (workers/loop.py returns them, Celery or embedded mode runs them): a kind and ids only,
never payloads, never secrets. Its own module so that the loop and the gates' part of it (workers/gate_loop.py)
both name it without importing each other."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, StrictInt, field_validator, model_validator

from agents.role import Role
from proving.evaluation.quality import GateName
from scenarios.store import check_name


class Task(BaseModel):
    """One unit of work. Arguments are ids only: never payloads, never secrets."""

    kind: Literal["step", "compaction", "phase", "proving", "gate"]
    scenario: str
    agent: Role | None = None
    # The step due (step), the last finished step (compaction) or the shard (gate). Strict: "3" or 3.5 is a
    # sender's bug.
    number: StrictInt | None = Field(default=None, ge=0)
    gate: GateName | None = None  # a gate task's gate (workers/gate_loop.py)

    @field_validator("scenario")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        return check_name(name)

    @model_validator(mode="after")
    def _complete(self) -> Task:
        if self.kind in ("step", "compaction") and (self.agent is None or self.number is None):
            raise ValueError(f"a {self.kind} task needs an agent (init or execute) and a step number")
        if self.kind == "gate" and (self.gate is None or self.number is None):
            raise ValueError("a gate task needs a gate (floor, mutation...) and a shard number")
        return self

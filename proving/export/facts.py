"""What the export needs of a scenario's settings. The export is given them (``ScenarioFacts``) rather than
reading the agents' configuration itself: proving/ depends on context/ and scenarios/ only, and whoever
exports (the CLI, ``baton try``, the gates) has read scenario.toml already."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from proving.evaluation.models import Limits


class ScenarioFacts(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    description: str = ""
    target_success_rate: float = Field(ge=0, le=1)
    # For an iteration never evaluated, which has no limits on record: the evaluation's configured ones.
    default_limits: Limits
    # Who plays the user of conversational samples when `inspect eval` is given no -T user= (ProvingSettings).
    user_simulator: str = "scripted"

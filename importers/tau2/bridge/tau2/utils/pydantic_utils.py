"""What a domain's data model imports from ``tau2.utils.pydantic_utils`` (written by baton)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class BaseModelNoExtra(BaseModel):
    model_config = ConfigDict(extra="forbid")

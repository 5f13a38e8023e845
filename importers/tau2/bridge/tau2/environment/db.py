"""What a domain's data model imports from ``tau2.environment.db``: ``DB``, the base of its database model, a
pydantic model that refuses unknown fields (written by baton). The database is loaded from and written back to the
scenario's data by ``tau2_glue.py``, not by file paths."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class DB(BaseModel):
    model_config = ConfigDict(extra="forbid")

"""The Models API catalogue the double serves: the world as of November 2026.

``DEFAULT_MODELS`` is the one table; a test or a demo can serve another one from a
JSON file (``baton fake-api --catalogue PATH``: an array of objects with the fields
of ``ModelEntry``). Listing follows the API: newest first, ``active`` and
``deprecated`` models unless a ``lifecycle`` filter asks for others, pages cut by
``limit`` and the ``after_id`` / ``before_id`` cursors.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from context.reminders import takes_system_messages

Lifecycle = Literal["active", "deprecated", "retired"]
LISTED_BY_DEFAULT: tuple[Lifecycle, ...] = ("active", "deprecated")
DEFAULT_PAGE, MAX_PAGE = 20, 1000


class ModelEntry(BaseModel):
    """One model, with the fields of the SDK's ``ModelInfo`` (``capabilities`` left out)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str = Field(min_length=1)
    type: Literal["model"] = "model"
    display_name: str
    created_at: datetime
    line: str | None = None
    lifecycle: Lifecycle = "active"
    max_input_tokens: int = Field(gt=0)
    max_tokens: int = Field(gt=0)  # the largest ``max_tokens`` a request may ask for
    deprecated_at: datetime | None = None
    retires_at: datetime | None = None

    @property
    def system_messages(self) -> bool:
        """Takes a mid-conversation ``role: "system"`` message (platform docs, "Mid-conversation system
        messages"). Not a field of ``ModelInfo``: the listing does not say it. Decided by the id with baton's
        own function, so the double and baton's requests cannot disagree."""
        return takes_system_messages(self.id)

    def api(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _entry(model_id: str, name: str, line: str, created: str, window: int, output: int,
           lifecycle: Lifecycle = "active", deprecated: str | None = None, retires: str | None = None) -> ModelEntry:
    return ModelEntry(id=model_id, display_name=name, line=line, created_at=f"{created}T00:00:00Z",
                      lifecycle=lifecycle, max_input_tokens=window, max_tokens=output,
                      deprecated_at=f"{deprecated}T00:00:00Z" if deprecated else None,
                      retires_at=f"{retires}T00:00:00Z" if retires else None)


# id, display name, line, released, max_input_tokens, max_tokens (output), lifecycle, deprecated, retires
DEFAULT_MODELS: tuple[ModelEntry, ...] = (
    # 1M in, 128K out: https://platform.claude.com/docs/en/models/haiku-5-5/overview
    _entry("claude-haiku-5-5", "Claude Haiku 5.5", "haiku", "2026-10-28", 1_000_000, 128_000),
    _entry("claude-sonnet-5-5", "Claude Sonnet 5.5", "sonnet", "2026-10-21", 1_000_000, 128_000),
    _entry("claude-opus-5-5", "Claude Opus 5.5", "opus", "2026-10-14", 1_000_000, 128_000),
    _entry("claude-sonnet-4-6", "Claude Sonnet 4.6", "sonnet", "2026-02-17", 1_000_000, 64_000),
    _entry("claude-opus-4-6", "Claude Opus 4.6", "opus", "2026-02-05", 1_000_000, 128_000),
    # Deprecated: still callable; its 1M-token beta is retired, so 200K is all it takes.
    _entry("claude-sonnet-4-5", "Claude Sonnet 4.5", "sonnet", "2025-09-29", 200_000, 64_000,
           "deprecated", deprecated="2026-08-31", retires="2026-11-30"),
    _entry("claude-opus-4-1", "Claude Opus 4.1", "opus", "2025-08-05", 200_000, 32_000,
           "retired", deprecated="2026-01-05", retires="2026-06-05"),
)


class CatalogueError(ValueError):
    """A catalogue file that cannot be served, or a listing request the API would refuse."""


class Catalogue:
    """The models the double knows, newest first."""

    def __init__(self, models: list[ModelEntry] | tuple[ModelEntry, ...] = DEFAULT_MODELS) -> None:
        ids = [m.id for m in models]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise CatalogueError(f"the catalogue lists {', '.join(duplicates)} more than once")
        self.models = sorted(models, key=lambda m: (m.created_at, m.id), reverse=True)
        self.by_id = {m.id: m for m in self.models}

    @classmethod
    def from_file(cls, path: Path) -> Catalogue:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise CatalogueError(f"cannot read the catalogue {path}: {err}") from None
        if not isinstance(raw, list) or not raw:
            raise CatalogueError(f"{path}: a catalogue is a non-empty JSON array of model objects")
        try:
            return cls([ModelEntry.model_validate(item) for item in raw])
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise CatalogueError(f"{path}: model {where}: {first['msg']}") from None

    def get(self, model_id: str) -> ModelEntry | None:
        return self.by_id.get(model_id)

    def page(self, *, limit: int = DEFAULT_PAGE, after_id: str | None = None, before_id: str | None = None,
             lifecycles: list[str] | None = None) -> dict[str, Any]:
        """One page of ``GET /v1/models``: ``data``, ``has_more``, ``first_id``, ``last_id``."""
        if not 1 <= limit <= MAX_PAGE:
            raise CatalogueError(f"limit: must be between 1 and {MAX_PAGE}, got {limit}")
        wanted = set(lifecycles or LISTED_BY_DEFAULT)
        unknown = wanted - {"active", "deprecated", "retired"}
        if unknown:
            raise CatalogueError(f"lifecycle: unknown value(s) {', '.join(sorted(unknown))}")
        listed = [m for m in self.models if m.lifecycle in wanted]
        ids = [m.id for m in listed]
        for cursor in (after_id, before_id):
            if cursor is not None and cursor not in ids:
                raise CatalogueError(f"no model {cursor!r} in this listing to page from")
        if before_id is not None:
            end = ids.index(before_id)
            chosen, has_more = listed[max(0, end - limit):end], end > limit
        else:
            start = ids.index(after_id) + 1 if after_id is not None else 0
            chosen, has_more = listed[start:start + limit], start + limit < len(listed)
        return {"data": [m.api() for m in chosen], "has_more": has_more,
                "first_id": chosen[0].id if chosen else None, "last_id": chosen[-1].id if chosen else None}

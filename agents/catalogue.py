"""Which model a setting means today: the Models API catalogue, resolved once per run.

An agent's ``model`` is a line (``opus``, ``sonnet``, ``haiku``: whatever lines the
catalogue lists) or an exact id. With a real key, ``resolve`` picks the line's
newest ``active`` model (or checks the id), and ``apply_pin`` fits the agent's
working window to that model: the window is capped at its ``max_input_tokens``
with the threshold scaled by the same ratio, and the output per step at its
``max_tokens``. The result is pinned in run.json (``workers/pinning.py``), so a
resumed run never changes model. No model list is kept in code: the catalogue
decides what exists, what is deprecated and what is retired (docs/agents.md,
"Choosing the model").

The Models API leaves retired models out of a listing unless its ``lifecycle``
filter asks for them, so baton asks for all three stages: a retired id is then
refused as "retired on <date>", not as unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agents.config import AgentConfig
from agents.models import ModelError

Lifecycle = Literal["active", "deprecated", "retired"]
EVERY_STAGE: list[Lifecycle] = ["active", "deprecated", "retired"]


class CatalogueError(ModelError):
    """The model asked for is retired or unknown; the message names what to use instead."""


class CatalogueEntry(BaseModel):
    """One model of the Models API (the fields baton reads of the SDK's ``ModelInfo``)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    line: str | None = None
    lifecycle: Lifecycle = "active"
    max_input_tokens: int | None = None
    max_tokens: int | None = None
    created_at: datetime
    retires_at: datetime | None = None


class PinnedModel(BaseModel):
    """What run.json keeps for an agent: the model it runs on for the life of the run."""

    model_config = ConfigDict(frozen=True)

    asked: str  # the setting as given: a line or an id
    id: str
    line: str | None = None
    lifecycle: Lifecycle = "active"
    max_input_tokens: int | None = None
    max_tokens: int | None = None
    retires_at: str | None = None  # ISO date

    @property
    def warning(self) -> str | None:
        if self.lifecycle != "deprecated":
            return None
        when = f"retires on {self.retires_at}" if self.retires_at else "is headed for retirement"
        line = f"the {self.line} line's newest model" if self.line else "a current model"
        return f"model {self.id} is deprecated and {when}; set model = {self.line or '<id>'!r} to run on {line}"


def fetch_catalogue(client: Any, stages: list[Lifecycle] = EVERY_STAGE) -> list[CatalogueEntry]:
    """The catalogue's models in ``stages`` (retired ones too by default), through the SDK's auto-paginating
    ``models.list()`` (``GET /v1/models?lifecycle[]=...``)."""
    listed = (CatalogueEntry.model_validate(info.model_dump()) for info in client.models.list(lifecycle=stages))
    return [entry for entry in listed if entry.lifecycle in stages]  # a server that ignores the filter


def current_models(entries: Iterable[CatalogueEntry]) -> dict[str, CatalogueEntry]:
    """Each line's newest active model."""
    newest: dict[str, CatalogueEntry] = {}
    for entry in entries:
        if entry.line and entry.lifecycle == "active":
            if entry.line not in newest or entry.created_at > newest[entry.line].created_at:
                newest[entry.line] = entry
    return newest


def resolve(asked: str, entries: list[CatalogueEntry]) -> PinnedModel:
    """The model ``asked`` means today: a line's newest active model, or the id itself.

    A retired or unknown model is a ``CatalogueError`` naming the current models.
    """
    current = current_models(entries)
    if asked in current:
        return _pin(asked, current[asked])
    by_id = {entry.id: entry for entry in entries}
    entry = by_id.get(asked)
    if entry is None:
        lines = {entry.line for entry in entries if entry.line}
        if asked in lines:
            raise CatalogueError(f"the {asked} line has no active model in the catalogue; "
                                 f"choose another line or an id. {_offer(current)}")
        raise CatalogueError(f"unknown model {asked!r}: the Models API does not list it. {_offer(current)}")
    if entry.lifecycle == "retired":
        raise CatalogueError(f"{retired(entry)} and can no longer be called; {instead_of(entry, current)}")
    return _pin(asked, entry)


def retired(entry: CatalogueEntry) -> str:
    """The words "<id> was retired on <date>", the date from the catalogue's ``retires_at``."""
    when = f" on {entry.retires_at.date().isoformat()}" if entry.retires_at else ""
    return f"{entry.id} was retired{when}"


def instead_of(entry: CatalogueEntry, current: dict[str, CatalogueEntry], but: str | None = None) -> str:
    """What to set instead of a retired model: its line's current model, or the line itself unless it is ``but``
    (the setting that is already there)."""
    instead = current.get(entry.line or "")
    if instead is None:
        return f"set model to a current model. {_offer(current)}"
    line = f" or model = {entry.line!r}" if entry.line != but else ""
    return f"set model = {instead.id!r} (the {entry.line} line's current model){line}"


def _pin(asked: str, entry: CatalogueEntry) -> PinnedModel:
    retires = entry.retires_at.date().isoformat() if entry.retires_at else None
    return PinnedModel(asked=asked, id=entry.id, line=entry.line, lifecycle=entry.lifecycle,
                       max_input_tokens=entry.max_input_tokens, max_tokens=entry.max_tokens, retires_at=retires)


def _offer(current: dict[str, CatalogueEntry]) -> str:
    if not current:
        return "The catalogue lists no active model."
    return "Current models: " + ", ".join(f"{line} → {entry.id}" for line, entry in sorted(current.items())) + "."


def apply_pin(config: AgentConfig, pinned: PinnedModel) -> AgentConfig:
    """``config`` on the pinned model: its id, its output limit, the window capped at the model's."""
    settings = config.settings()
    window, threshold = settings["window"], settings["threshold"]
    if pinned.max_input_tokens and window > pinned.max_input_tokens:
        # The threshold keeps its share of the window: 700K of 1M becomes 140K of 200K.
        threshold = int(threshold * pinned.max_input_tokens / window)
        window = pinned.max_input_tokens
    max_tokens = min(settings["max_tokens"], pinned.max_tokens) if pinned.max_tokens else settings["max_tokens"]
    return AgentConfig(**{**settings, "model": pinned.id, "max_output_tokens": pinned.max_tokens,
                          "window": window, "threshold": threshold, "max_tokens": max_tokens})

"""Pinning each agent's model for the life of a run (docs/agents.md, "Choosing the model").

The first process that builds the agents of a run on the real API resolves their
``model`` settings through the Models API and writes the result to run.json;
every later process (a resumed run, another worker) reads the pin instead, so a
run never changes model halfway. A deprecated model is pinned with a warning in
the log, the agent's events and ``baton status``; a retired or unknown one stops
the run before its first step. Offline (the simulated model) nothing is pinned.

A pinned model can retire while its run waits (for an approval, a resume). So
every process that reads pins also asks the Models API for its retired models (one
``GET /v1/models?lifecycle[]=retired``) and stops before any step on a pin among
them: "<id> was retired on <date>". The pin changes only when the user names
another model for that agent (the setting differs from the one that was pinned),
and the agent's events record the change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agents.catalogue import (
    CatalogueEntry,
    CatalogueError,
    PinnedModel,
    current_models,
    fetch_catalogue,
    instead_of,
    resolve,
    retired,
)
from agents.config import AgentConfig
from agents.disk import AgentDisk
from agents.events import WarningEvent, append_event
from agents.models import API_KEY_ENV, Model, ModelError
from scenarios.run import RunRecord, claim_run, load_run, save_run
from scenarios.store import Layout

log = logging.getLogger(__name__)
BASE_URL_ENV = "ANTHROPIC_BASE_URL"


class ModelCatalogueUnavailable(ModelError):
    """The Models API did not answer: nothing can be resolved, nothing ran."""


def pins_of(record: RunRecord | None) -> dict[str, PinnedModel]:
    """The models pinned in a run record, by agent."""
    return {role: PinnedModel.model_validate(raw) for role, raw in (record.models if record else {}).items()}


def pin_models(root: Path, configs: Mapping[str, AgentConfig], models: Mapping[str, Model],
               env: Mapping[str, str]) -> dict[str, PinnedModel]:
    """The pinned model of every agent that talks to the real API, resolving (and pinning) what is missing."""
    real = [role for role, model in models.items() if model.label == "anthropic"]
    pins = {role: pin for role, pin in pins_of(load_run(root)).items() if role in real}
    if not real:
        return pins
    client = _client(env)
    replaced = _drop_retired(root, pins, configs, client) if pins else {}
    missing = [role for role in real if role not in pins]
    if not missing:
        return pins
    catalogue = _read(lambda: fetch_catalogue(client))
    for role in missing:
        pins[role] = resolve(configs[role].model.name, catalogue)
        log.info("%s agent: model %r is %s", role, pins[role].asked, pins[role].id)
        notes = [f"{replaced[role]}; the agent goes on on {pins[role].id}"] if role in replaced else []
        # A model changed halfway is recorded where it happened: after the agent's last finished step.
        after = AgentDisk.load(root, role).due() - 1 if role in replaced else 0  # type: ignore[arg-type]
        for note in [*notes, *([pins[role].warning] if pins[role].warning else [])]:
            log.warning("%s agent: %s", role, note)
            append_event(Layout(root).events(role), WarningEvent(after_step=after, reason=note))
    _save(root, pins)
    return pins


def _drop_retired(root: Path, pins: dict[str, PinnedModel], configs: Mapping[str, AgentConfig],
                  client: Any) -> dict[str, str]:
    """Refuse a pin whose model has retired, unless the agent's setting now names another model: then drop
    the pin (it is resolved again) and return why, by agent. A Models API that does not answer is a warning:
    the step's own call would meet the API's refusal anyway."""
    try:
        gone = {entry.id: entry for entry in _read(lambda: fetch_catalogue(client, ["retired"]))}
    except ModelCatalogueUnavailable as exc:
        log.warning("could not check the pinned models against the retired ones: %s", exc)
        return {}
    replaced: dict[str, str] = {}
    for role, pin in list(pins.items()):
        if pin.id not in gone:
            continue
        if configs[role].model.name == pin.asked:  # a run changes model only when the user names another one
            current = current_models(_read(lambda: fetch_catalogue(client)))
            raise CatalogueError(
                f"the {role} agent's model {retired(gone[pin.id])} and can no longer be called, so this run cannot "
                f"go on on it: {instead_of(gone[pin.id], current, but=pin.asked)} under [agents.{role}] in "
                f"{Layout(root).toml.name}, then `baton resume {root.name}`")
        replaced[role] = f"model {retired(gone[pin.id])}; the setting names {configs[role].model.name!r} now"
        del pins[role]
    return replaced


def _save(root: Path, pins: dict[str, PinnedModel]) -> None:
    lease = claim_run(root) if load_run(root) is not None else None
    record = load_run(root)
    if lease is not None and record is not None:  # no run yet (`baton context` before the first run): keep nothing
        models_json = {role: pin.model_dump(mode="json") for role, pin in pins.items()}
        save_run(root, record.model_copy(update={"models": {**record.models, **models_json}}), lease)


def _client(env: Mapping[str, str]) -> Any:
    # Imported here, as the model client is: an offline run never loads the SDK.
    import anthropic

    return anthropic.Anthropic(api_key=env[API_KEY_ENV], base_url=env.get(BASE_URL_ENV) or None, max_retries=3)


def _read(fetch: Callable[[], list[CatalogueEntry]]) -> list[CatalogueEntry]:
    import anthropic

    try:
        return fetch()
    except anthropic.AnthropicError as exc:
        # The SDK's exception carries the request (and its key header): report its class and message only.
        raise ModelCatalogueUnavailable(f"could not read the Models API catalogue ({type(exc).__name__}: "
                                        f"{getattr(exc, 'message', '')}); check ANTHROPIC_BASE_URL and the network, "
                                        "then run again") from None

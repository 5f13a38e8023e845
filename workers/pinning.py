"""Pinning each agent's model for the life of a run (docs/agents.md, "Choosing the model").

The first process that builds the agents of a run on the real API resolves their
``model`` settings through the Models API and writes the result to run.json;
every later process (a resumed run, another worker) reads the pin instead, so a
run never changes model halfway. A deprecated model is pinned with a warning in
the log, the agent's events and ``baton status``; a retired or unknown one stops
the run before its first step. Offline (the simulated model) nothing is pinned.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from agents.catalogue import CatalogueEntry, PinnedModel, fetch_catalogue, resolve
from agents.config import AgentConfig
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
    pins = pins_of(load_run(root))
    missing = [role for role, model in models.items() if model.label == "anthropic" and role not in pins]
    if not missing:
        return {role: pin for role, pin in pins.items() if role in models and models[role].label == "anthropic"}
    catalogue = _catalogue(env)
    for role in missing:
        pins[role] = resolve(configs[role].model.name, catalogue)
        log.info("%s agent: model %r is %s", role, pins[role].asked, pins[role].id)
        if pins[role].warning:
            log.warning("%s agent: %s", role, pins[role].warning)
            append_event(Layout(root).events(role), WarningEvent(after_step=0, reason=pins[role].warning))
    lease = claim_run(root) if load_run(root) is not None else None
    record = load_run(root)
    if lease is not None and record is not None:  # no run yet (`baton context` before the first run): keep nothing
        models_json = {role: pin.model_dump(mode="json") for role, pin in pins.items()}
        save_run(root, record.model_copy(update={"models": models_json}), lease)
    return pins


def _catalogue(env: Mapping[str, str]) -> list[CatalogueEntry]:
    # Imported here, as the model client is: an offline run never loads the SDK.
    import anthropic

    client = anthropic.Anthropic(api_key=env[API_KEY_ENV], base_url=env.get(BASE_URL_ENV) or None, max_retries=3)
    try:
        return fetch_catalogue(client)
    except anthropic.AnthropicError as exc:
        # The SDK's exception carries the request (and its key header): report its class and message only.
        raise ModelCatalogueUnavailable(f"could not read the Models API catalogue ({type(exc).__name__}: "
                                        f"{getattr(exc, 'message', '')}); check ANTHROPIC_BASE_URL and the network, "
                                        "then run again") from None

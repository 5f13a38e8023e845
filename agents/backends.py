"""Which model an agent talks to: the real API when a key is set, else the simulated one."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from agents.config import BUILT_IN, AgentConfig
from agents.models import API_KEY_ENV, Model, ModelError
from scenarios.folder import RECORD_BYTES, Folder

log = logging.getLogger(__name__)


def chosen_by_a_person(source: str | None) -> bool:
    """Whether a setting's source (as agents.settings_layers labels it) is someone's choice for this scenario or
    this machine: scenario.toml, an environment variable or an argument; not the built-in default nor a profile."""
    return source is not None and source != BUILT_IN and not source.startswith("profile ")


def backend_for(config: AgentConfig, env: Mapping[str, str] | None = None,
                model_source: str | None = None) -> Literal["anthropic", "simulated"]:
    """``backend = "auto"`` means Anthropic when ``ANTHROPIC_API_KEY`` is set, otherwise the simulated model;
    but a model someone named (``model_source``, where the model setting came from) is never silently replaced
    by the simulated one: without the key that is an error saying how to run simulated on purpose."""
    env = os.environ if env is None else env
    backend = config.model.backend
    if backend == "auto" and not env.get(API_KEY_ENV) and chosen_by_a_person(model_source):
        name = config.model.name
        raise ModelError(f"{config.role}.model = {name!r} (from {model_source}) names the model to run, but "
                         f"{API_KEY_ENV} is not set, and the simulated model would run in its place. Export "
                         f"{API_KEY_ENV} to run {name}; to run the simulated model on purpose, remove that setting "
                         'or set backend = "simulated" beside it (BATON_BACKEND=simulated in the environment)')
    if backend == "auto":
        backend = "anthropic" if env.get(API_KEY_ENV) else "simulated"
    if backend == "anthropic" and not env.get(API_KEY_ENV):
        raise ModelError(f"{config.role}.backend is 'anthropic' but {API_KEY_ENV} is not set; "
                         "export the key, or set backend = 'simulated' to run offline")
    return "anthropic" if backend == "anthropic" else "simulated"


def scenario_brief(root: Path) -> str:
    """The scenario's brief.md; empty without one (no script has an empty brief, so it is refused)."""
    return Folder(Path(root)).read_text_or("brief.md", "", RECORD_BYTES)


def check_model(config: AgentConfig, brief: str, env: Mapping[str, str] | None = None,
                what: str = "this scenario's brief.md", model_source: str | None = None) -> None:
    """What ``model_for`` would refuse, without building a model (no SDK import, no client): a command
    calls it before it writes anything, so a refused run leaves the folder as it was."""
    if backend_for(config, env, model_source) == "simulated":
        from agents.simulated import script_for_brief

        script_for_brief(brief, what)


def model_for(config: AgentConfig, env: Mapping[str, str] | None = None, brief: str | None = None,
              model_source: str | None = None) -> Model:
    """The model of ``config``'s backend (``backend_for``), and a warning when it is the simulated one: a
    simulated run must never pass for a real one. The simulated model plays the script written for
    ``brief`` (the scenario's brief.md) and refuses any other brief (``UnknownBrief``); without a brief
    it chooses per request, from what each request shows of it."""
    env = os.environ if env is None else env
    if backend_for(config, env, model_source) == "anthropic":
        # The SDK costs about a second to import: only when it is used.
        from agents.anthropic_model import AnthropicModel

        return AnthropicModel(api_key=env[API_KEY_ENV])
    # Like the SDK, only when it is used: a real run never loads the simulated model or its scenario script.
    from agents.simulated import SimulatedModel, script_for_brief

    script = script_for_brief(brief) if brief is not None else None
    log.warning("%s agent: using the SIMULATED model (offline, deterministic); set %s for Claude",
                config.role, API_KEY_ENV)
    return SimulatedModel(script)

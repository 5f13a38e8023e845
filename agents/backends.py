"""Which model an agent talks to: the real API when a key is set, else the simulated one."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from agents.config import AgentConfig
from agents.models import API_KEY_ENV, Model, ModelError

log = logging.getLogger(__name__)


def model_for(config: AgentConfig, env: Mapping[str, str] | None = None) -> Model:
    """``backend = "auto"`` picks Anthropic when ``ANTHROPIC_API_KEY`` is set, otherwise
    the simulated model, and says so: a simulated run must never pass for a real one."""
    env = os.environ if env is None else env
    backend = config.model.backend
    if backend == "auto":
        backend = "anthropic" if env.get(API_KEY_ENV) else "simulated"
    if backend == "anthropic":
        if not env.get(API_KEY_ENV):
            raise ModelError(f"{config.role}.backend is 'anthropic' but {API_KEY_ENV} is not set; "
                             "export the key, or set backend = 'simulated' to run offline")
        # The SDK costs about a second to import: only when it is used.
        from agents.anthropic_model import AnthropicModel

        return AnthropicModel(api_key=env[API_KEY_ENV])
    # Like the SDK, only when it is used: a real run never loads the simulated model or its scenario script.
    from agents.simulated import SimulatedModel

    log.warning("%s agent: using the SIMULATED model (offline, deterministic); set %s for Claude",
                config.role, API_KEY_ENV)
    return SimulatedModel()

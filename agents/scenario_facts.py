"""A scenario's settings as the code that proves it takes them (``proving.export.facts.ScenarioFacts``): read
from scenario.toml and the agents' tool settings here, so proving/ never imports the agents' configuration."""

from __future__ import annotations

from pathlib import Path

from agents.config import ToolSettings
from agents.proving_settings import resolve
from agents.settings_layers import load_scenario_config
from proving.evaluation.models import Limits
from proving.export.facts import ScenarioFacts
from scenarios.store import Layout


def scenario_facts(root: Path) -> ScenarioFacts:
    """The name, description, target, default evaluation limits and user simulator of the scenario at ``root``."""
    toml = Layout(Path(root)).toml
    config = load_scenario_config(toml)  # read once: the [proving] table is in it too
    defaults = ToolSettings()
    return ScenarioFacts(name=config.name, description=config.description,
                         target_success_rate=config.target_success_rate,
                         default_limits=Limits(timeout_s=defaults.eval_timeout_s, memory_mb=defaults.eval_memory_mb),
                         user_simulator=resolve(config.proving, toml).user_simulator)

"""One agent wired for a step: its settings, its tools, its model, its context assembler."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.config import AgentConfig, ConfigError
from agents.conventions import conventions_for
from agents.disk import AgentDisk
from agents.models import Model
from agents.pricing import Price, Tokens
from agents.prompts import prompt
from agents.role import Role
from agents.tools.base import ToolContext, definition
from agents.tools.registry import tools_for
from context.assembly import Assembler, StaticPrefix
from context.cache_rates import CacheRates
from context.estimator import TokenEstimator
from context.history import History
from context.messages import Usage


@dataclass
class Agent:
    """What a step needs besides the disk: the role's settings, its tools, its model."""

    config: AgentConfig
    model: Model
    # Its model's price (agents.pricing, with the scenario's overrides), looked up once when the agent
    # is built; None offline or for a model with no price on file.
    price: Price | None = None

    @property
    def role(self) -> Role:
        return self.config.role

    def cost(self, usage: Usage | Mapping[str, int] | None) -> float | None:
        """What one call with this ``usage`` cost, in US dollars (None without a price or a call)."""
        return Tokens.of(usage).cost(self.price) if usage is not None else None

    def tools(self) -> dict[str, Any]:
        return tools_for(self.config)

    def static(self, root: Path | None = None, conventions: str | None = None, thinking_epoch: int = 0
               ) -> StaticPrefix:
        return static_prefix(self.config, root, conventions, thinking_epoch)

    def context(self, root: Path, iteration: int, memory: dict[str, Any]) -> ToolContext:
        label = self.model.label if self.model.label == "simulated" else ""
        return ToolContext(root=Path(root), agent=self.role, iteration=iteration, settings=self.config.tools,
                           model_label=label, memory=memory)

    def assembler(self, disk: AgentDisk, history: History) -> Assembler:
        return assembler_for(self.config, disk, history, self.price)


def static_prefix(config: AgentConfig, root: Path | None = None, conventions: str | None = None,
                  thinking_epoch: int = 0) -> StaticPrefix:
    """System prompt (with the conventions of the scenario in ``root``, if any) and tool definitions.

    ``conventions``: the text the agent's system prompt was fixed with at its first step
    (``AgentState.system_conventions``); a later change reaches the agent as a new message. ``thinking_epoch``
    (``AgentState``) starts the prefix chain (context.prefix)."""
    system = prompt(config.role, "system")
    if conventions is None:
        conventions = conventions_for(root).text if root is not None else ""
    if conventions:
        system = f"{system.rstrip()}\n\n{conventions}\n"
    return StaticPrefix(system=system, tools=[definition(t) for t in tools_for(config).values()],
                        thinking_epoch=thinking_epoch)


def assembler_for(config: AgentConfig, disk: AgentDisk, history: History, price: Price | None = None
                  ) -> Assembler:
    """The agent's context assembler; it needs no model (``baton context`` builds one without any). ``price``:
    the model's, whose cache ratios the payback rule reads (0.05x reads on the 5.5 models); without one,
    the usual ratios."""
    estimator = TokenEstimator.from_dict(disk.state.estimator) if disk.state.estimator else TokenEstimator()
    static = static_prefix(config, disk.layout.root, disk.state.system_conventions, disk.state.thinking_epoch)
    rates = CacheRates() if price is None else CacheRates.of(price.input, price.cache_read, price.cache_write,
                                                               getattr(price, "cache_write_1h", None))
    return Assembler(history, config.context, agent=config.role, static=static, estimator=estimator, rates=rates)


def check_threshold(config: AgentConfig, root: Path, source: str) -> None:
    """A threshold at or below what the system prompt and tools alone take would compact on every step
    (and no summary could bring the context under it): refused before the run starts."""
    static = static_prefix(config, root).tokens
    if config.context.threshold <= static:
        raise ConfigError(
            f"{config.role}.threshold = {config.context.threshold:,} (from {source}) is below what {config.role}'s "
            f"system prompt and tools alone take ({static:,} tokens): every step would compact; raise it well "
            f"above {static:,} (and the window with it)")

"""One agent wired for a step: its settings, its tools, its model, its context assembler."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.config import AgentConfig
from agents.conventions import conventions_for
from agents.disk import AgentDisk
from agents.models import Model
from agents.pricing import Price, Tokens
from agents.prompts import prompt
from agents.role import Role
from agents.tools.base import ToolContext, definition
from agents.tools.registry import tools_for
from context.assembly import Assembler, StaticPrefix
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
        """System prompt (with the conventions of the scenario in ``root``, if any) and tool definitions.

        ``conventions``: the text the agent's system prompt was fixed with at its first step
        (``AgentState.system_conventions``); a later change reaches the agent as a new message."""
        system = prompt(self.role, "system")
        if conventions is None:
            conventions = conventions_for(root).text if root is not None else ""
        if conventions:
            system = f"{system.rstrip()}\n\n{conventions}\n"
        return StaticPrefix(system=system, tools=[definition(t) for t in self.tools().values()],
                            thinking_epoch=thinking_epoch)

    def context(self, root: Path, iteration: int, memory: dict[str, Any]) -> ToolContext:
        label = self.model.label if self.model.label == "simulated" else ""
        return ToolContext(root=Path(root), agent=self.role, iteration=iteration, settings=self.config.tools,
                           model_label=label, memory=memory)

    def assembler(self, disk: AgentDisk, history: History) -> Assembler:
        estimator = TokenEstimator.from_dict(disk.state.estimator) if disk.state.estimator else TokenEstimator()
        static = self.static(disk.layout.root, disk.state.system_conventions, disk.state.thinking_epoch)
        return Assembler(history, self.config.context, agent=self.role, static=static, estimator=estimator)

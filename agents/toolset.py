"""The tools each role gets, in a fixed order (the tool list must be byte-identical
on every call for the prompt cache to hold)."""

from __future__ import annotations

from agents.config import AgentConfig
from agents.evaluation import RunEvaluation
from agents.file_tools import FILE_TOOLS
from agents.handoff_tool import SubmitHandoff
from agents.tooling import Tool


def tools_for(config: AgentConfig) -> dict[str, Tool]:
    """Name -> tool for ``config.role``. Bash is listed only where it is enabled, so
    the model never sees a tool it may not use."""
    tools: list[Tool] = [t for t in FILE_TOOLS if t.name != "Bash" or config.bash_enabled]
    if config.role == "execute":
        tools.append(RunEvaluation())
    tools.append(SubmitHandoff(config.role))
    return {t.name: t for t in tools}

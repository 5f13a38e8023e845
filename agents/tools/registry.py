"""The tools each role gets, in a fixed order (the tool list must be byte-identical
on every call for the prompt cache to hold)."""

from __future__ import annotations

from agents.config import AgentConfig
from agents.tools.base import FileTool, Tool
from agents.tools.bash import BashTool
from agents.tools.evaluation import RunEvaluation
from agents.tools.grep import GrepTool
from agents.tools.handoff import SubmitHandoff
from agents.tools.listing import GlobTool, LSTool
from agents.tools.read import ReadTool
from agents.tools.todo import TodoWriteTool
from agents.tools.write import EditTool, WriteTool

FILE_TOOLS: list[FileTool] = [
    ReadTool(),
    WriteTool(),
    EditTool(),
    LSTool(),
    GlobTool(),
    GrepTool(),
    BASH := BashTool(),
    TodoWriteTool(),
]


def tools_for(config: AgentConfig) -> dict[str, Tool]:
    """Name -> tool for ``config.role``. Bash is listed only where it is enabled, so
    the model never sees a tool it may not use."""
    tools: list[Tool] = [t for t in FILE_TOOLS if t.name != "Bash"]
    if config.tools.bash_enabled:  # in its place, described as the sandbox setting makes it (confined or not)
        tools.insert(FILE_TOOLS.index(BASH), BashTool(config.tools.bash_sandbox))
    if config.role == "execute":
        tools.append(RunEvaluation())
    tools.append(SubmitHandoff(config.role))
    return {t.name: t for t in tools}

"""What every agent tool shares: its context, its result envelope, its protocol.

A tool is an object with a ``name``, a ``description``, an ``input_schema`` (the
JSON schema the model sees) and ``run(input, ctx) -> ToolResult``. Results use
the envelope ``{"status": "ok"|"error", "data": ..., "error": ...}`` whose
``data`` shapes are the models in ``context.compression`` (ReadData, BashData,
...), so older results compress to their facts. A tool never raises for bad
input: it returns ``status: error`` with a message saying what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from context.redaction import redact
from scenarios.store import Layout, StoreError, inside

Role = Literal["init", "execute"]

# The result text the model sees is capped; the full result is archived on disk.
MAX_RESULT_CHARS = 200_000


@dataclass
class ToolContext:
    """Where a tool runs and what it may do. Built by the step for each call."""

    root: Path  # the scenario folder; every path is confined to it
    agent: Role
    iteration: int
    bash_enabled: bool = False
    bash_timeout_s: float = 60.0
    output_cap_chars: int = 30_000  # per stream for Bash, per file for Read
    eval_timeout_s: float = 10.0  # per sample
    eval_memory_mb: int = 512  # per sample
    model_label: str = ""  # "simulated" when the simulated model drives this agent
    # Per-agent memory that must survive between steps (Read mtimes, todos);
    # the step loads it from state/<agent>/tools.json and saves it after the tools.
    memory: dict[str, Any] = field(default_factory=dict)

    @property
    def layout(self) -> Layout:
        return Layout(self.root)

    def path(self, relative: str) -> Path:
        """Resolve a model-given path inside the scenario folder (StoreError if not)."""
        return inside(self.root, relative)


class ToolResult(BaseModel):
    """The envelope, plus whether this tool call ends the agent's turn."""

    model_config = ConfigDict(frozen=True)
    status: Literal["ok", "error"]
    data: Any = None
    error: str | None = None
    ends_turn: bool = False  # SubmitHandoff, once accepted

    def text(self) -> str:
        """The tool_result content: the envelope as JSON, secrets redacted."""
        body = {"status": self.status, "data": self.data, "error": self.error}
        return redact(json.dumps(body, ensure_ascii=False, default=str))


def parse_envelope(text: str) -> dict[str, Any]:
    """A tool_result text read back as its envelope; ``{}`` if it is not one."""
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def ok(data: Any = None, *, ends_turn: bool = False) -> ToolResult:
    return ToolResult(status="ok", data=data, ends_turn=ends_turn)


def error(message: str, data: Any = None) -> ToolResult:
    return ToolResult(status="error", data=data, error=message)


class Tool(Protocol):
    name: str
    description: str
    input_schema: dict[str, Any]

    def run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult: ...


def definition(tool: Tool) -> dict[str, Any]:
    """The tool as the Messages API lists it."""
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


def run_tool(tools: dict[str, Tool], name: str, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Run one tool call; unknown tools, refused paths and crashes become error results."""
    tool = tools.get(name)
    if tool is None:
        return error(f"unknown tool {name!r}; available tools: {', '.join(sorted(tools))}")
    try:
        return tool.run(tool_input, ctx)
    except StoreError as exc:
        return error(str(exc))
    except Exception as exc:  # noqa: BLE001 - a tool bug must not kill the step; the model sees it
        return error(f"{name} failed unexpectedly: {type(exc).__name__}: {exc}")

"""What every agent tool shares: its context, its result envelope, its protocol.

A tool is an object with a ``name``, a ``description``, an ``input_schema`` (the
JSON schema the model sees) and ``run(input, ctx) -> ToolResult``. Results use
the envelope ``{"status": "ok"|"error", "data": ..., "error": ...}`` whose
``data`` shapes are the models in ``context.tool_results`` (ReadData, BashData,
...), so older results compress to their facts. A tool never raises for bad
input: it returns ``status: error`` with a message saying what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from agents.config import ToolSettings
from agents.role import Role
from context.redaction import redact
from scenarios.journal import Direct, FileWriter
from scenarios.lease import LeaseLost
from scenarios.store import Layout, StoreError, relative

# How the tools mark a clipped line (``context.text.clip``); the model has seen this wording.
TOOL_CLIP_MARKER = "… [+{n} chars]"


@dataclass
class ToolContext:
    """Where a tool runs and what it may do. Built by the step for each call."""

    root: Path  # the scenario folder; every path is confined to it
    agent: Role
    iteration: int
    settings: ToolSettings = field(default_factory=ToolSettings)  # the agent's tools section
    model_label: str = ""  # "simulated" when the simulated model drives this agent
    # Per-agent memory that must survive between steps (Read mtimes, todos);
    # the step loads it from state/<agent>/tools.json and saves it after the tools.
    memory: dict[str, Any] = field(default_factory=dict)
    # How the tool writes files: in a step, the call's journal (undone if the call must run again,
    # and fenced by the step's lease: scenarios.journal); elsewhere, directly.
    files: FileWriter | None = None

    def __post_init__(self) -> None:
        # Direct writes are confined to the folder too (scenarios.confined), as a step's journal's are.
        if self.files is None:
            self.files = Direct(self.root)

    @property
    def layout(self) -> Layout:
        return Layout(self.root)


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
        text = json.dumps(body, ensure_ascii=False, default=str)
        # A file name of bytes that are not UTF-8 arrives as surrogates (os.fsdecode); as they are, the result
        # could not be stored, and the step would fail on every retry. Their bytes are shown escaped instead.
        return redact(text.encode("utf-8", "backslashreplace").decode("utf-8"))


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
    except LeaseLost:
        raise  # not the model's business: the whole step is discarded
    except StoreError as exc:
        return error(str(exc))
    except Exception as exc:  # noqa: BLE001 - a tool bug must not kill the step; the model sees it
        return error(f"{name} failed unexpectedly: {type(exc).__name__}: {exc}")


# ---- the file and shell tools' common ground ------------------------------------------------


class ToolInputError(ValueError):
    """Bad tool input or a refused operation; the message says what to do instead."""


class FileTool:
    """Base of the file and shell tools: turns refusals and OS errors into error
    results, so ``run`` never raises."""

    name = ""
    description = ""
    SCHEMA: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        # An instance copy: the Tool protocol reads input_schema from the instance,
        # and nobody mutating it can change another tool object's schema.
        self.input_schema: dict[str, Any] = json.loads(json.dumps(self.SCHEMA))

    def run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not isinstance(tool_input, dict):
            return error(f"{self.name} expects a JSON object as input")
        try:
            return self._run(tool_input, ctx)
        except (ToolInputError, StoreError) as exc:
            return error(str(exc))
        except OSError as exc:
            where = f" ({_rel_or_raw(ctx, exc.filename)})" if exc.filename else ""
            return error(f"{self.name} failed: {exc.strerror or exc}{where}")

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise NotImplementedError


def _rel_or_raw(ctx: ToolContext, filename: Any) -> str:
    try:
        return relative(ctx.root, Path(filename))
    except (ValueError, OSError):
        return str(filename)


def string_input(tool_input: dict[str, Any], key: str, *, default: str | None = None, allow_empty: bool = False) -> str:
    value = tool_input.get(key, default)
    if value is None:
        raise ToolInputError(f"missing required input {key!r}")
    if not isinstance(value, str):
        raise ToolInputError(f"input {key!r} must be a string, got {type(value).__name__}")
    if not allow_empty and not value:
        raise ToolInputError(f"input {key!r} must not be empty")
    return value


def int_input(tool_input: dict[str, Any], key: str, default: int, minimum: int) -> int:
    value = tool_input.get(key)
    if value is None:
        return default
    # bool is an int in Python; "true" as a line number is a model mistake worth naming.
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        raise ToolInputError(f"input {key!r} must be a whole number, got {value!r}")
    if value < minimum:
        raise ToolInputError(f"input {key!r} must be at least {minimum}, got {value}")
    return int(value)


def bool_input(tool_input: dict[str, Any], key: str) -> bool:
    value = tool_input.get(key, False)
    if not isinstance(value, bool):
        raise ToolInputError(f"input {key!r} must be true or false, got {value!r}")
    return value

"""The data shapes baton's tools return; the compressor reads them.

Every tool of ``agents.tools`` answers with a JSON envelope
``{"status": "ok"|"error", "data": {...}, "error": str|null}``. For the tools
named in ``DATA_MODELS``, ``data`` follows the model given there: the compressed
form of an older result (``context.envelope_forms``) is built from those fields.
This module is the contract between the two sides: a tool that changes its
``data`` changes it here, and the tests of the tools validate against it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class ToolData(BaseModel):
    # Extra keys are tolerated so the tools can grow without breaking compression.
    model_config = ConfigDict(extra="ignore")


class ToolEnvelope(ToolData):
    status: Literal["ok", "error"]
    data: Any = None
    error: str | None = None


class ReadData(ToolData):
    path: str
    start_line: int = 1
    end_line: int = 0
    total_lines: int = 0
    mtime: float | str | None = None
    modified_externally: bool = False
    content: str = ""


class BashData(ToolData):
    command: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False


class LSData(ToolData):
    path: str
    entries: list[str] = []
    total: int | None = None


class GlobData(ToolData):
    pattern: str
    matches: list[str] = []
    total: int | None = None


class GrepMatch(ToolData):
    file: str
    line: int | None = None
    text: str = ""


class GrepData(ToolData):
    pattern: str
    matches: list[GrepMatch] = []
    total: int | None = None


class EditData(ToolData):
    """Edit and MultiEdit."""

    path: str
    applied: bool = True
    replacements: int = 0
    diff: str = ""


class WriteData(ToolData):
    path: str
    created: bool = False
    size: int = 0
    diff: str = ""
    content_head: str = ""


class TodoItem(ToolData):
    content: str
    status: str = "pending"  # pending | in_progress | completed


class TodoWriteData(ToolData):
    todos: list[TodoItem] = []


class EvaluationFailure(ToolData):
    sample: str
    layer: str | None = None
    reason: str = ""


class EvaluationData(ToolData):
    """RunEvaluation: the totals and where the full report is."""

    iteration: int | None = None
    total: int = 0
    passed: int = 0
    success_rate: float = 0.0
    failures_per_layer: dict[str, int] = {}
    failures: list[EvaluationFailure] = []
    report_path: str = ""


#: Lower-cased tool name -> model of its ``data``.
DATA_MODELS: dict[str, type[ToolData]] = {
    "read": ReadData,
    "bash": BashData,
    "ls": LSData,
    "glob": GlobData,
    "grep": GrepData,
    "edit": EditData,
    "multiedit": EditData,
    "write": WriteData,
    "todowrite": TodoWriteData,
    "runevaluation": EvaluationData,
}

"""``Write`` and ``Edit``: atomic writes outside baton's bookkeeping, answered with a diff."""

from __future__ import annotations

import difflib
from itertools import islice
from typing import Any, ClassVar

from agents.tools.base import (
    TOOL_CLIP_MARKER,
    FileTool,
    ToolContext,
    ToolInputError,
    ToolResult,
    bool_input,
    ok,
    string_input,
)
from agents.tools.paths import changed_since_seen, is_binary, opened, seen_mtimes, writable
from context.text import clip
from scenarios import confined
from scenarios.confined import Parts

# What one Write may put in a file, and the largest file Edit reads: far above what a model writes in one call
# (its whole output, 128k tokens at most, is some 0.5 MB) and below the 20 MB Grep still searches.
MAX_FILE_BYTES = 8 * 1024 * 1024
DIFF_LINES = 40
HEAD_LINES = 20
MAX_DIFF_CHARS = 2_000_000  # difflib is roughly quadratic; bigger files get a summary


def _diff(old: str, new: str) -> str:
    """The first lines of a unified diff (no file headers: the path is in the result)."""
    if len(old) > MAX_DIFF_CHARS or len(new) > MAX_DIFF_CHARS:
        return (
            f"(diff not computed: file over {MAX_DIFF_CHARS:,} characters; "
            f"{_count_text_lines(old)} -> {_count_text_lines(new)} lines)"
        )
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2))[2:]
    shown = [clip(line, 500, TOOL_CLIP_MARKER) for line in lines[:DIFF_LINES]]
    if len(lines) > DIFF_LINES:
        shown.append(f"... ({len(lines) - DIFF_LINES} more diff lines; Read the file to see the result)")
    return "\n".join(shown)


def _count_text_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _head(text: str, n: int) -> str:
    return "\n".join(clip(line, 500, TOOL_CLIP_MARKER) for line in islice(iter(text.splitlines()), n))


def _old_text(ctx: ToolContext, rel: str) -> str | None:
    """The current text of a file about to be replaced (None if it is binary, not UTF-8 or too large to diff)."""
    with opened(ctx, rel) as (fh, _, st):
        if st.st_size > MAX_FILE_BYTES or is_binary(fh):
            return None
        raw = fh.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _check_size(size: int, what: str) -> None:
    """Refuse a file over MAX_FILE_BYTES; ``what`` says which, e.g. "the content for a.py is"."""
    if size > MAX_FILE_BYTES:
        raise ToolInputError(f"{what} {size:,} bytes, over the limit of {MAX_FILE_BYTES:,} per file; nothing was "
                             "written. Split it into several files")


def _mtime(ctx: ToolContext, parts: Parts) -> float:
    st = confined.lstat(ctx.root, parts)
    return st.st_mtime if st is not None else 0.0


class WriteTool(FileTool):
    name = "Write"
    description = (
        "Create or overwrite a text file in the scenario folder with `content` (parent folders are "
        "created; the write is atomic). Returns whether the file was created, its size in bytes, and "
        "a diff when an existing file was replaced. Prefer Edit for changing part of an existing file. "
        "state/, run.json, handoffs/ and RunEvaluation's report.json, results.jsonl and traces/ belong to baton, "
        "and scenario.toml, brief.md and CONVENTIONS.md to a person: they cannot be written. Symlinks are never "
        "followed; at most 8 MB per file."
    )
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the scenario folder"},
            "content": {"type": "string", "description": "The complete new content of the file"},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        parts, rel, st = writable(ctx, string_input(tool_input, "path"))
        content = string_input(tool_input, "content", allow_empty=True)
        raw = content.encode("utf-8", errors="replace")
        _check_size(len(raw), f"the content for {rel} is")
        created = st is None
        old = None if st is None else _old_text(ctx, rel)
        external = st is not None and changed_since_seen(ctx, rel, st.st_mtime)
        ctx.files.write(ctx.root.joinpath(*parts), raw)
        seen_mtimes(ctx)[rel] = _mtime(ctx, parts)
        data: dict[str, Any] = {"path": rel, "created": created, "size": len(raw), "diff": "", "content_head": ""}
        if created:
            data["content_head"] = _head(content, HEAD_LINES)
        elif old is None:
            data["diff"] = "(replaced a binary or non-UTF-8 file; no diff)"
        else:
            data["diff"] = _diff(old, content) or "(no changes: the content was identical)"
        if external:
            data["note"] = "the file had changed since you last read or wrote it; those changes were overwritten"
        return ok(data)


class EditTool(FileTool):
    name = "Edit"
    description = (
        "Replace an exact string in a text file: `old_string` must match the file character for "
        "character (whitespace and indentation included; copy it from Read output without the line "
        "number prefix). It must occur exactly once unless `replace_all` is true; add surrounding "
        "lines to make it unique. Returns the number of replacements and a diff. The write is atomic. "
        "What Write cannot write (baton's files, a person's settings) cannot be edited either."
    )
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the scenario folder"},
            "old_string": {"type": "string", "description": "The exact text to replace"},
            "new_string": {"type": "string", "description": "The text to put in its place (must differ)"},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)"},
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        parts, rel, st = writable(ctx, string_input(tool_input, "path"))
        old_string = string_input(tool_input, "old_string")
        new_string = string_input(tool_input, "new_string", allow_empty=True)
        replace_all = bool_input(tool_input, "replace_all")
        if old_string == new_string:
            raise ToolInputError("old_string and new_string are identical; nothing to change")
        if st is None:
            raise ToolInputError(f"file not found: {rel}; use LS or Glob to see which files exist "
                                 "(paths are relative to the scenario folder), or Write to create it")
        _check_size(st.st_size, f"{rel} is")
        text = _old_text(ctx, rel)
        if text is None:
            raise ToolInputError(f"{rel} is binary or not UTF-8 text; Edit works on text files only")
        count = self._check_count(text, old_string, rel, replace_all)
        # The size after the edit, known before it is made: replace_all of a short string could grow the file a
        # thousandfold in memory first.
        growth = count * (len(new_string.encode("utf-8", "replace")) - len(old_string.encode("utf-8", "replace")))
        _check_size(st.st_size + growth, f"after this edit {rel} would be")
        external = changed_since_seen(ctx, rel, st.st_mtime)
        new_text = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
        raw = new_text.encode("utf-8", errors="replace")
        ctx.files.write(ctx.root.joinpath(*parts), raw)
        seen_mtimes(ctx)[rel] = _mtime(ctx, parts)
        data = {"path": rel, "applied": True, "replacements": count, "diff": _diff(text, new_text)}
        if external:
            data["note"] = (
                "the file had changed since you last read or wrote it; the edit was applied to its current content"
            )
        return ok(data)

    @staticmethod
    def _check_count(text: str, old_string: str, rel: str, replace_all: bool) -> int:
        count = text.count(old_string)
        if count == 0:
            raise ToolInputError(
                f"old_string was not found in {rel}; Read the file and copy the exact text "
                "(whitespace, indentation and line breaks must match; omit the line-number prefix)"
            )
        if count > 1 and not replace_all:
            raise ToolInputError(
                f"old_string occurs {count} times in {rel}; add surrounding lines to make it unique, "
                "or set replace_all to true to replace every occurrence"
            )
        return count if replace_all else 1

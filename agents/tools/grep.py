"""``Grep``: a regular expression over file contents, line by line, streamed."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, BinaryIO, ClassVar

from agents.tools.base import FileTool, ToolContext, ToolInputError, ToolResult, bool_input, ok, string_input
from agents.tools.listing import check_glob, glob_regex
from agents.tools.paths import existing, is_binary, walk_files
from scenarios import confined
from scenarios.confined import Parts, shown

MAX_GREP_MATCHES = 200
MAX_GREP_FILE_BYTES = 20 * 1024 * 1024
GREP_TEXT_CHARS = 300
MAX_SKIPPED_LISTED = 20


@dataclass
class _GrepState:
    regex: re.Pattern[str]
    matches: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0
    files_with_matches: int = 0
    skipped: list[str] = field(default_factory=list)
    skipped_total: int = 0

    def skip(self, rel: str, reason: str) -> None:
        self.skipped_total += 1
        if len(self.skipped) < MAX_SKIPPED_LISTED:
            self.skipped.append(f"{rel} ({reason})")


def _match_text(line: str, match: re.Match[str]) -> str:
    """The matching line, or a window of it around the match when it is long."""
    if len(line) <= GREP_TEXT_CHARS:
        return line
    start = max(0, min(match.start() - 60, len(line) - GREP_TEXT_CHARS))
    text = line[start : start + GREP_TEXT_CHARS]
    return ("…" if start else "") + text + ("…" if start + GREP_TEXT_CHARS < len(line) else "")


class GrepTool(FileTool):
    name = "Grep"
    description = (
        "Search file contents with a Python regular expression, line by line (a match cannot span "
        "lines). Searches `path` (a file or a directory, default the whole scenario folder), "
        "optionally only files whose name matches `glob` (e.g. '*.py', '*.{json,md}'; a glob with '/' "
        f"is matched against the path below `path`). Returns up to {MAX_GREP_MATCHES} matches as "
        "file, line number and line text, with the exact total. Binary files and files over 20 MB are "
        "skipped and listed under `skipped`."
    )
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Python regular expression, e.g. 'def \\w+_checker'"},
            "path": {
                "type": "string",
                "description": "File or directory to search, relative to the scenario folder (default '.')",
            },
            "glob": {"type": "string", "description": "Only search files matching this glob, e.g. '*.py'"},
            "case_insensitive": {"type": "boolean", "description": "Ignore case (default false)"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern = string_input(tool_input, "pattern")
        flags = re.IGNORECASE if bool_input(tool_input, "case_insensitive") else 0
        try:
            regex = re.compile(pattern, flags)
        except re.error as exc:
            raise ToolInputError(
                f"invalid regular expression {pattern!r}: {exc} "
                "(Python `re` syntax; escape literal characters like '(' or '.')"
            ) from None
        files = self._files(tool_input, ctx)
        state = _GrepState(regex)
        for parts in files:
            self._search(ctx, parts, state)
        data: dict[str, Any] = {
            "pattern": pattern,
            "matches": state.matches,
            "total": state.total,
            "files_with_matches": state.files_with_matches,
            "files_searched": len(files) - state.skipped_total,
        }
        if state.skipped_total:
            data["skipped"] = state.skipped
            data["skipped_total"] = state.skipped_total
        if state.total > MAX_GREP_MATCHES:
            data["note"] = (
                f"showing the first {MAX_GREP_MATCHES} of {state.total} matches; narrow the pattern, path or glob"
            )
        return ok(data)

    @staticmethod
    def _files(tool_input: dict[str, Any], ctx: ToolContext) -> list[Parts]:
        raw = string_input(tool_input, "path", default=".")
        target, _, is_dir = existing(ctx, raw, "path not found: {rel}; use LS or Glob to see what exists")
        if not is_dir:
            return [target]
        if tool_input.get("glob") is None:
            return list(walk_files(ctx, target))
        glob = check_glob(string_input(tool_input, "glob"))
        regex = glob_regex(glob)
        by_path = "/" in glob.strip("/")
        return [p for p in walk_files(ctx, target) if regex.match(shown(p[len(target):]) if by_path else p[-1])]

    @classmethod
    def _search(cls, ctx: ToolContext, parts: Parts, state: _GrepState) -> None:
        rel = shown(parts)
        try:
            with confined.open_file(ctx.root, parts) as (fd, st), os.fdopen(os.dup(fd), "rb") as fh:
                cls._search_open(fh, rel, st.st_size, state)
        except confined.Refused as exc:  # a hard link, or a symlink put there since the folder was listed
            state.skip(rel, str(exc).split(";")[0].removeprefix(f"{rel} "))
        except (confined.Missing, confined.IsFolder):
            state.skip(rel, "gone or changed while searching")

    @staticmethod
    def _search_open(fh: BinaryIO, rel: str, size: int, state: _GrepState) -> None:
        if size > MAX_GREP_FILE_BYTES:
            state.skip(rel, "over 20 MB; use Read with offset/limit")
            return
        if is_binary(fh):
            state.skip(rel, "binary")
            return
        found = False
        for number, raw in enumerate(fh, start=1):
            line = raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r")
            match = state.regex.search(line)
            if match is None:
                continue
            found = True
            state.total += 1
            if len(state.matches) < MAX_GREP_MATCHES:
                state.matches.append({"file": rel, "line": number, "text": _match_text(line, match)})
        state.files_with_matches += found

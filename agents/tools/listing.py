"""``LS`` and ``Glob``, and the glob compiler Grep's ``glob`` filter shares."""

from __future__ import annotations

import os
import re
from typing import Any, ClassVar

from agents.tools.base import FileTool, ToolContext, ToolInputError, ToolResult, ok, string_input
from agents.tools.paths import directory, walk_files
from scenarios import confined
from scenarios.confined import shown

MAX_ENTRIES = 500


class LSTool(FileTool):
    name = "LS"
    description = (
        "List a directory of the scenario folder (default: its top level). Entries are sorted; "
        "directories end with '/', symlinks with '@' (the file tools never follow them). "
        f"At most {MAX_ENTRIES} entries are shown; `total` is always the full count. Use Glob to find files by "
        "pattern across subfolders."
    )
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Directory relative to the scenario folder (default '.')"},
        },
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        parts, rel = directory(ctx, string_input(tool_input, "path", default="."))
        entries = [e.name + _mark(e) for e in confined.entries(ctx.root, parts)]
        data: dict[str, Any] = {"path": rel, "entries": entries[:MAX_ENTRIES], "total": len(entries)}
        if len(entries) > MAX_ENTRIES:
            data["note"] = (
                f"showing the first {MAX_ENTRIES} of {len(entries)} entries; use Glob with a pattern to narrow down"
            )
        return ok(data)


def _mark(entry: os.DirEntry[str]) -> str:
    """'/' for a directory, '@' for a symlink (never followed, not even to see what it names)."""
    if entry.is_symlink():
        return "@"
    return "/" if entry.is_dir(follow_symlinks=False) else ""


def _expand_braces(pattern: str, budget: int = 64) -> list[str]:
    """``a.{py,md}`` -> ``a.py``, ``a.md`` (innermost group first; bounded)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    out: list[str] = []
    for option in match.group(1).split(","):
        out.extend(_expand_braces(pattern[: match.start()] + option + pattern[match.end() :], budget))
        if len(out) > budget:
            raise ToolInputError("the pattern's {a,b} groups expand to too many alternatives; simplify it")
    return out


def _segment_regex(segment: str) -> str:
    out, i = [], 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := segment.find("]", i + 2)) > 0:
            body = segment[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob (``*``, ``?``, ``[..]``, ``**`` for any depth, ``{a,b}``) as a regex on '/' paths."""
    alternatives = []
    for option in _expand_braces(pattern):
        parts, segments = [], option.split("/")
        for i, segment in enumerate(segments):
            last = i == len(segments) - 1
            if segment == "**":
                parts.append(".*" if last else "(?:[^/]+/)*")
            else:
                parts.append(_segment_regex(segment) + ("" if last else "/"))
        alternatives.append("".join(parts))
    try:
        return re.compile("^(?:" + "|".join(alternatives) + ")$")
    except re.error as exc:
        raise ToolInputError(f"invalid glob pattern {pattern!r}: {exc}") from None


def check_glob(pattern: str) -> str:
    """A model-given glob, refused if it could reach outside the folder; ``./`` dropped."""
    text = pattern.strip().replace("\\", "/")
    if text.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", text):
        raise ToolInputError(
            f"glob {pattern!r} is absolute; give a pattern relative to the scenario folder (or to `path`)"
        )
    if ".." in text.split("/"):
        raise ToolInputError(f"glob {pattern!r} contains '..'; patterns must stay inside the scenario folder")
    while text.startswith("./"):
        text = text[2:]
    return text


class GlobTool(FileTool):
    name = "Glob"
    description = (
        "Find files by name pattern in the scenario folder. Supports `*` and `?` (within one path "
        "segment), `[abc]`, `**` (any number of folders) and `{a,b}` alternatives, e.g. "
        "`**/*.py`, `execution_outputs/iteration_1/samples/*.json`, `design/*.{md,json}`. The "
        "pattern is matched against paths relative to `path` (default: the scenario folder); `*.py` "
        f"matches the top level only. Returns files (not folders) sorted by path, at most {MAX_ENTRIES}, "
        "with the exact `total`."
    )
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern, e.g. '**/*.json'"},
            "path": {
                "type": "string",
                "description": "Directory to search in, relative to the scenario folder (default '.')",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern = string_input(tool_input, "pattern")
        regex = glob_regex(check_glob(pattern))
        base, _ = directory(ctx, string_input(tool_input, "path", default="."))
        matches = [shown(p) for p in walk_files(ctx, base) if regex.match(shown(p[len(base):]))]
        matches.sort()
        data: dict[str, Any] = {"pattern": pattern, "matches": matches[:MAX_ENTRIES], "total": len(matches)}
        if len(matches) > MAX_ENTRIES:
            data["note"] = f"showing the first {MAX_ENTRIES} of {len(matches)} files; narrow the pattern or the path"
        elif not matches:
            data["note"] = "no files match; patterns are relative to `path`, and `*` does not cross '/' (use `**/`)"
        return ok(data)

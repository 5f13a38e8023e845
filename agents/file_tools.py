"""The agents' file and shell tools: Read, Write, Edit, LS, Glob, Grep, Bash, TodoWrite.

Every path the model gives goes through ``ctx.path()``, so nothing leaves the
scenario folder (no ``..``, absolute paths or symlinks out of it), and every
path in a result is relative to that folder. The ``data`` of each ok result
follows its model in ``context.compression`` (ReadData, WriteData, ...): older
results are compressed from exactly those fields, so extra keys are fine but
the named ones must keep their meaning.

Files can be large (a 50 MB log, a minified bundle): Read and Grep stream
lines instead of loading whole files, and Bash reads its output incrementally,
keeping only a bounded head and tail.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import IO, Any, ClassVar

from agents.tooling import ToolContext, ToolResult, error, ok
from context.redaction import is_secret_name
from scenarios.store import StoreError, relative, write_atomic

# Read
DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000  # longer lines are clipped; Grep or Bash can show the rest
BINARY_SNIFF_BYTES = 8192
CHUNK_BYTES = 1 << 20
# Listings
MAX_ENTRIES = 500
# Grep
MAX_GREP_MATCHES = 200
MAX_GREP_FILE_BYTES = 20 * 1024 * 1024
GREP_TEXT_CHARS = 300
MAX_SKIPPED_LISTED = 20
# Write / Edit
DIFF_LINES = 40
HEAD_LINES = 20
MAX_DIFF_CHARS = 2_000_000  # difflib is roughly quadratic; bigger files get a summary
# Bash
PIPE_READ_BYTES = 65536
EXIT_GRACE_S = 1.0  # how long output may keep flowing after the command itself exited

ARCHIVE = re.compile(r"^state/[^/]+/tool_results/[^/]+\.txt$")


class ToolInputError(ValueError):
    """Bad tool input or a refused operation; the message says what to do instead."""


# ---------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------


class _FileTool:
    """Base: turns refusals and OS errors into error results, so ``run`` never raises."""

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


def _string(tool_input: dict[str, Any], key: str, *, default: str | None = None, allow_empty: bool = False) -> str:
    value = tool_input.get(key, default)
    if value is None:
        raise ToolInputError(f"missing required input {key!r}")
    if not isinstance(value, str):
        raise ToolInputError(f"input {key!r} must be a string, got {type(value).__name__}")
    if not allow_empty and not value:
        raise ToolInputError(f"input {key!r} must not be empty")
    return value


def _int(tool_input: dict[str, Any], key: str, default: int, minimum: int) -> int:
    value = tool_input.get(key)
    if value is None:
        return default
    # bool is an int in Python; "true" as a line number is a model mistake worth naming.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not value.is_integer()):
        raise ToolInputError(f"input {key!r} must be a whole number, got {value!r}")
    if value < minimum:
        raise ToolInputError(f"input {key!r} must be at least {minimum}, got {value}")
    return int(value)


def _bool(tool_input: dict[str, Any], key: str) -> bool:
    value = tool_input.get(key, False)
    if not isinstance(value, bool):
        raise ToolInputError(f"input {key!r} must be true or false, got {value!r}")
    return value


def _is_binary(path: Path) -> bool:
    with open(path, "rb") as fh:
        return b"\x00" in fh.read(BINARY_SNIFF_BYTES)


def _reads(ctx: ToolContext) -> dict[str, float]:
    """The mtime of each file as this agent last saw it (its Read, Write or Edit)."""
    return ctx.memory.setdefault("reads", {})


def _changed_since_seen(ctx: ToolContext, rel: str, mtime: float) -> bool:
    seen = _reads(ctx).get(rel)
    return seen is not None and seen != mtime


def _existing_file(ctx: ToolContext, raw: str) -> tuple[Path, str]:
    """A model-given path that must be an existing regular file."""
    path = ctx.path(raw)
    rel = relative(ctx.root, path)
    if path.is_dir():
        raise ToolInputError(f"{rel} is a directory, not a file; use LS to list it")
    if not path.exists():
        raise ToolInputError(
            f"file not found: {rel}; use LS or Glob to see which files exist (paths are relative to the scenario folder)"
        )
    return path, rel


def _writable(ctx: ToolContext, raw: str) -> tuple[Path, str]:
    """A model-given path the agent may write: not baton's own bookkeeping."""
    path = ctx.path(raw)
    rel = relative(ctx.root, path)
    if rel == "state" or rel.startswith("state/"):
        raise ToolInputError(
            f"{rel} is under state/, which holds the agents' logs and memory and is written by baton only; "
            "write your files elsewhere in the scenario folder (you may still Read state/)"
        )
    if rel == "run.json":
        raise ToolInputError("run.json records the run's phase and status and is written by baton only; it cannot be changed by a tool")
    if rel == ".":
        raise ToolInputError("give a file path, not the scenario folder itself")
    if path.is_dir():
        raise ToolInputError(f"{rel} is a directory; give a file path inside it")
    return path, rel


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… [+{len(text) - limit} chars]"


def _diff(old: str, new: str) -> str:
    """The first lines of a unified diff (no file headers: the path is in the result)."""
    if len(old) > MAX_DIFF_CHARS or len(new) > MAX_DIFF_CHARS:
        return f"(diff not computed: file over {MAX_DIFF_CHARS:,} characters; {_count_text_lines(old)} -> {_count_text_lines(new)} lines)"
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2))[2:]
    shown = [_clip(line, 500) for line in lines[:DIFF_LINES]]
    if len(lines) > DIFF_LINES:
        shown.append(f"... ({len(lines) - DIFF_LINES} more diff lines; Read the file to see the result)")
    return "\n".join(shown)


def _count_text_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _head(text: str, n: int) -> str:
    return "\n".join(_clip(line, 500) for line in islice(iter(text.splitlines()), n))


# ---------------------------------------------------------------------------
# Read
# ---------------------------------------------------------------------------


def _count_file_lines(path: Path) -> int:
    """Lines in a file without loading it: newlines, plus an unterminated last line."""
    count, last = 0, b"\n"
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (0 if last == b"\n" else 1)


def _skip_lines(fh: IO[bytes], n: int) -> None:
    """Position ``fh`` after its first ``n`` lines, scanning chunks rather than lines."""
    left = n
    while left > 0:
        start = fh.tell()
        chunk = fh.read(CHUNK_BYTES)
        if not chunk:
            return
        found = chunk.count(b"\n")
        if found < left:
            left -= found
            continue
        idx = -1
        for _ in range(left):
            idx = chunk.index(b"\n", idx + 1)
        fh.seek(start + idx + 1)
        return


def _file_lines(fh: IO[bytes]) -> Iterator[str]:
    """Lines of a binary file as text, each clipped to MAX_LINE_CHARS without reading
    a huge line into memory whole."""
    limit = MAX_LINE_CHARS * 4  # UTF-8: at most 4 bytes per character
    while True:
        raw = fh.readline(limit)
        if not raw:
            return
        cut = len(raw) == limit and not raw.endswith(b"\n")
        if cut:
            _skip_rest_of_line(fh)
        text = raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r")
        if cut or len(text) > MAX_LINE_CHARS:
            yield f"{text[:MAX_LINE_CHARS]}… [line clipped at {MAX_LINE_CHARS} characters]"
        else:
            yield text


def _skip_rest_of_line(fh: IO[bytes]) -> None:
    while (rest := fh.readline(CHUNK_BYTES)) and not rest.endswith(b"\n"):
        pass


@dataclass
class _Window:
    content: str
    end_line: int
    capped: bool


def _number(lines: Iterable[str], start: int, limit: int, cap: int) -> _Window:
    """Up to ``limit`` lines numbered from ``start``, stopping before ``cap`` characters."""
    out: list[str] = []
    size, end = 0, start - 1
    for text in islice(lines, limit):
        line = f"{end + 1:>6}\t{text}"
        if size + len(line) + 1 > cap:
            if not out:  # one line larger than the cap: show what fits of it
                out.append(line[:cap])
                end += 1
            return _Window("\n".join(out), end, True)
        out.append(line)
        size += len(line) + 1
        end += 1
    return _Window("\n".join(out), end, False)


def _render_archive(path: Path) -> list[str] | None:
    """An archived tool result (one line of JSON) as readable lines, or None if it is
    not an envelope. Multi-line strings (file contents, command output) become real
    lines again, so offset/limit work on them."""
    if path.stat().st_size > MAX_GREP_FILE_BYTES:
        return None
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    if not text.startswith("{"):
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict) or "status" not in body:
        return None
    lines: list[str] = []
    _render_value("", body, lines)
    return lines


def _render_value(key: str, value: Any, lines: list[str]) -> None:
    label = key or "result"
    if isinstance(value, dict):
        for k, v in value.items():
            _render_value(f"{key}.{k}" if key else str(k), v, lines)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        lines.append(f"{label}: {len(value)} items")
        lines.extend(f"  - {json.dumps(v, ensure_ascii=False)}" for v in value)
    elif isinstance(value, str) and "\n" in value:
        body = value.split("\n")
        lines.append(f"--- {label} ({len(body)} lines) ---")
        lines.extend(body)
        lines.append(f"--- end of {label} ---")
    else:
        lines.append(f"{label}: {json.dumps(value, ensure_ascii=False)}")


class ReadTool(_FileTool):
    name = "Read"
    description = (
        "Read a text file in the scenario folder. Returns its lines numbered from 1 "
        "(`     1\\tfirst line`), the line range shown, the file's total line count, its mtime, "
        "and `modified_externally` (true when the file changed since you last read or wrote it: "
        "re-read before editing). Reads up to 2000 lines by default; for long files pass `offset` "
        "(1-based first line) and `limit` (number of lines). Output is capped; the result says how "
        "to continue. Lines over 2000 characters are clipped. Binary files are refused. Archived "
        "full tool results (state/<agent>/tool_results/<id>.txt) are shown expanded into lines."
    )
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the scenario folder, e.g. design/scenario.md"},
            "offset": {"type": "integer", "minimum": 1, "description": "1-based line to start at (default 1)"},
            "limit": {"type": "integer", "minimum": 1, "description": f"Number of lines to read (default {DEFAULT_READ_LINES})"},
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path, rel = _existing_file(ctx, _string(tool_input, "path"))
        offset = _int(tool_input, "offset", 1, 1)
        limit = _int(tool_input, "limit", DEFAULT_READ_LINES, 1)
        mtime = path.stat().st_mtime
        external = _changed_since_seen(ctx, rel, mtime)
        rendered = _render_archive(path) if ARCHIVE.match(rel) else None
        if rendered is None and _is_binary(path):
            raise ToolInputError(
                f"{rel} is a binary file ({path.stat().st_size} bytes); Read shows text only "
                "(use Bash, if enabled, e.g. `file` or `xxd | head`, to inspect it)"
            )
        total = len(rendered) if rendered is not None else _count_file_lines(path)
        if total and offset > total:
            raise ToolInputError(f"offset {offset} is past the end of {rel}, which has {total} lines")
        if rendered is not None:
            lines = (_clip(x, MAX_LINE_CHARS) for x in rendered[offset - 1 :])
            window = _number(lines, offset, limit, ctx.output_cap_chars)
        else:
            window = self._window(path, offset, limit, ctx.output_cap_chars)
        _reads(ctx)[rel] = mtime
        data = {
            "path": rel,
            "start_line": offset,
            "end_line": window.end_line,
            "total_lines": total,
            "mtime": mtime,
            "modified_externally": external,
            "content": window.content,
        }
        if rendered is not None:
            data["rendered"] = "archived tool result: its JSON is shown expanded into lines (multi-line strings as real lines)"
        if note := self._note(offset, window, total, ctx.output_cap_chars):
            data["note"] = note
        return ok(data)

    @staticmethod
    def _window(path: Path, offset: int, limit: int, cap: int) -> _Window:
        with open(path, "rb") as fh:
            _skip_lines(fh, offset - 1)
            return _number(_file_lines(fh), offset, limit, cap)

    @staticmethod
    def _note(offset: int, window: _Window, total: int, cap: int) -> str:
        if total == 0:
            return "the file is empty"
        if window.capped:
            return (
                f"output capped at {cap} characters: showing lines {offset}-{window.end_line} of {total}; "
                f"Read again with offset={window.end_line + 1} (and a smaller limit) to continue"
            )
        if window.end_line < total:
            return f"showing lines {offset}-{window.end_line} of {total}; Read with offset={window.end_line + 1} to continue"
        return ""


# ---------------------------------------------------------------------------
# Write and Edit
# ---------------------------------------------------------------------------


def _old_text(path: Path) -> str | None:
    """The current text of a file about to be replaced (None if it is binary or not UTF-8)."""
    if _is_binary(path):
        return None
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None


class WriteTool(_FileTool):
    name = "Write"
    description = (
        "Create or overwrite a text file in the scenario folder with `content` (parent folders are "
        "created; the write is atomic). Returns whether the file was created, its size in bytes, and "
        "a diff when an existing file was replaced. Prefer Edit for changing part of an existing file. "
        "state/ (agent logs and memory) and run.json belong to baton and cannot be written."
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
        path, rel = _writable(ctx, _string(tool_input, "path"))
        content = _string(tool_input, "content", allow_empty=True)
        created = not path.exists()
        old = None if created else _old_text(path)
        external = not created and _changed_since_seen(ctx, rel, path.stat().st_mtime)
        raw = content.encode("utf-8", errors="replace")
        write_atomic(path, raw)
        _reads(ctx)[rel] = path.stat().st_mtime
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


class EditTool(_FileTool):
    name = "Edit"
    description = (
        "Replace an exact string in a text file: `old_string` must match the file character for "
        "character (whitespace and indentation included; copy it from Read output without the line "
        "number prefix). It must occur exactly once unless `replace_all` is true; add surrounding "
        "lines to make it unique. Returns the number of replacements and a diff. The write is atomic. "
        "state/ and run.json cannot be edited."
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
        path, rel = _writable(ctx, _string(tool_input, "path"))
        old_string = _string(tool_input, "old_string")
        new_string = _string(tool_input, "new_string", allow_empty=True)
        replace_all = _bool(tool_input, "replace_all")
        if old_string == new_string:
            raise ToolInputError("old_string and new_string are identical; nothing to change")
        path, rel = _existing_file(ctx, rel)
        text = _old_text(path)
        if text is None:
            raise ToolInputError(f"{rel} is binary or not UTF-8 text; Edit works on text files only")
        count = self._check_count(text, old_string, rel, replace_all)
        external = _changed_since_seen(ctx, rel, path.stat().st_mtime)
        new_text = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
        write_atomic(path, new_text.encode("utf-8", errors="replace"))
        _reads(ctx)[rel] = path.stat().st_mtime
        data = {"path": rel, "applied": True, "replacements": count, "diff": _diff(text, new_text)}
        if external:
            data["note"] = "the file had changed since you last read or wrote it; the edit was applied to its current content"
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


# ---------------------------------------------------------------------------
# LS, Glob, Grep
# ---------------------------------------------------------------------------


def _directory(ctx: ToolContext, raw: str) -> tuple[Path, str]:
    path = ctx.path(raw)
    rel = relative(ctx.root, path)
    if not path.exists():
        raise ToolInputError(f"directory not found: {rel}; use LS on its parent to see what exists")
    if not path.is_dir():
        raise ToolInputError(f"{rel} is a file, not a directory; use Read to read it")
    return path, rel


def _inside_root(ctx: ToolContext, path: Path) -> bool:
    """True if a symlink found while walking resolves inside the folder."""
    root = ctx.root.resolve()
    target = path.resolve()
    return target == root or root in target.parents


def _walk_files(ctx: ToolContext, base: Path) -> Iterator[Path]:
    """Regular files under ``base`` in sorted order; symlinked directories are not
    entered (no cycles, no escapes) and symlinked files only if they stay inside."""
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() and not (_inside_root(ctx, path) and path.is_file()):
                continue
            if path.is_file():
                yield path


class LSTool(_FileTool):
    name = "LS"
    description = (
        "List a directory of the scenario folder (default: its top level). Entries are sorted; "
        f"directories end with '/'. At most {MAX_ENTRIES} entries are shown; `total` is always the "
        "full count. Use Glob to find files by pattern across subfolders."
    )
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Directory relative to the scenario folder (default '.')"},
        },
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path, rel = _directory(ctx, _string(tool_input, "path", default="."))
        with os.scandir(path) as it:
            entries = sorted(e.name + ("/" if e.is_dir() else "") for e in it)
        data: dict[str, Any] = {"path": rel, "entries": entries[:MAX_ENTRIES], "total": len(entries)}
        if len(entries) > MAX_ENTRIES:
            data["note"] = f"showing the first {MAX_ENTRIES} of {len(entries)} entries; use Glob with a pattern to narrow down"
        return ok(data)


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


def _glob_regex(pattern: str) -> re.Pattern[str]:
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


def _check_glob(pattern: str) -> str:
    text = pattern.strip().replace("\\", "/")
    if text.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", text):
        raise ToolInputError(f"glob {pattern!r} is absolute; give a pattern relative to the scenario folder (or to `path`)")
    if ".." in text.split("/"):
        raise ToolInputError(f"glob {pattern!r} contains '..'; patterns must stay inside the scenario folder")
    while text.startswith("./"):
        text = text[2:]
    return text


class GlobTool(_FileTool):
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
            "path": {"type": "string", "description": "Directory to search in, relative to the scenario folder (default '.')"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern = _string(tool_input, "pattern")
        regex = _glob_regex(_check_glob(pattern))
        base, _ = _directory(ctx, _string(tool_input, "path", default="."))
        matches = [
            relative(ctx.root, p) for p in _walk_files(ctx, base) if regex.match(p.relative_to(base).as_posix())
        ]
        matches.sort()
        data: dict[str, Any] = {"pattern": pattern, "matches": matches[:MAX_ENTRIES], "total": len(matches)}
        if len(matches) > MAX_ENTRIES:
            data["note"] = f"showing the first {MAX_ENTRIES} of {len(matches)} files; narrow the pattern or the path"
        elif not matches:
            data["note"] = "no files match; patterns are relative to `path`, and `*` does not cross '/' (use `**/`)"
        return ok(data)


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


class GrepTool(_FileTool):
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
            "path": {"type": "string", "description": "File or directory to search, relative to the scenario folder (default '.')"},
            "glob": {"type": "string", "description": "Only search files matching this glob, e.g. '*.py'"},
            "case_insensitive": {"type": "boolean", "description": "Ignore case (default false)"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern = _string(tool_input, "pattern")
        flags = re.IGNORECASE if _bool(tool_input, "case_insensitive") else 0
        try:
            regex = re.compile(pattern, flags)
        except re.error as exc:
            raise ToolInputError(f"invalid regular expression {pattern!r}: {exc} (Python `re` syntax; escape literal characters like '(' or '.')") from None
        files = self._files(tool_input, ctx)
        state = _GrepState(regex)
        for path in files:
            self._search(path, relative(ctx.root, path), state)
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
            data["note"] = f"showing the first {MAX_GREP_MATCHES} of {state.total} matches; narrow the pattern, path or glob"
        return ok(data)

    @staticmethod
    def _files(tool_input: dict[str, Any], ctx: ToolContext) -> list[Path]:
        target = ctx.path(_string(tool_input, "path", default="."))
        if not target.exists():
            raise ToolInputError(f"path not found: {relative(ctx.root, target)}; use LS or Glob to see what exists")
        if target.is_file():
            return [target]
        if tool_input.get("glob") is None:
            return list(_walk_files(ctx, target))
        glob = _check_glob(_string(tool_input, "glob"))
        regex = _glob_regex(glob)
        by_path = "/" in glob.strip("/")
        return [p for p in _walk_files(ctx, target) if regex.match(p.relative_to(target).as_posix() if by_path else p.name)]

    @staticmethod
    def _search(path: Path, rel: str, state: _GrepState) -> None:
        if path.stat().st_size > MAX_GREP_FILE_BYTES:
            state.skip(rel, "over 20 MB; use Read with offset/limit")
            return
        if _is_binary(path):
            state.skip(rel, "binary")
            return
        found = False
        with open(path, "rb") as fh:
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


# ---------------------------------------------------------------------------
# Bash
# ---------------------------------------------------------------------------


class _Capture:
    """A stream's first and last bytes, whatever its length: memory stays bounded."""

    def __init__(self, cap_chars: int) -> None:
        self.cap = cap_chars
        self.head_max = cap_chars // 2
        self.tail_max = cap_chars - self.head_max
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_max:
                del self.tail[: len(self.tail) - self.tail_max]

    def text(self) -> str:
        omitted = self.total - len(self.head) - len(self.tail)
        if omitted <= 0:
            return bytes(self.head + self.tail).decode("utf-8", errors="replace")
        return (
            _utf8_head(bytes(self.head))
            + f"\n[... {omitted} of {self.total} bytes omitted: output is capped at {self.cap} characters "
            "(first and last half kept); redirect it to a file and use Read or Grep to see all of it ...]\n"
            + _utf8_tail(bytes(self.tail))
        )


def _utf8_head(raw: bytes) -> str:
    """Decode bytes cut at an arbitrary point, without a '\ufffd' for the cut character."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte < 0x80:
            break
        if byte >= 0xC0:  # lead byte: drop it if its sequence is incomplete
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            if needed > back:
                raw = raw[:-back]
            break
    return raw.decode("utf-8", errors="replace")


def _utf8_tail(raw: bytes) -> str:
    """Decode bytes that start at an arbitrary point (skipping a cut character's rest)."""
    start = 0
    while start < min(3, len(raw)) and 0x80 <= raw[start] < 0xC0:
        start += 1
    return raw[start:].decode("utf-8", errors="replace")


def _clean_env() -> dict[str, str]:
    """The worker's environment without the API key, the broker URLs (they carry the
    Redis password) or anything named like a secret."""
    hidden = {"ANTHROPIC_API_KEY", "BATON_BROKER_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}
    return {k: v for k, v in os.environ.items() if k not in hidden and not is_secret_name(k)}


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _collect(proc: subprocess.Popen[bytes], out: _Capture, err: _Capture, deadline: float) -> tuple[bool, bool]:
    """Read both pipes until they close, the time limit passes, or the command has
    exited and background processes keep the pipes open. Returns (timed_out, lingering)."""
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    exited_at: float | None = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return True, False
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > EXIT_GRACE_S:
                return False, True
            for key, _ in sel.select(timeout=min(0.1, deadline - now)):
                chunk = os.read(key.fd, PIPE_READ_BYTES)
                if chunk:
                    key.data.add(chunk)
                else:
                    sel.unregister(key.fileobj)
        return False, False
    finally:
        sel.close()


class BashTool(_FileTool):
    name = "Bash"
    description = (
        "Run a bash command in the scenario folder (the working directory) and get its exit code, "
        "stdout and stderr. A non-zero exit code is reported, not treated as a tool failure. The "
        "command has a time limit (`timeout_s`, capped by the agent's configured limit); on timeout "
        "the command and everything it started are killed. Each output stream is capped (its first "
        "and last part are kept): redirect big output to a file and Read or Grep it. There is no "
        "stdin; background processes still holding the output when the command exits are killed. "
        "Secrets are not in the environment. Use Read/Write/Edit/Glob/Grep for file work; Bash is for running things."
    )
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The bash command line to run"},
            "timeout_s": {"type": "number", "exclusiveMinimum": 0, "description": "Time limit in seconds (default and maximum: the configured limit)"},
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not ctx.bash_enabled:
            role = ctx.agent
            return error(
                f"Bash is disabled for the {role} agent. A human can enable it by setting "
                f"`bash_enabled = true` under `[agents.{role}]` in scenario.toml, or the environment "
                f"variable BATON_{role.upper()}_BASH_ENABLED=1, and resuming the run. Meanwhile use "
                "Read, Write, Edit, LS, Glob and Grep."
            )
        command = _string(tool_input, "command")
        limit = self._limit(tool_input, ctx)
        started = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=ctx.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_clean_env(),
            start_new_session=True,  # its own process group, so a timeout can kill all of it
        )
        out, err = _Capture(ctx.output_cap_chars), _Capture(ctx.output_cap_chars)
        timed_out = lingering = True  # if collecting fails, clean up as after a timeout
        try:
            timed_out, lingering = _collect(proc, out, err, started + limit)
        finally:
            # Kill only when members are known to be left: after a clean finish the
            # group is usually empty and its id could already belong to someone else.
            if timed_out or lingering:
                _kill_group(proc)
            proc.wait()
            proc.stdout.close()  # type: ignore[union-attr]
            proc.stderr.close()  # type: ignore[union-attr]
        return ok(self._data(command, proc, out, err, timed_out, lingering, limit, time.monotonic() - started))

    @staticmethod
    def _limit(tool_input: dict[str, Any], ctx: ToolContext) -> float:
        value = tool_input.get("timeout_s")
        if value is None:
            return ctx.bash_timeout_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ToolInputError(f"timeout_s must be a positive number of seconds, got {value!r}")
        return min(float(value), ctx.bash_timeout_s)

    @staticmethod
    def _data(
        command: str, proc: subprocess.Popen[bytes], out: _Capture, err: _Capture,
        timed_out: bool, lingering: bool, limit: float, elapsed: float,
    ) -> dict[str, Any]:
        data: dict[str, Any] = {
            "command": command,
            "exit_code": None if timed_out else proc.returncode,
            "stdout": out.text(),
            "stderr": err.text(),
            "timed_out": timed_out,
            "duration_s": round(elapsed, 2),
        }
        if timed_out:
            data["note"] = (
                f"timed out after {limit:g} s; the command and its child processes were killed. "
                "Run something shorter, or pass a larger timeout_s (up to the configured limit)"
            )
        elif lingering:
            data["note"] = "background processes still holding the output were killed when the command exited"
        return data


# ---------------------------------------------------------------------------
# TodoWrite
# ---------------------------------------------------------------------------

TODO_STATUSES = ("pending", "in_progress", "completed")


class TodoWriteTool(_FileTool):
    name = "TodoWrite"
    description = (
        "Replace your todo list with `todos` (the whole list each time). Use it to plan multi-step "
        "work and track progress: mark an item in_progress when you start it and completed as soon "
        "as it is done. The list is kept in your memory across steps and compactions."
    )
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "description": "What to do"},
                        "status": {"type": "string", "enum": list(TODO_STATUSES)},
                    },
                    "required": ["content", "status"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["todos"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        todos = tool_input.get("todos")
        if not isinstance(todos, list):
            raise ToolInputError("input 'todos' must be a list of {content, status} objects")
        items = [self._item(i, t) for i, t in enumerate(todos, start=1)]
        ctx.memory["todos"] = items
        return ok({"todos": items})

    @staticmethod
    def _item(index: int, todo: Any) -> dict[str, str]:
        if not isinstance(todo, dict):
            raise ToolInputError(f"todo #{index} must be an object with 'content' and 'status'")
        content, status = todo.get("content"), todo.get("status", "pending")
        if not isinstance(content, str) or not content.strip():
            raise ToolInputError(f"todo #{index} needs a non-empty 'content' string")
        if status not in TODO_STATUSES:
            raise ToolInputError(f"todo #{index} has status {status!r}; use one of {', '.join(TODO_STATUSES)}")
        return {"content": content.strip(), "status": status}


FILE_TOOLS: list[_FileTool] = [
    ReadTool(),
    WriteTool(),
    EditTool(),
    LSTool(),
    GlobTool(),
    GrepTool(),
    BashTool(),
    TodoWriteTool(),
]

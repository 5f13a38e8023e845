"""``Read``: a text file's lines, numbered, in windows.

Files can be large (a 50 MB log, a minified bundle): lines are streamed and
clipped rather than loaded whole. Archived tool results are shown expanded into
lines, so offset/limit work on the command output or file content inside them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import IO, Any, ClassVar

from agents.tools.base import (
    TOOL_CLIP_MARKER,
    FileTool,
    ToolContext,
    ToolInputError,
    ToolResult,
    int_input,
    ok,
    string_input,
)
from agents.tools.paths import changed_since_seen, is_binary, opened, seen_mtimes
from context.text import clip

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000  # longer lines are clipped; Grep or Bash can show the rest
CHUNK_BYTES = 1 << 20
MAX_ARCHIVE_BYTES = 20 * 1024 * 1024  # a larger archived result is shown as its raw line

ARCHIVE = re.compile(r"^state/[^/]+/tool_results/[^/]+\.txt$")


def _count_file_lines(fh: IO[bytes]) -> int:
    """Lines in an open file without loading it: newlines, plus an unterminated last line."""
    count, last = 0, b"\n"
    fh.seek(0)
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


def _render_archive(fh: IO[bytes], size: int) -> list[str] | None:
    """An archived tool result (one line of JSON) as readable lines, or None if it is
    not an envelope. Multi-line strings (file contents, command output) become real
    lines again, so offset/limit work on them."""
    if size > MAX_ARCHIVE_BYTES:
        return None
    fh.seek(0)
    text = fh.read().decode("utf-8", errors="replace").strip()
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


class ReadTool(FileTool):
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
            "path": {
                "type": "string",
                "description": "File path relative to the scenario folder, e.g. design/scenario.md",
            },
            "offset": {"type": "integer", "minimum": 1, "description": "1-based line to start at (default 1)"},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": f"Number of lines to read (default {DEFAULT_READ_LINES})",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        offset = int_input(tool_input, "offset", 1, 1)
        limit = int_input(tool_input, "limit", DEFAULT_READ_LINES, 1)
        # One descriptor, opened without following any symlink, answers every question below.
        with opened(ctx, string_input(tool_input, "path")) as (fh, rel, st):
            mtime = st.st_mtime
            rendered, window, total = self._read(fh, rel, st.st_size, offset, limit, ctx.settings.output_cap_chars)
        external = changed_since_seen(ctx, rel, mtime)
        seen_mtimes(ctx)[rel] = mtime
        data = {
            "path": rel,
            "start_line": offset,
            "end_line": window.end_line,
            "total_lines": total,
            "mtime": shown_mtime(mtime),
            "modified_externally": external,
            "content": window.content,
        }
        if rendered is not None:
            data["rendered"] = (
                "archived tool result: its JSON is shown expanded into lines (multi-line strings as real lines)"
            )
        if note := self._note(offset, window, total, ctx.settings.output_cap_chars):
            data["note"] = note
        return ok(data)

    @staticmethod
    def _read(fh: IO[bytes], rel: str, size: int, offset: int, limit: int,
              cap: int) -> tuple[list[str] | None, _Window, int]:
        """The archive's rendered lines (None for any other file), the window shown, the total line count."""
        rendered = _render_archive(fh, size) if ARCHIVE.match(rel) else None
        if rendered is None and is_binary(fh):
            raise ToolInputError(
                f"{rel} is a binary file ({size} bytes); Read shows text only "
                "(use Bash, if enabled, e.g. `file` or `xxd | head`, to inspect it)"
            )
        total = len(rendered) if rendered is not None else _count_file_lines(fh)
        if total and offset > total:
            raise ToolInputError(f"offset {offset} is past the end of {rel}, which has {total} lines")
        if rendered is not None:
            lines = (clip(x, MAX_LINE_CHARS, TOOL_CLIP_MARKER) for x in rendered[offset - 1 :])
            return rendered, _number(lines, offset, limit, cap), total
        fh.seek(0)
        _skip_lines(fh, offset - 1)
        return None, _number(_file_lines(fh), offset, limit, cap), total

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
            return (
                f"showing lines {offset}-{window.end_line} of {total}; "
                f"Read with offset={window.end_line + 1} to continue"
            )
        return ""


def shown_mtime(mtime: float) -> str:
    """The mtime as the model sees it: UTC, to the millisecond, always as wide. A float's repr drops
    trailing zeros, so two runs reading the same file could see texts one token apart, and a
    compaction decided at the threshold would then fall one step apart (bench/chaos.py found it).
    The full value stays in the agent's memory for ``modified_externally``."""
    return datetime.fromtimestamp(mtime, UTC).isoformat(timespec="milliseconds")

"""Compressed forms of plain-text results in recorded logs of other agents.

Claude Code, mini-swe-agent and tau-bench answer in text, not in baton's
envelopes; these forms parse it best-effort. A form returns None when the text
is not what it expects, and the caller falls back to the generic head + tail.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from context.form_parts import (
    ERROR_CHARS,
    HEADER_CHARS,
    bash_form,
    clip_line,
    diff_form,
    first_lines,
    list_form,
    shorten,
    todo_recap,
)
from context.text import between, head_lines, iter_lines, tail_lines

# (tool input, result text, is_error, read_lines) -> the form, or None
LogForm = Callable[[dict[str, Any], str, bool, int], str | None]

# Claude Code's Read: "     1→text" (older versions: a tab instead of the arrow).
_NUMBERED = re.compile(r"^\s*(\d+)(?:→|\t)")
_EXIT_CODE = re.compile(r"\AExit code (-?\d+)\n?")
_GREP_FILE_LINE = re.compile(r"^(.+?):(\d+):(.*)$")
_GREP_LINE = re.compile(r"^(\d+):(.*)$")
_FOUND = re.compile(r"^Found (\d+) (?:files?|match(?:es)?)", re.I)
_SNIPPET = "Here's the result of running `cat -n` on a snippet of the edited file:"


def _input_path(tool_input: dict[str, Any]) -> str:
    for key in ("file_path", "path", "notebook_path"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return clip_line(value, HEADER_CHARS)
    return "?"


def _read(tool_input: dict[str, Any], text: str, is_error: bool, read_lines: int) -> str | None:
    if is_error:
        return None
    first = next((m for m in map(_NUMBERED.match, head_lines(text, 5)) if m), None)
    if first is None:
        return None  # not a numbered listing (empty file, error, image): generic form
    last = None
    for line in reversed(tail_lines(text, 50)):
        if m := _NUMBERED.match(line):
            last = m
            break
    start, end = int(first.group(1)), int(last.group(1)) if last else int(first.group(1))
    out = [f"Read {_input_path(tool_input)}: lines {start}-{end}"]
    shown = first_lines(text, read_lines)
    out.append(f"first {len(shown)} lines:")
    out.extend(shown)
    return "\n".join(out)


def _bash(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
    command = tool_input.get("command")
    command = command if isinstance(command, str) else json.dumps(tool_input, ensure_ascii=False, sort_keys=True)
    mini = _mini_swe(text)
    if mini is not None:
        code, output, note = mini
        return bash_form(command, f"exit code: {code}{note}", output, "output", "")
    if m := _EXIT_CODE.match(text):  # Claude Code prefixes failures with "Exit code N"
        return bash_form(command, f"exit code: {m.group(1)}", text[m.end() :], "output", "")
    status = "exit code: not reported" + (" (error result)" if is_error else " (ok)")
    return bash_form(command, status, text, "output", "")


def _mini_swe(text: str) -> tuple[str, str, str] | None:
    """(exit code, output, note) of a mini-swe-agent observation, or None."""
    head = text[:300].lstrip()
    if head.startswith("The last command <command>") and " timed out" in head:
        return "timed out", (between(text, "<output>", "</output>") or "").lstrip(" \n"), ""
    m = re.match(r"<returncode>\s*(-?\d+)\s*</returncode>", head)
    if m is None:
        return None
    output = between(text, "<output>", "</output>")
    if output is not None:
        return m.group(1), output.removeprefix("\n"), ""
    out_head = between(text, "<output_head>", "</output_head>") or ""
    out_tail = between(text, "<output_tail>", "</output_tail>") or ""
    elided = re.search(r"<elided_chars>\s*(\d+)", text)
    note = f" (the harness already elided {elided.group(1)} chars mid-output)" if elided else ""
    return m.group(1), out_head.strip("\n") + "\n" + out_tail.strip("\n"), note


def _listing(kind: str) -> LogForm:
    def form(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
        if is_error:
            return None
        key = "pattern" if kind == "Glob" else "path"
        subject = tool_input.get(key) or tool_input.get("path") or "?"
        entries, total = _entries(text)
        return list_form(kind, clip_line(str(subject), HEADER_CHARS), total, entries[:10], "entries")

    return form


def _entries(text: str) -> tuple[list[str], int]:
    """Non-empty lines (a "Found N files" header gives the total), lazily for huge lists."""
    total, first, declared = 0, [], None
    for line in iter_lines(text):
        if not line.strip():
            continue
        if declared is None and total == 0 and (m := _FOUND.match(line)):
            declared = int(m.group(1))
            continue
        total += 1
        if len(first) < 10:
            first.append(clip_line(line))
    return first, declared if declared is not None else total


def _grep(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
    if is_error:
        return None
    pattern = clip_line(str(tool_input.get("pattern", "?")), HEADER_CHARS)
    single_file = _input_path(tool_input)
    total, first = 0, []
    for line in iter_lines(text):
        # "file:line:text" (several files) or "line:text" (one file); context lines use "-".
        if m := _GREP_LINE.match(line):
            file, num, rest = single_file, m.group(1), m.group(2)
        elif m := _GREP_FILE_LINE.match(line):
            file, num, rest = m.group(1), m.group(2), m.group(3)
        else:
            continue
        total += 1
        if len(first) < 5:
            first.append(clip_line(f"{file}:{num}: {rest.strip()}"))
    if total == 0:  # files_with_matches / count mode: a list of paths
        first, total = _entries(text)
        first = first[:5]
    return list_form("Grep", pattern, total, first, "matches")


def _edit(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
    path = _input_path(tool_input)
    if is_error or text.lstrip().startswith("<tool_use_error>"):
        return f"Edit {path}: NOT applied\nerror: {shorten(text.strip(), ERROR_CHARS)}"
    edits = tool_input.get("edits")
    if isinstance(edits, list):
        replacements = f"{len(edits)} edit(s)"
    else:
        replacements = "all occurrences" if tool_input.get("replace_all") else "1 replacement"
    snippet = text.split(_SNIPPET, 1)[1] if _SNIPPET in text else ""
    return diff_form(f"Edit {path}: applied, {replacements}", snippet, "edited snippet")


def _write(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
    path = _input_path(tool_input)
    if is_error or text.lstrip().startswith("<tool_use_error>"):
        return f"Write {path}: NOT written\nerror: {shorten(text.strip(), ERROR_CHARS)}"
    content = tool_input.get("content")
    size = f", {len(content.encode('utf-8', 'replace'))} bytes" if isinstance(content, str) else ""
    if text.lstrip().startswith("File created"):
        body = content if isinstance(content, str) else ""
        return diff_form(f"Write {path}: created{size}", body, "content", limit=20)
    snippet = text.split(_SNIPPET, 1)[1] if _SNIPPET in text else ""
    return diff_form(f"Write {path}: updated{size}", snippet, "written snippet")


def _todo(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
    todos = tool_input.get("todos")
    if is_error or not isinstance(todos, list):
        return None
    items = [(str(t.get("content", "")), str(t.get("status", "pending"))) for t in todos if isinstance(t, dict)]
    return todo_recap(items)


#: Lower-cased tool name -> its form for plain-text results.
LOG_FORMS: dict[str, LogForm] = {
    "read": _read,
    "bash": _bash,
    "ls": _listing("LS"),
    "glob": _listing("Glob"),
    "grep": _grep,
    "edit": _edit,
    "multiedit": _edit,
    "write": _write,
    "todowrite": _todo,
}

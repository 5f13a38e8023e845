"""Compressed forms of older tool results (SPEC §3, layers 4 and 5).

A tool result that has left the verbatim window is replaced by a short text
that keeps the facts an agent acts on (paths, ids, counts, exit codes, the
first entries) and ends with a reference to the full result archived on disk.
The forms are pure functions of their inputs: they sit inside the prompt-cache
prefix, so the same result must always compress to byte-identical text.

Two shapes of result are understood:

* baton's own tools answer with a JSON envelope ``{"status", "data", "error"}``
  whose ``data`` follows the models below (the contract with ``agents``);
* recorded logs of other agents carry plain text (Claude Code, mini-swe-agent,
  tau-bench), parsed best-effort.

Nothing here raises on odd input: whatever cannot be parsed falls back to the
generic head + tail form.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from itertools import islice
from typing import Any, Callable, Iterator, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from context.messages import ImageBlock, ToolResultBlock, ToolUseBlock

# Defaults of SPEC §3/§5: results over 5,000 characters keep 1,000 + 1,000.
CAP_CHARS = 5000
HEAD_CHARS = 1000
TAIL_CHARS = 1000
# Single lines can be megabytes (minified files, one-line JSON): every line
# quoted in a compressed form is clipped so the form stays small.
LINE_CHARS = 200
# Lines of an older command's output kept at each end: the start says what ran,
# the end says how it finished (test summaries, errors); the archive has the rest.
SUMMARY_LINES = 5
# Identifiers echoed from the tool input (a heredoc command can be huge; the
# full input is still in the assistant's tool_use block).
HEADER_CHARS = 300
# Error messages are kept nearly whole: they are what the agent reacts to.
ERROR_CHARS = 1500

FOOTER_PREFIX = "[full result archived: "


# --------------------------------------------------------------------------
# Contract of baton's own tools: {"status": "ok"|"error", "data": {...}, "error": str|null}
# --------------------------------------------------------------------------


class _Model(BaseModel):
    # Extra keys are tolerated so the tools can grow without breaking compression.
    model_config = ConfigDict(extra="ignore")


class ToolEnvelope(_Model):
    status: Literal["ok", "error"]
    data: Any = None
    error: str | None = None


class ReadData(_Model):
    path: str
    start_line: int = 1
    end_line: int = 0
    total_lines: int = 0
    mtime: float | str | None = None
    modified_externally: bool = False
    content: str = ""


class BashData(_Model):
    command: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False


class LSData(_Model):
    path: str
    entries: list[str] = []
    total: int | None = None


class GlobData(_Model):
    pattern: str
    matches: list[str] = []
    total: int | None = None


class GrepMatch(_Model):
    file: str
    line: int | None = None
    text: str = ""


class GrepData(_Model):
    pattern: str
    matches: list[GrepMatch] = []
    total: int | None = None


class EditData(_Model):
    """Edit and MultiEdit."""

    path: str
    applied: bool = True
    replacements: int = 0
    diff: str = ""


class WriteData(_Model):
    path: str
    created: bool = False
    size: int = 0
    diff: str = ""
    content_head: str = ""


class TodoItem(_Model):
    content: str
    status: str = "pending"  # pending | in_progress | completed


class TodoWriteData(_Model):
    todos: list[TodoItem] = []


class EvaluationFailure(_Model):
    sample: str
    layer: str | None = None
    reason: str = ""


class EvaluationData(_Model):
    """RunEvaluation: the totals and where the full report is."""

    iteration: int | None = None
    total: int = 0
    passed: int = 0
    success_rate: float = 0.0
    failures_per_layer: dict[str, int] = {}
    failures: list[EvaluationFailure] = []
    report_path: str = ""


# Lower-cased tool name -> model of its `data`.
DATA_MODELS: dict[str, type[_Model]] = {
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


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def archive_ref(agent: str, tool_use_id: str) -> str:
    """Where the full result of a tool call is archived (relative to the scenario folder)."""
    # Both parts become path components: nothing may escape the folder.
    agent_part = _UNSAFE.sub("_", agent or "") or "_"
    id_part = _UNSAFE.sub("_", tool_use_id or "") or "_"
    return f"state/{agent_part}/tool_results/{id_part}.txt"


def footer(ref: str) -> str:
    return f"{FOOTER_PREFIX}{ref} — Read it to see everything]"


def is_compressed(result: ToolResultBlock) -> bool:
    """True if the result already is a compressed form (compressing again would be a no-op)."""
    end = result.text[-2000:].rstrip()  # the footer is short: no need to copy a huge result
    return end[end.rfind("\n") + 1 :].startswith(FOOTER_PREFIX)


def compress_result(
    tool: ToolUseBlock | None,
    result: ToolResultBlock,
    ref: str,
    *,
    read_lines: int = 20,
    cap_chars: int = CAP_CHARS,
    head: int = HEAD_CHARS,
    tail: int = TAIL_CHARS,
) -> ToolResultBlock:
    """The compressed form of an older tool result, or `result` itself if that is not smaller."""
    if is_compressed(result):
        return result
    text = result.text
    images = _image_count(result)
    name = (tool.name if tool else "").strip().lower()
    tool_input = tool.input if tool else {}
    try:
        body = _compress_body(name, tool_input, text, result.is_error, read_lines, cap_chars, head, tail)
    except Exception:  # a parser bug must never break context assembly
        body = None
    if body is None:
        body = _head_tail(text, head, tail) if len(text) > cap_chars else (text if images else None)
    if body is None:
        return result
    if images:
        body = f"{body.rstrip()}\n[{images} image(s) omitted]"
    new_text = f"{body.rstrip()}\n{footer(ref)}"
    # A tiny result "compressed" into something as long only churns the cache;
    # images are always worth dropping (~1,600 tokens each).
    if not images and len(new_text) >= len(text):
        return result
    return ToolResultBlock(tool_use_id=result.tool_use_id, content=new_text, is_error=result.is_error)


def cap_result(
    result: ToolResultBlock,
    ref: str,
    *,
    cap_chars: int = CAP_CHARS,
    head: int = HEAD_CHARS,
    tail: int = TAIL_CHARS,
) -> ToolResultBlock:
    """A verbatim result over `cap_chars` cut to first `head` + last `tail` characters."""
    text = result.text
    if len(text) <= cap_chars or head + tail >= len(text):
        return result
    images = _image_count(result)
    dropped = f"; {images} image(s) dropped" if images else ""
    cut_end = len(text) - tail
    marker = (
        f"\n[... {cut_end - head} characters ({text.count(chr(10), head, cut_end)} line breaks) omitted{dropped}"
        f" — full result archived: {ref} — Read it to see everything ...]\n"
    )
    new_text = text[:head] + marker + (text[len(text) - tail :] if tail > 0 else "")
    return ToolResultBlock(tool_use_id=result.tool_use_id, content=new_text, is_error=result.is_error)


def compress_call(tool_use: ToolUseBlock, *, cap_chars: int = 240, head: int = 120) -> ToolUseBlock:
    """An older tool call with bulky string inputs (a Write's content, an Edit's
    strings, a heredoc) cut to their first `head` characters.

    The call keeps its id, name and every short argument (paths, patterns), so
    the agent still sees what it did; the full call stays in the agent's log,
    and what a Write or Edit produced is in the file itself.
    """

    def cut(value: Any) -> Any:
        if isinstance(value, str) and len(value) > cap_chars:
            return value[:head] + f"\n[... {len(value) - head} more characters of this input not shown; the full call is in the agent log]"
        if isinstance(value, list):
            return [cut(v) for v in value]
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        return value

    new_input = cut(tool_use.input)
    if new_input == tool_use.input:
        return tool_use
    return ToolUseBlock(id=tool_use.id, name=tool_use.name, input=new_input)


# --------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------


def _compress_body(
    name: str, tool_input: dict[str, Any], text: str, is_error: bool,
    read_lines: int, cap_chars: int, head: int, tail: int,
) -> str | None:
    """The compressed text without footer, or None when no specific form applies."""
    envelope = _parse_envelope(text)
    if envelope is not None:
        return _from_envelope(name, envelope, read_lines, cap_chars, head, tail)
    handler = _TEXT_FORMS.get(name)
    return handler(tool_input, text, is_error, read_lines) if handler else None


def _parse_envelope(text: str) -> ToolEnvelope | None:
    stripped = text.strip()
    # Cheap pre-checks before parsing what may be megabytes of non-JSON.
    if not stripped.startswith("{") or not stripped.endswith("}"):
        return None
    if '"status"' not in stripped[:100_000] and '"status"' not in stripped[-100_000:]:
        return None
    try:
        parsed = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    # tau-bench reservations have a "status" too; an envelope also has data or error.
    if not isinstance(parsed, dict) or not ({"data", "error"} & parsed.keys()):
        return None
    try:
        return ToolEnvelope.model_validate(parsed)
    except ValidationError:
        return None


def _from_envelope(name: str, env: ToolEnvelope, read_lines: int, cap_chars: int, head: int, tail: int) -> str:
    model = DATA_MODELS.get(name)
    if env.status == "ok" and model is not None and isinstance(env.data, dict):
        try:
            data = model.model_validate(env.data)
        except ValidationError:
            data = None
        if data is not None:
            return _JSON_FORMS[name](data, read_lines)
    # "other" form: the three fields, data cut to head + tail when large.
    lines = [f"status: {env.status}"]
    if env.error:
        lines.append(f"error: {_cut(env.error, ERROR_CHARS)}")
    if env.data is not None:
        data_text = json.dumps(env.data, ensure_ascii=False, separators=(",", ":"), default=str)
        lines.append("data: " + (_head_tail(data_text, head, tail) if len(data_text) > cap_chars else data_text))
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Forms for baton's JSON results
# --------------------------------------------------------------------------


def _json_read(d: ReadData, read_lines: int) -> str:
    out = [
        f"Read {_clip(d.path, HEADER_CHARS)}: lines {d.start_line}-{d.end_line} of {d.total_lines}",
        f"mtime: {d.mtime}, modified_externally: {str(d.modified_externally).lower()}",
    ]
    shown = _head_lines(d.content, read_lines)
    if shown:
        out.append(f"first {len(shown)} lines:")
        out.extend(shown)
    return "\n".join(out)


def _json_bash(d: BashData, _: int) -> str:
    status = f"exit code: {d.exit_code}" + (" (timed out)" if d.timed_out else "")
    return _bash_form(d.command, status, d.stdout, "stdout", d.stderr)


def _json_ls(d: LSData, _: int) -> str:
    return _list_form("LS", d.path, d.total if d.total is not None else len(d.entries), d.entries[:10], "entries")


def _json_glob(d: GlobData, _: int) -> str:
    return _list_form("Glob", d.pattern, d.total if d.total is not None else len(d.matches), d.matches[:10], "files")


def _json_grep(d: GrepData, _: int) -> str:
    total = d.total if d.total is not None else len(d.matches)
    first = [f"{m.file}:{m.line}: {m.text.strip()}" if m.line is not None else m.file for m in d.matches[:5]]
    return _list_form("Grep", d.pattern, total, first, "matches")


def _json_edit(d: EditData, _: int) -> str:
    state = "applied" if d.applied else "NOT applied"
    return _diff_form(f"Edit {_clip(d.path, HEADER_CHARS)}: {state}, {d.replacements} replacement(s)", d.diff, "diff")


def _json_write(d: WriteData, _: int) -> str:
    header = f"Write {_clip(d.path, HEADER_CHARS)}: {'created' if d.created else 'updated'}, {d.size} bytes"
    if d.created:
        return _diff_form(header, d.content_head or d.diff, "content", limit=20)
    return _diff_form(header, d.diff, "diff")


def _json_todo(d: TodoWriteData, _: int) -> str:
    return _todo_recap([(t.content, t.status) for t in d.todos])


def _json_evaluation(d: EvaluationData, _: int) -> str:
    layers = ", ".join(f"{k}={v}" for k, v in sorted(d.failures_per_layer.items()))
    out = [f"RunEvaluation iteration {d.iteration}: {d.passed}/{d.total} passed (success rate {d.success_rate})",
           f"failures per layer: {layers or 'none'}; report: {d.report_path}"]
    out += [f"- {f.sample} [{f.layer}]: {_clip(f.reason, LINE_CHARS)}" for f in d.failures[:5]]
    if len(d.failures) > 5:
        out.append(f"... {len(d.failures) - 5} more failures in the report")
    return "\n".join(out)


_JSON_FORMS: dict[str, Callable[[Any, int], str]] = {
    "read": _json_read,
    "bash": _json_bash,
    "ls": _json_ls,
    "glob": _json_glob,
    "grep": _json_grep,
    "edit": _json_edit,
    "multiedit": _json_edit,
    "write": _json_write,
    "todowrite": _json_todo,
    "runevaluation": _json_evaluation,
}


# --------------------------------------------------------------------------
# Forms for plain-text results of recorded agents
# --------------------------------------------------------------------------

# Claude Code's Read: "     1→text" (older versions: a tab instead of the arrow).
_NUMBERED = re.compile(r"^\s*(\d+)(?:→|\t)")
_EXIT_CODE = re.compile(r"\AExit code (-?\d+)\n?")
_GREP_FILE_LINE = re.compile(r"^(.+?):(\d+):(.*)$")
_GREP_LINE = re.compile(r"^(\d+):(.*)$")
_FOUND = re.compile(r"^Found (\d+) (?:files?|match(?:es)?)", re.I)


def _input_path(tool_input: dict[str, Any]) -> str:
    for key in ("file_path", "path", "notebook_path"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return _clip(value, HEADER_CHARS)
    return "?"


def _text_read(tool_input: dict[str, Any], text: str, is_error: bool, read_lines: int) -> str | None:
    if is_error:
        return None
    first = next((m for m in map(_NUMBERED.match, _head_lines(text, 5, clip=False)) if m), None)
    if first is None:
        return None  # not a numbered listing (empty file, error, image): generic form
    last = None
    for line in reversed(_tail_lines(text, 50, clip=False)):
        if m := _NUMBERED.match(line):
            last = m
            break
    start, end = int(first.group(1)), int(last.group(1)) if last else int(first.group(1))
    out = [f"Read {_input_path(tool_input)}: lines {start}-{end}"]
    shown = _head_lines(text, read_lines)
    out.append(f"first {len(shown)} lines:")
    out.extend(shown)
    return "\n".join(out)


def _text_bash(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
    command = tool_input.get("command")
    command = command if isinstance(command, str) else json.dumps(tool_input, ensure_ascii=False, sort_keys=True)
    mini = _mini_swe(text)
    if mini is not None:
        code, output, note = mini
        return _bash_form(command, f"exit code: {code}{note}", output, "output", "")
    if m := _EXIT_CODE.match(text):  # Claude Code prefixes failures with "Exit code N"
        return _bash_form(command, f"exit code: {m.group(1)}", text[m.end() :], "output", "")
    status = "exit code: not reported" + (" (error result)" if is_error else " (ok)")
    return _bash_form(command, status, text, "output", "")


def _mini_swe(text: str) -> tuple[str, str, str] | None:
    """(exit code, output, note) of a mini-swe-agent observation, or None."""
    head = text[:300].lstrip()
    if head.startswith("The last command <command>") and " timed out" in head:
        return "timed out", (_between(text, "<output>", "</output>") or "").lstrip(" \n"), ""
    m = re.match(r"<returncode>\s*(-?\d+)\s*</returncode>", head)
    if m is None:
        return None
    output = _between(text, "<output>", "</output>")
    if output is not None:
        return m.group(1), output.removeprefix("\n"), ""
    out_head = _between(text, "<output_head>", "</output_head>") or ""
    out_tail = _between(text, "<output_tail>", "</output_tail>") or ""
    elided = re.search(r"<elided_chars>\s*(\d+)", text)
    note = f" (the harness already elided {elided.group(1)} chars mid-output)" if elided else ""
    return m.group(1), out_head.strip("\n") + "\n" + out_tail.strip("\n"), note


def _text_list(kind: str) -> Callable[[dict[str, Any], str, bool, int], str | None]:
    def form(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
        if is_error:
            return None
        key = "pattern" if kind == "Glob" else "path"
        subject = tool_input.get(key) or tool_input.get("path") or "?"
        entries, total = _entries(text)
        return _list_form(kind, _clip(str(subject), HEADER_CHARS), total, entries[:10], "entries")

    return form


def _entries(text: str) -> tuple[list[str], int]:
    """Non-empty lines (a "Found N files" header gives the total), lazily for huge lists."""
    total, first, declared = 0, [], None
    for line in _iter_lines(text):
        if not line.strip():
            continue
        if declared is None and total == 0 and (m := _FOUND.match(line)):
            declared = int(m.group(1))
            continue
        total += 1
        if len(first) < 10:
            first.append(_clip(line))
    return first, declared if declared is not None else total


def _text_grep(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
    if is_error:
        return None
    pattern = _clip(str(tool_input.get("pattern", "?")), HEADER_CHARS)
    single_file = _input_path(tool_input)
    total, first = 0, []
    for line in _iter_lines(text):
        # "file:line:text" (several files) or "line:text" (one file); context lines use "-".
        if m := _GREP_LINE.match(line):
            file, num, rest = single_file, m.group(1), m.group(2)
        elif m := _GREP_FILE_LINE.match(line):
            file, num, rest = m.group(1), m.group(2), m.group(3)
        else:
            continue
        total += 1
        if len(first) < 5:
            first.append(_clip(f"{file}:{num}: {rest.strip()}"))
    if total == 0:  # files_with_matches / count mode: a list of paths
        first, total = _entries(text)
        first = first[:5]
    return _list_form("Grep", pattern, total, first, "matches")


_SNIPPET = "Here's the result of running `cat -n` on a snippet of the edited file:"


def _text_edit(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
    path = _input_path(tool_input)
    if is_error or text.lstrip().startswith("<tool_use_error>"):
        return f"Edit {path}: NOT applied\nerror: {_cut(text.strip(), ERROR_CHARS)}"
    edits = tool_input.get("edits")
    if isinstance(edits, list):
        replacements = f"{len(edits)} edit(s)"
    else:
        replacements = "all occurrences" if tool_input.get("replace_all") else "1 replacement"
    snippet = text.split(_SNIPPET, 1)[1] if _SNIPPET in text else ""
    return _diff_form(f"Edit {path}: applied, {replacements}", snippet, "edited snippet")


def _text_write(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
    path = _input_path(tool_input)
    if is_error or text.lstrip().startswith("<tool_use_error>"):
        return f"Write {path}: NOT written\nerror: {_cut(text.strip(), ERROR_CHARS)}"
    content = tool_input.get("content")
    size = f", {len(content.encode('utf-8', 'replace'))} bytes" if isinstance(content, str) else ""
    if text.lstrip().startswith("File created"):
        body = content if isinstance(content, str) else ""
        return _diff_form(f"Write {path}: created{size}", body, "content", limit=20)
    snippet = text.split(_SNIPPET, 1)[1] if _SNIPPET in text else ""
    return _diff_form(f"Write {path}: updated{size}", snippet, "written snippet")


def _text_todo(tool_input: dict[str, Any], text: str, is_error: bool, _: int) -> str | None:
    todos = tool_input.get("todos")
    if is_error or not isinstance(todos, list):
        return None
    items = [(str(t.get("content", "")), str(t.get("status", "pending"))) for t in todos if isinstance(t, dict)]
    return _todo_recap(items)


_TEXT_FORMS: dict[str, Callable[[dict[str, Any], str, bool, int], str | None]] = {
    "read": _text_read,
    "bash": _text_bash,
    "ls": _text_list("LS"),
    "glob": _text_list("Glob"),
    "grep": _text_grep,
    "edit": _text_edit,
    "multiedit": _text_edit,
    "write": _text_write,
    "todowrite": _text_todo,
}


# --------------------------------------------------------------------------
# Shared building blocks
# --------------------------------------------------------------------------


def _bash_form(command: str, status: str, stdout: str, label: str, stderr: str) -> str:
    out = [f"$ {_clip(command.strip(), HEADER_CHARS)}", status]
    out.extend(_summary(stdout, label))
    if stderr.strip():
        n = _count_lines(stderr)
        out.append(f"stderr (last {min(n, 20)} of {n} lines):")
        out.extend(_tail_lines(stderr, 20))
    return "\n".join(out)


def _summary(text: str, label: str) -> list[str]:
    """All lines when at most 2 x SUMMARY_LINES, else that many first and last lines."""
    n, k = _count_lines(text), SUMMARY_LINES
    if n == 0:
        return [f"{label}: (empty)"]
    if n <= 2 * k:
        return [f"{label} ({n} lines):", *_head_lines(text, 2 * k)]
    return [
        f"{label} ({n} lines, first {k} and last {k}):",
        *_head_lines(text, k),
        f"... ({n - 2 * k} lines omitted) ...",
        *_tail_lines(text, k),
    ]


def _list_form(kind: str, subject: str, total: int, first: list[str], noun: str) -> str:
    out = [f"{kind} {_clip(subject, HEADER_CHARS)}: {total} {noun}"]
    if first:
        out.append(f"first {len(first)}:" if total > len(first) else "all:")
        out.extend(_clip(e) for e in first)
    return "\n".join(out)


def _diff_form(header: str, body: str, label: str, limit: int = 10) -> str:
    lines = _head_lines(body.lstrip("\n"), limit)
    if not lines:
        return header
    n = _count_lines(body.lstrip("\n"))
    return "\n".join([header, f"{label} (first {len(lines)} of {n} lines):", *lines])


def _todo_recap(items: list[tuple[str, str]]) -> str:
    counts = Counter(status for _, status in items)
    parts = ", ".join(f"{counts[s]} {s}" for s in sorted(counts))
    current = next((c for c, s in items if s == "in_progress"), None)
    recap = f"TodoWrite: {len(items)} todos ({parts or 'none'})"
    return recap + (f"; in progress: {_clip(current, 200)}" if current else "")


def _head_tail(text: str, head: int, tail: int) -> str:
    if head + tail >= len(text):
        return text
    cut_end = len(text) - tail
    return (
        text[:head]
        + f"\n[... {cut_end - head} characters ({text.count(chr(10), head, cut_end)} line breaks) omitted ...]\n"
        + (text[len(text) - tail :] if tail > 0 else "")
    )


def _cut(text: str, limit: int) -> str:
    """Keep a message whole up to `limit` characters, else its head and tail."""
    return text if len(text) <= limit else _head_tail(text, limit * 2 // 3, limit // 3)


def _clip(line: str, limit: int = LINE_CHARS) -> str:
    return line if len(line) <= limit else f"{line[:limit]}… (+{len(line) - limit} chars)"


def _between(text: str, start: str, end: str) -> str | None:
    i = text.find(start)
    if i < 0:
        return None
    j = text.rfind(end)
    return text[i + len(start) : j] if j > i else text[i + len(start) :]


# Line helpers work on 50 MB strings without splitting them into millions of lines.


def _iter_lines(text: str) -> Iterator[str]:
    start, size = 0, len(text)
    while start < size:
        end = text.find("\n", start)
        if end < 0:
            end = size
        yield text[start:end].rstrip("\r")
        start = end + 1


def _head_lines(text: str, n: int, clip: bool = True) -> list[str]:
    lines = list(islice(_iter_lines(text), max(n, 0)))
    return [_clip(x) for x in lines] if clip else lines


def _tail_lines(text: str, n: int, clip: bool = True) -> list[str]:
    end = len(text.rstrip("\n"))
    pos, lines = end, []
    while pos > 0 and len(lines) < n:
        start = text.rfind("\n", 0, pos) + 1
        lines.append(text[start:pos].rstrip("\r"))
        pos = start - 1
    lines.reverse()
    return [_clip(x) for x in lines] if clip else lines


def _count_lines(text: str) -> int:
    text = text.rstrip("\n")
    return text.count("\n") + 1 if text else 0


def _image_count(result: ToolResultBlock) -> int:
    if isinstance(result.content, str):
        return 0
    return sum(isinstance(p, ImageBlock) for p in result.content)

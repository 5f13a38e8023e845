"""Compressed forms of baton's own tool results: JSON envelopes whose data follows ``context.tool_results``."""

from __future__ import annotations

import json
from typing import Any, Callable

from pydantic import ValidationError

from context.form_parts import (
    ERROR_CHARS,
    HEADER_CHARS,
    LINE_CHARS,
    bash_form,
    clip_line,
    diff_form,
    first_lines,
    list_form,
    shorten,
    todo_recap,
)
from context.text import head_tail
from context.tool_results import (
    DATA_MODELS,
    BashData,
    EditData,
    EvaluationData,
    GlobData,
    GrepData,
    LSData,
    ReadData,
    TodoWriteData,
    ToolEnvelope,
    WriteData,
)


def parse_envelope(text: str) -> ToolEnvelope | None:
    """The envelope `text` holds, or None when it is not one."""
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


def envelope_form(name: str, env: ToolEnvelope, read_lines: int, cap_chars: int, head: int, tail: int) -> str:
    """The compressed text of tool `name`'s envelope: its own form when its data validates, else the three fields."""
    model = DATA_MODELS.get(name)
    if env.status == "ok" and model is not None and isinstance(env.data, dict):
        try:
            data = model.model_validate(env.data)
        except ValidationError:
            data = None
        if data is not None:
            return _FORMS[name](data, read_lines)
    # "other" form: the three fields, data cut to head + tail when large.
    lines = [f"status: {env.status}"]
    if env.error:
        lines.append(f"error: {shorten(env.error, ERROR_CHARS)}")
    if env.data is not None:
        data_text = json.dumps(env.data, ensure_ascii=False, separators=(",", ":"), default=str)
        lines.append("data: " + (head_tail(data_text, head, tail) if len(data_text) > cap_chars else data_text))
    return "\n".join(lines)


def _read(d: ReadData, read_lines: int) -> str:
    out = [
        f"Read {clip_line(d.path, HEADER_CHARS)}: lines {d.start_line}-{d.end_line} of {d.total_lines}",
        f"mtime: {d.mtime}, modified_externally: {str(d.modified_externally).lower()}",
    ]
    shown = first_lines(d.content, read_lines)
    if shown:
        out.append(f"first {len(shown)} lines:")
        out.extend(shown)
    return "\n".join(out)


def _bash(d: BashData, _: int) -> str:
    status = f"exit code: {d.exit_code}" + (" (timed out)" if d.timed_out else "")
    return bash_form(d.command, status, d.stdout, "stdout", d.stderr)


def _ls(d: LSData, _: int) -> str:
    return list_form("LS", d.path, d.total if d.total is not None else len(d.entries), d.entries[:10], "entries")


def _glob(d: GlobData, _: int) -> str:
    return list_form("Glob", d.pattern, d.total if d.total is not None else len(d.matches), d.matches[:10], "files")


def _grep(d: GrepData, _: int) -> str:
    total = d.total if d.total is not None else len(d.matches)
    first = [f"{m.file}:{m.line}: {m.text.strip()}" if m.line is not None else m.file for m in d.matches[:5]]
    return list_form("Grep", d.pattern, total, first, "matches")


def _edit(d: EditData, _: int) -> str:
    state = "applied" if d.applied else "NOT applied"
    header = f"Edit {clip_line(d.path, HEADER_CHARS)}: {state}, {d.replacements} replacement(s)"
    return diff_form(header, d.diff, "diff")


def _write(d: WriteData, _: int) -> str:
    header = f"Write {clip_line(d.path, HEADER_CHARS)}: {'created' if d.created else 'updated'}, {d.size} bytes"
    if d.created:
        return diff_form(header, d.content_head or d.diff, "content", limit=20)
    return diff_form(header, d.diff, "diff")


def _todo(d: TodoWriteData, _: int) -> str:
    return todo_recap([(t.content, t.status) for t in d.todos])


def _evaluation(d: EvaluationData, _: int) -> str:
    layers = ", ".join(f"{k}={v}" for k, v in sorted(d.failures_per_layer.items()))
    out = [f"RunEvaluation iteration {d.iteration}: {d.passed}/{d.total} passed (success rate {d.success_rate})",
           f"failures per layer: {layers or 'none'}; report: {d.report_path}"]
    out += [f"- {f.sample} [{f.layer}]: {clip_line(f.reason, LINE_CHARS)}" for f in d.failures[:5]]
    if len(d.failures) > 5:
        out.append(f"... {len(d.failures) - 5} more failures in the report")
    return "\n".join(out)


# Lower-cased tool name -> its form; the same keys as DATA_MODELS.
_FORMS: dict[str, Callable[[Any, int], str]] = {
    "read": _read,
    "bash": _bash,
    "ls": _ls,
    "glob": _glob,
    "grep": _grep,
    "edit": _edit,
    "multiedit": _edit,
    "write": _write,
    "todowrite": _todo,
    "runevaluation": _evaluation,
}

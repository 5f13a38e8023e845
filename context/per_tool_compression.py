"""The ``per_tool`` result compressor: each tool's older results get a form of their own.

A compressed form keeps the facts an agent acts on (paths, ids, counts, exit
codes, the first entries) and ends with a reference to the full result archived
on disk. Two shapes of result are understood: baton's JSON envelopes
(``context.envelope_forms``) and plain text from recorded logs of other agents
(``context.log_forms``). Nothing here raises on odd input: whatever cannot be
parsed falls back to the generic head + tail form.
"""

from __future__ import annotations

from typing import Any

from context.compression import (
    CAP_CHARS,
    HEAD_CHARS,
    TAIL_CHARS,
    cap_result,
    compress_call,
    footer,
    image_count,
    is_compressed,
)
from context.envelope_forms import envelope_form, parse_envelope
from context.log_forms import LOG_FORMS
from context.messages import ToolResultBlock, ToolUseBlock
from context.text import head_tail


class PerToolCompressor:
    """Layers 4 and 5 of assembly with per-tool forms (the default, named ``per_tool`` in ``Policy``)."""

    client_side = True  # baton shrinks older results itself, so nothing is asked of the server

    def request_fields(self, assembler: Any, assembled: Any) -> dict[str, Any]:
        return {}

    def betas(self) -> list[str]:
        return []

    def compress_result(
        self, call: ToolUseBlock | None, result: ToolResultBlock, ref: str, *, read_lines: int
    ) -> ToolResultBlock:
        return compress_result(call, result, ref, read_lines=read_lines)

    def cap_result(self, result: ToolResultBlock, ref: str, *, cap_chars: int, head: int, tail: int) -> ToolResultBlock:
        return cap_result(result, ref, cap_chars=cap_chars, head=head, tail=tail)

    def compress_call(self, call: ToolUseBlock) -> ToolUseBlock:
        return compress_call(call)


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
    images = image_count(result)
    name = (tool.name if tool else "").strip().lower()
    tool_input = tool.input if tool else {}
    try:
        body = _form(name, tool_input, text, result.is_error, read_lines, cap_chars, head, tail)
    except Exception:  # a parser bug must never break context assembly
        body = None
    if body is None:
        body = head_tail(text, head, tail) if len(text) > cap_chars else (text if images else None)
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


def _form(
    name: str, tool_input: dict[str, Any], text: str, is_error: bool,
    read_lines: int, cap_chars: int, head: int, tail: int,
) -> str | None:
    """The compressed text without footer, or None when no specific form applies."""
    envelope = parse_envelope(text)
    if envelope is not None:
        return envelope_form(name, envelope, read_lines, cap_chars, head, tail)
    form = LOG_FORMS.get(name)
    return form(tool_input, text, is_error, read_lines) if form else None

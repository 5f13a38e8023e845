"""What every result compressor shares: the archive reference, the size cap, shortened calls.

A tool result that leaves the verbatim window is replaced by a shorter text
ending with a reference to the full result archived on disk (``footer``); a
verbatim result over the size cap keeps its head and tail (``cap_result``); an
older call keeps its short arguments (``compress_call``). These are pure
functions of their inputs: they sit inside the prompt-cache prefix, so the same
input must always give byte-identical text. How an older result is shortened
is the compressor's choice (``context.per_tool_compression`` is baton's).
"""

from __future__ import annotations

import re
from typing import Any

from context.messages import ImageBlock, ToolResultBlock, ToolUseBlock

# Defaults: results over 5,000 characters keep their first and last 1,000.
CAP_CHARS = 5000
HEAD_CHARS = 1000
TAIL_CHARS = 1000

FOOTER_PREFIX = "[full result archived: "

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def archive_ref(agent: str, tool_use_id: str) -> str:
    """Where the full result of a tool call is archived (relative to the scenario folder)."""
    # Both parts become path components: nothing may escape the folder.
    agent_part = _UNSAFE.sub("_", agent or "") or "_"
    id_part = _UNSAFE.sub("_", tool_use_id or "") or "_"
    return f"state/{agent_part}/tool_results/{id_part}.txt"


def log_ref(agent: str, seqs: range) -> str:
    """Where messages of the agent's log are kept: their records (numbered from 1, one a line) in the log file."""
    log = f"state/{_UNSAFE.sub('_', agent or '') or '_'}/log.jsonl"
    if not seqs:
        return f"in {log}"
    if len(seqs) == 1:
        return f"log record {seqs[0]} (line {seqs[0]} of {log})"
    return f"log records {seqs[0]}-{seqs[-1]} (lines {seqs[0]}-{seqs[-1]} of {log})"


def footer(ref: str) -> str:
    return f"{FOOTER_PREFIX}{ref} — Read it to see everything]"


def is_compressed(result: ToolResultBlock) -> bool:
    """True if the result already is a compressed form (compressing again would be a no-op)."""
    end = result.text[-2000:].rstrip()  # the footer is short: no need to copy a huge result
    return end[end.rfind("\n") + 1 :].startswith(FOOTER_PREFIX)


def image_count(result: ToolResultBlock) -> int:
    if isinstance(result.content, str):
        return 0
    return sum(isinstance(p, ImageBlock) for p in result.content)


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
    images = image_count(result)
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
            more = len(value) - head
            note = f"\n[... {more} more characters of this input not shown; the full call is in the agent log]"
            return value[:head] + note
        if isinstance(value, list):
            return [cut(v) for v in value]
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        return value

    new_input = cut(tool_use.input)
    if new_input == tool_use.input:
        return tool_use
    return ToolUseBlock(id=tool_use.id, name=tool_use.name, input=new_input)

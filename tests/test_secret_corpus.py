"""The secret corpus (tests/secret_corpus.py): recall, false positives, and scale.

A failure never shows a corpus secret: messages are built with ``masked`` and
raised with ``pytest.fail``, so assertion rewriting has no value to print.
"""

from __future__ import annotations

import base64
import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context.redaction import REDACTED, redact
from context.secret_disguises import MAX_CLEAN_DECODES, MAX_DECODED_BYTES, MAX_ENCODED_CHARS, redact_disguised
from tests.secret_corpus import NEGATIVES, POSITIVES, Secret, exactly_redacted, masked, score

MIN_SECRETS, MIN_LOOK_ALIKES, MIN_RECALL = 60, 40, 0.98


def test_corpus_figures() -> None:
    figures = score(redact, REDACTED)
    print(f"\nredaction corpus: {figures.line()}")
    assert figures.secrets >= MIN_SECRETS and figures.look_alikes >= MIN_LOOK_ALIKES
    if figures.recall < MIN_RECALL or figures.false_positives:
        pytest.fail(f"{figures.line()}; missed: {figures.missed}; look-alikes changed: {figures.touched}")


def test_corpus_entries_are_well_formed() -> None:
    labels = [e.label for e in POSITIVES] + [label for label, _ in NEGATIVES]
    assert len(labels) == len(set(labels)), "labels are test ids: each must be unique"
    bad = [e.label for e in POSITIVES if e.text.count(e.secret) != 1 or REDACTED in e.text]
    assert not bad, f"each positive holds its secret exactly once: {bad}"


@pytest.mark.parametrize("entry", POSITIVES, ids=[e.label for e in POSITIVES])
def test_secret_is_redacted_and_its_surroundings_kept(entry: Secret) -> None:
    out = redact(entry.text)
    if not exactly_redacted(redact, entry, REDACTED):
        pytest.fail(f"{entry.label}: {masked(entry.text, [entry.secret])!r} became {masked(out, [entry.secret])!r}")
    if redact(out) != out:
        pytest.fail(f"{entry.label}: a second pass changed {out!r}")  # out holds no secret here


@pytest.mark.parametrize(("label", "text"), NEGATIVES, ids=[label for label, _ in NEGATIVES])
def test_look_alike_is_untouched(label: str, text: str) -> None:
    out = redact(text)
    assert out == text, f"{label}: became {out!r}"
    assert out is text  # the clean path hands back the same object


def test_random_forty_character_strings_are_caught() -> None:
    # The bare AWS rule judges by shape and entropy: real keys are random, so
    # nearly all random 40-character strings of their alphabet must be caught.
    rng = random.Random(11)
    alphabet = string.ascii_letters + string.digits + "/+"
    keys = ["".join(rng.choice(alphabet) for _ in range(40)) for _ in range(2000)]
    missed = [k for k in keys if redact(f"key {k} end") != f"key {REDACTED} end"]
    assert len(missed) <= 20, f"{len(missed)} of 2000 missed"  # at most 1% slips through


def test_a_megabyte_of_look_alikes_is_untouched() -> None:
    # Finishing at all is the point (bench/redaction_speed.py measures how fast): every rule is linear.
    text = "\n".join(t for _, t in NEGATIVES) + "\n"
    big = text * (1_000_000 // len(text) + 1)
    assert redact(big) is big


# Words of code identifiers and API field names, keyword-ish ones first; no verbs ("is"), so no prose.
_WORDS = ("token password secret key api auth pwd creds cred access account private hf sk sg dapi hvs mysql "
          "prefix mismatch behavior thinking block binding max count env field hash input output x p a u").split()


@settings(max_examples=400, deadline=None)
@given(st.lists(
    st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6).map(lambda w: "_".join(w)),
    min_size=1, max_size=5,
).map(lambda parts: ".".join(parts)), st.sampled_from(["{}", "`{}`", "set `{}` to", "{}()", "self.{}", "--{}"]))
def test_identifiers_are_never_touched(name: str, context: str) -> None:
    # Dotted and snake_case names with every keyword in them, in code and API error texts:
    # no separator and no value, so nothing to redact.
    text = context.format(name)
    assert redact(text) == text


PATHOLOGICAL = [
    "a" * 1_000_000,  # one long word: the AWS run finder, and the value rules
    "password is " * 80_000,  # a prose keyword repeated, every value another keyword
    "the password for " * 60_000,
    "mysql -p " * 100_000,  # a command whose arguments never end
    "-----BEGIN PRIVATE KEY-----\n" + "A" * 1_000_000,  # a key block that never ends
    "https://" + ":" * 500_000 + "@" * 500_000,
    "token=" * 150_000,
    "AccountKey=" + "A" * 1_000_000,
    "SG." + "a" * 500_000 + "." + "b" * 500_000,
    "x" * 500_000 + "@" + "." * 500_000,
    "machine h login u " * 50_000,  # a netrc entry that never reaches its password
    "curl -u " * 120_000,
    "hooks.slack.com/services/T" + "A" * 1_000_000,
    "my password for " + "word " * 200_000,
    # the disguise rules: one stretch of base64 or hex of text a megabyte long, runs that all end like a key
    # written backwards, .pgpass-like lines with no host, netrc entries on one line with no newline in sight
    "QUFB" * 250_000,
    "41" * 500_000,
    "-ks" * 333_333,
    ("x" * 19 + "AIKA ") * 40_000,
    "1:5432:a:b:c\n" * 80_000,
    "machine h password x " * 50_000,
    "password=abc1 " * 70_000,
]


@pytest.mark.parametrize("text", PATHOLOGICAL, ids=range(len(PATHOLOGICAL)))
def test_pathological_input_finishes(text: str) -> None:
    out = redact(text)
    assert redact(out) == out


def test_decoding_is_bounded_per_call() -> None:
    # Thousands of base64 stretches of clean text: one call decodes and judges at most MAX_CLEAN_DECODES of them,
    # MAX_DECODED_BYTES in all, and the rest of the text is not decoded at all.
    judged: list[int] = []

    def plain(text: str) -> str:
        judged.append(len(text))
        return redact(text)

    blobs = [base64.b64encode(f"line {i}: nothing to see in this one".encode()).decode() for i in range(5000)]
    text = " ".join(blobs) + " " + base64.b64encode(b"x" * 100_000).decode()
    assert redact_disguised(text, plain) is text
    assert 0 < len(judged) <= MAX_CLEAN_DECODES and sum(judged) <= MAX_DECODED_BYTES
    # One long stretch is decoded only up to MAX_ENCODED_CHARS.
    judged.clear()
    redact_disguised(base64.b64encode(b"plain text, " * 50_000).decode(), plain)
    assert judged == [MAX_ENCODED_CHARS * 3 // 4]


def test_encoded_secrets_do_not_spend_the_budget() -> None:
    # Only stretches that hold no secret count, so encoded secrets go however many there are, and a second
    # call, meeting the same clean stretches in the same order, stops where the first did and changes nothing.
    secrets = [base64.b64encode(f"password=Hunter{i}x".encode()).decode() for i in range(3 * MAX_CLEAN_DECODES)]
    clean = [base64.b64encode(f"line {i}: nothing to see".encode()).decode() for i in range(2 * MAX_CLEAN_DECODES)]
    text = " ".join(clean[: MAX_CLEAN_DECODES - 1] + secrets)
    out = redact(text)
    assert out.count(REDACTED) == len(secrets) and not any(s in out for s in secrets)
    assert redact(out) == out
    once = redact(" ".join(clean + secrets))  # the budget spent before the secrets: both calls stop there
    assert redact(once) == once

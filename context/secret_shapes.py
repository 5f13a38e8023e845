"""Secrets by their shape: issuer prefixes, private key blocks, credentials inside URLs, bare AWS keys.

Every pattern starts with a literal or a small set of first characters, which
the regex engine scans for quickly, and quantifiers over long runs are
possessive (``*+``, ``{m,n}+``) or bounded, so nothing backtracks
catastrophically. The one shape with no literal to anchor on, a bare
40-character AWS secret access key, is searched for as a literal in a
translated copy of the text (see ``_KEY_CHARS``), not with a regex that would
try every word boundary. Judgement calls (random or a camelCase name?) are
made in Python on the few matches rather than in the regexes.

The detectors follow detect-secrets (its AWS, Stripe, GitLab, npm and PyPI
prefixes; Shannon entropy with a threshold for keys without a prefix) and
gitleaks (issuer prefixes with their documented lengths and alphabets).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Callable

from context.secret_words import REDACTED, URL_PLACEHOLDERS, is_given, long_runs, splice

# PEM private keys, the whole block. The body is matched line by line (base64
# runs and "Proc-Type:" headers, also inside JSON strings with literal "\n") so
# a block cut short by head+tail truncation still loses its body, and a stray
# BEGIN can never make the engine scan the rest of a 50 MB text.
_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]++ ){0,3}PRIVATE KEY(?: BLOCK)?-----"
    r"(?:(?:\s|\\{1,2}[rn])*+(?:[A-Za-z0-9+/=]++|[A-Za-z-]++:[^\n\\]*+))*+"
    r"(?:(?:\s|\\{1,2}[rn])*+-----END (?:[A-Z0-9]++ ){0,3}PRIVATE KEY(?: BLOCK)?-----)?"
)
# scheme://user:password@host: keep the user and the host.
_URL_CREDS = re.compile(r"://(?P<user>[^\s/:@?#]{0,256}+):(?P<pw>[^\s/@?#]{1,256}+)@")
# Each shape starts with a literal and then a fixed-width lookbehind that
# rejects a preceding word character, so "task-1234" never starts an "sk-" key.
_SK = re.compile(r"sk-(?<![\w-]sk-)[A-Za-z0-9_-]{20,}+")  # Anthropic sk-ant-..., OpenAI sk-/sk-proj-
_GITHUB = re.compile(r"g(?:h[pousr]_(?<!\wgh[pousr]_)[A-Za-z0-9]{30,}+|ithub_pat_(?<!\wgithub_pat_)\w{22,}+)")
_SLACK = re.compile(r"xox[abprs]-(?<![\w-]xox[abprs]-)[A-Za-z0-9-]{10,}+")
_AWS_KEY_ID = re.compile(r"A[KS]IA(?<![A-Za-z0-9]A[KS]IA)[A-Z0-9]{16}(?![A-Za-z0-9])")
_JWT = re.compile(r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+")
# Stripe secret and restricted keys: two patterns, since a literal start scans
# several times faster than a character class ([rs]k_).
_STRIPE_SECRET = re.compile(r"sk_(?<![A-Za-z0-9]sk_)(?:live|test)_[A-Za-z0-9]{20,}+")
_STRIPE_RESTRICTED = re.compile(r"rk_(?<![A-Za-z0-9]rk_)(?:live|test)_[A-Za-z0-9]{20,}+")
_GOOGLE = re.compile(r"AIza(?<![\w-]AIza)[A-Za-z0-9_-]{35}(?![\w-])")
_GITLAB = re.compile(r"glpat-(?<![\w-]glpat-)[A-Za-z0-9_-]{20,}+")
_NPM = re.compile(r"npm_(?<![\w-]npm_)[A-Za-z0-9]{36}(?![\w-])")
_PYPI = re.compile(r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{40,}+")  # "pypi.org" in base64: every PyPI API token
# Issuer prefixes with their documented lengths and alphabets (gitleaks' rules).
_SLACK_APP = re.compile(r"xapp-(?<![\w-]xapp-)\d-[A-Za-z0-9-]{20,}+")
_SENDGRID = re.compile(r"SG\.(?<![\w.]SG\.)[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![\w-])")
_HUGGING_FACE = re.compile(r"hf_(?<!\whf_)[A-Za-z0-9]{34,}+")  # judged by _hugging_face
_STRIPE_WEBHOOK = re.compile(r"whsec_(?<!\wwhsec_)[A-Za-z0-9]{24,}+")
_SHOPIFY = re.compile(r"shp(?<!\wshp)(?:at|ss|ca|pa)_[a-fA-F0-9]{32}(?!\w)")
_DIGITALOCEAN = re.compile(r"do(?<!\wdo)[opr]_v1_[a-f0-9]{64}(?!\w)")
_DATABRICKS = re.compile(r"dapi(?<!\wdapi)[a-f0-9]{32}(?:-\d)?(?!\w)")
_POSTMAN = re.compile(r"PMAK-(?<!\wPMAK-)[a-f0-9]{24}-[a-f0-9]{34}(?!\w)")
_GRAFANA = re.compile(r"gl(?<!\wgl)(?:sa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|c_[A-Za-z0-9+/]{32,}+={0,2})(?![\w-])")
_LINEAR = re.compile(r"lin_api_(?<!\wlin_api_)[A-Za-z0-9]{40}(?!\w)")
_VAULT = re.compile(r"hv[sb]\.(?<![\w.]hv[sb]\.)[A-Za-z0-9_-]{24,}+")
_AGE = re.compile(r"AGE-SECRET-KEY-1(?<![\w-]AGE-SECRET-KEY-1)[A-Z0-9]{58}(?![A-Za-z0-9])")
_GOOGLE_OAUTH = re.compile(r"GOCSPX-(?<![\w-]GOCSPX-)[A-Za-z0-9_-]{28}(?![\w-])")
_GOOGLE_ACCESS = re.compile(r"ya29\.(?<![\w.]ya29\.)[A-Za-z0-9_-]{20,}+")

# Secrets inside URLs and config lines: only the group "s" goes, the rest stays.
_SLACK_HOOK = re.compile(r"hooks\.slack\.com/services/(?P<s>T[A-Z0-9]{6,}+/B[A-Z0-9]{6,}+/[A-Za-z0-9]{16,}+)")
_DISCORD_HOOK = re.compile(r"discord(?:app)?\.com/api/webhooks/\d{5,30}+/(?P<s>[A-Za-z0-9_-]{40,}+)")
# Sentry DSNs: the project key is the user of the URL, with no password (which _URL_CREDS needs).
_SENTRY_DSN = re.compile(r"://(?P<s>[0-9a-f]{32})(?::[0-9a-f]{32})?@")
_AZURE_SAS = re.compile(r"sig=(?<=[?&]sig=)(?P<s>[A-Za-z0-9%+/=]{20,}+)")
# ~/.netrc: "machine HOST login USER password PASS", its tokens in any order, on one line or several,
# "passwd" for "password" too. An entry with no login before its password counts only where "machine"
# starts the line (_netrc): "for the machine and password tokens" is prose.
_NETRC = re.compile(
    r"machine(?<![\w-]machine)[ \t]++\S++(?:\s++(?:login|account|port)[ \t]++\S++){0,3}+\s++passw(?:or)?d[ \t]++"
    r"(?P<s>[^\s\"'`]++)"
)
_NETRC_LOGIN = re.compile(r"\slogin[ \t]")
# ~/.pgpass: "HOST:PORT:DATABASE:USER:PASSWORD", a line each, any field "*", a ":" or "\" in a field escaped
# with "\". Anchored on ":PORT:" (`re` scans for the colon fast); the host before it and the end of the line
# after the password are checked in _pgpass, so clock times and MAC addresses (no host) stay.
_PGPASS_FIELD = r"(?:[^\s:\\]|\\.){1,256}+"
_PGPASS = re.compile(
    rf":(?:\d{{1,5}}+|\*):{_PGPASS_FIELD}:{_PGPASS_FIELD}:(?P<s>(?:[^\s:\\\"'`]|\\.){{1,256}}+)"
)
_HOST_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_*")

# A bare AWS secret access key is 40 characters of this alphabet with nothing
# around it to anchor a regex, and a regex trying every word boundary of a
# 50 MB text is slow, so _redact_aws_secrets maps the text to bytes in which
# every character of the alphabet is "a" and anything else " ", and a search
# for 40 "a"s (a fast substring search in C) finds the runs of 40 or more.
# Each is judged by looks_like_aws_secret.
_KEY_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+")
_KEY_CHARS = bytes(ord("a") if chr(i) in _KEY_ALPHABET else ord(" ") for i in range(256))


def _whole(_: re.Match[str]) -> str:
    return REDACTED


def _group(m: re.Match[str]) -> str:
    """The match with only its group "s" redacted; a placeholder ($PASS, <REDACTED>, PASS) stays."""
    if not is_given(m.group("s")):
        return m.group(0)
    start, end = m.start("s") - m.start(), m.end("s") - m.start()
    return m.group(0)[:start] + REDACTED + m.group(0)[end:]


def _netrc(m: re.Match[str]) -> str:
    if not _NETRC_LOGIN.search(m.group(0)):
        # No login: an entry only if "machine" starts its line, looked for at most 256 characters back (back
        # to the text's start, many entries on one long line would make this quadratic).
        text = m.string
        window = max(0, m.start() - 256)
        newline = text.rfind("\n", window, m.start())
        if (newline < 0 and window > 0) or text[newline + 1 : m.start()].strip(" \t\"'`"):
            return m.group(0)  # "machine" mid-line: a word of prose
    return _group(m)


def _pgpass(m: re.Match[str]) -> str:
    text = m.string
    host = m.start()
    while host > 0 and m.start() - host < 256 and text[host - 1] in _HOST_CHARS:
        host -= 1
    name = text[host : m.start()]
    if (
        not any(c.isalpha() or c in ".*" for c in name)  # "10:00:01:02:03", "00:11:22:33:44:55": no host
        or text[host - 1 : host] not in ("", "\n", "\r", " ", "\t", '"', "'", "`")  # a field of something longer
        or text[m.end() : m.end() + 1] not in ("", "\n", "\r", '"', "'", "`")  # the line goes on: not .pgpass
    ):
        return m.group(0)
    return _group(m)


def _hugging_face(m: re.Match[str]) -> str:
    # Tokens are 34 random letters; one case, or mostly lower-case words, is a name
    # (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). 70% words: 0.06% of random tokens, measured.
    body = m.group(0)[3:]
    if body.islower() or body.isupper() or sum(len(w) for w in _WORDISH.findall(body)) >= 0.7 * len(body):
        return m.group(0)
    return REDACTED


def _sk(m: re.Match[str]) -> str:
    # Real keys are random, so they mix digits and letters; a hyphenated word does not.
    body = m.group(0)[3:]
    if any(c.isdigit() for c in body) and any(c.isalpha() for c in body):
        return REDACTED
    return m.group(0)


def shannon_entropy(value: str) -> float:
    """Bits per character of ``value`` under its own character frequencies."""
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


# Lower-case runs of three letters or more: the words of paths and identifiers.
_WORDISH = re.compile(r"[a-z]{3,}")
# Base64 of ASCII text: every byte is below 0x80, so the first character of
# every 4-character group encodes a value below 32, one of these.
_BASE64_LOW = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef")


def looks_like_aws_secret(run: str) -> bool:
    """True if a 40-character run of [A-Za-z0-9/+] is probably a random key.

    Thresholds were measured on random 40-character strings of the key
    alphabet against camelCase names, paths and base64 of text: a random run
    has entropy >= 4.27 bits in 99.99% of cases (detect-secrets uses 4.5 for
    base64 strings of any length, which misses ~2% of 40-character keys) and
    less than half its characters in lower-case words in 99.9%, while
    identifiers and paths have 0.65 and more.
    """
    # str methods first: git logs and hash lists bring thousands of candidates.
    if run.islower() or run.isupper() or not any(c.isalpha() for c in run):
        return False  # hex digests, upper-case hex, all-lower paths: keys mix both cases
    if run.isalpha():
        return False  # plain words glued together: keys have digits or "/+"
    if shannon_entropy(run) < 4.0:
        return False
    if sum(len(w) for w in _WORDISH.findall(run)) * 2 >= len(run):
        return False  # words: src/main/java/..., VeryLongCamelCaseName1
    return not all(c in _BASE64_LOW for c in run[::4])  # base64 of text (1 in 1024 random keys)


def _redact_aws_secrets(text: str) -> str:
    # encode("ascii", "replace") turns each other code point into one "?", so offsets stay valid.
    marks = text.encode("ascii", "replace").translate(_KEY_CHARS)
    spans: list[tuple[int, int, str]] = []
    for start, end in long_runs(marks, 40):
        if end - start > 41:
            continue  # base64 blobs and the like
        if end - start == 41 and text[start - 1 : start] == "\\" and text[start] in "nrt":
            start += 1  # "\\nKEY" in escaped JSON: the "n" belongs to the escape
        if (
            end - start == 40
            and text[start - 1 : start] not in ("_", "-")  # a 40-character piece of a longer token
            and text[end : end + 1] not in ("=", "_", "-")  # base64 padding, or again a longer token
            and looks_like_aws_secret(text[start:end])
        ):
            spans.append((start, end, REDACTED))
    return splice(text, spans) if spans else text


def _url(m: re.Match[str]) -> str:
    pw = m.group("pw")
    if pw.startswith(("<", "$", "{", "%", "[")) or pw.lower() in URL_PLACEHOLDERS:
        return m.group(0)  # redacted already, or documentation: user:[password]@, USER:PASSWORD@
    return f"://{m.group('user')}:{REDACTED}@"


_GLUED = re.compile(r"<REDACTED>(?:(?<=[\w.-]<REDACTED>)|(?=[\w.-]))")


def glued_to_redaction(text: str) -> bool:
    """True if a replacement in ``text`` touches a token character: what it was glued to may stand alone now."""
    return _GLUED.search(text) is not None


# Keys that are one token known by its issuer's prefix. They are also looked for written backwards
# (context.secret_disguises), where a run of token characters ends with one of TOKEN_PREFIXES reversed:
# keep the two lists in step.
TOKENS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_SK, _sk),
    (_GITHUB, _whole),
    (_SLACK, _whole),
    (_AWS_KEY_ID, _whole),
    (_JWT, _whole),
    (_STRIPE_SECRET, _sk),  # random keys mix digits and letters, "sk_live_preview_mode" does not
    (_STRIPE_RESTRICTED, _sk),
    (_GOOGLE, _whole),
    (_GITLAB, _whole),
    (_NPM, _whole),
    (_PYPI, _whole),
    (_SLACK_APP, _whole),
    (_SENDGRID, _whole),
    (_HUGGING_FACE, _hugging_face),
    (_STRIPE_WEBHOOK, _sk),
    (_SHOPIFY, _whole),
    (_DIGITALOCEAN, _whole),
    (_DATABRICKS, _whole),
    (_POSTMAN, _whole),
    (_GRAFANA, _whole),
    (_LINEAR, _whole),
    (_VAULT, _sk),
    (_AGE, _whole),
    (_GOOGLE_OAUTH, _whole),
    (_GOOGLE_ACCESS, _whole),
)
TOKEN_PREFIXES = (
    "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-",
    "AKIA", "ASIA", "eyJ", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "AIza", "glpat-", "npm_",
    "pypi-AgEIcHlwaS5vcmc", "xapp-", "SG.", "hf_", "whsec_", "shpat_", "shpss_", "shpca_", "shppa_", "dop_v1_",
    "doo_v1_", "dor_v1_", "dapi", "PMAK-", "glsa_", "glc_", "lin_api_", "hvs.", "hvb.", "AGE-SECRET-KEY-1",
    "GOCSPX-", "ya29.",
)

SHAPES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_PEM, _whole),
    (_URL_CREDS, _url),
    *TOKENS,
    (_SLACK_HOOK, _group),
    (_DISCORD_HOOK, _group),
    (_SENTRY_DSN, _group),
    (_AZURE_SAS, _group),
    (_NETRC, _netrc),
    (_PGPASS, _pgpass),
)


def redact_shapes(text: str) -> str:
    """``text`` with every shape above redacted, then the bare AWS secret keys."""
    for _ in range(3):
        before = text
        for pattern, repl in SHAPES:
            new = pattern.sub(repl, text)
            if new != text:  # a match kept as it was still makes a new object: keep the old one
                text = new
        # A token glued to one replaced after it ("AIza...pypi-...") only stands alone now.
        if text is before or not glued_to_redaction(text):
            break
    # After the named shapes, so a key id or token found above is not judged again.
    return _redact_aws_secrets(text)


def token_spans(text: str) -> list[tuple[int, int]]:
    """Where the TOKENS are in ``text`` (a run of token characters turned round), in one round.

    Each key found is masked with as many NULs, not replaced, so that offsets
    stay those of ``text``, and no later shape matches across it.
    """
    for pattern, judge in TOKENS:
        text = pattern.sub(lambda m: "\0" * len(m.group(0)) if judge(m) == REDACTED else m.group(0), text)
    return [m.span() for m in _MASKED.finditer(text)]


_MASKED = re.compile("\0+")

"""Replace values that look like secrets with ``<REDACTED>``.

This runs on every message written to history, including tool results of tens
of MB, so it is built to be linear and cheap on clean text:

* every pattern starts with a literal or a small set of first characters, which
  the regex engine scans for quickly, and quantifiers over long runs are
  possessive (``*+``, ``{m,n}+``) or bounded, so nothing backtracks
  catastrophically (docs/benchmarks.md, "Redaction speed"; every pattern
  that replaces something copies the whole text once, so text holding
  secrets of many kinds costs more than clean text);
* the ``NAME=value`` and prose-password rules run on a lower-cased copy of the
  text (case-insensitive regexes are several times slower in ``re``) and only
  when one of their keywords occurs at all (plain ``in`` checks);
* the one shape with no literal to anchor on, a bare 40-character AWS secret
  access key, is searched for as a literal in a translated copy of the text
  (see ``_KEY_CHARS``), not with a regex that would try every word boundary;
* passwords given to commands (``mysql -pPASS``, ``curl -u user:PASS``) are
  found by one pattern per command, each starting with the command's name;
* judgement calls (placeholder? type hint? count? random or a camelCase name?)
  are made in Python on the few matches rather than in the regexes.

tests/secret_corpus.py is the measure: 102 secrets in context, 88 look-alikes;
bench/redaction_speed.py times clean, secret-laden and pathological text.

The detectors follow detect-secrets (its AWS, Stripe, GitLab, npm and PyPI
prefixes; Shannon entropy with a threshold for keys without a prefix), but it
is not a dependency: it scans line by line through a plugin framework (a
Python call per line and plugin, millions for one large tool result), its
keyword regexes retry unbounded runs at every position of a long line, its AWS
plugin imports ``requests`` to verify keys online, and it has no rule for a
password given in prose ("my password is hunter2"), which this module adds.

Redaction is best effort and leans towards keeping what agents must read and
edit verbatim (source code, token counts, paths, hashes, API error texts).
``redact`` is idempotent because no rule touches a value that is already
``<REDACTED>``, each pass sees the text as the passes before it left it, and
the shape pass repeats when a replacement left a token standing alone.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from typing import Any, Callable

from context.identity_memo import IdentityMemo
from context.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

REDACTED = "<REDACTED>"


def _splice(text: str, spans: list[tuple[int, int, str]]) -> str:
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


# --- secret-ish names -------------------------------------------------------

# Scanning keywords, deliberately broad: wherever a secret-ish name occurs, one
# of these occurs in its lower-cased form. The lookaheads skip the look-alikes
# that fill this project's own data (max_tokens, tokens_used, token_count,
# tokenizer, author, authority) before they cost a Python call.
# Factored by first letter: `re` tries every branch at each position that starts one.
_KEYWORD = (
    r"p(?:assw(?:or)?d|wd|rivate[_-]?key)|secret|cred(?:ential|s?(?![a-z]))"
    r"|a(?:(?:pi|cc(?:ount|ess))[_-]?key|uth(?!or(?!iz)))"
    r"|token(?!s|iz|[_-]?(?:count|usage|limit|budget|len|size|num))"
)
# Cheap pre-check: one of these occurs (lower-cased) wherever _KEYWORD or _PROSE can match.
_KEYWORD_HINTS = ("pass", "pwd", "secret", "cred", "key", "token", "auth")
# The decision on a whole name, in snake_case. "auth" only counts at the end
# (auth, x_auth, authorization, auth_header), since auth_method, oauth_scope
# or auth_enabled name settings, not credentials. "creds" and "pwd" only as
# words of the name (DOCKER_CREDS, DB_PWD; not sacred, OLDPWD).
_SECRET_NAME = re.compile(
    r"passw(?:or)?d|(?<![a-z])pwd(?![a-z])|secret|credential|(?<![a-z])creds?(?![a-z])|(?:api|private|account|access)_?key"
    r"|token(?!s|iz|_?(?:count|usage|limit|budget|len|size|num))"
    r"|auth(?:orization|entication)?(?:_?(?:header|key|code|string|value|data|info))?$"
)
# Names that *describe* a secret rather than hold one: where it lives, what
# kind it is, how big it is, how it is looked up.
_NOT_SECRET_SUFFIXES = (
    "tokens", "count", "_id", "_ids", "_url", "_uri", "_endpoint", "_path", "_file", "_dir", "_type",
    "_name", "_len", "_length", "_size", "_limit", "_ttl", "_expires_in", "_expires_at", "_expiry",
    "_scope", "_scopes", "_env", "_var", "_response", "_prompt", "_help", "_hint", "_label", "_field",
    "_format", "_pattern", "_method", "_mode", "_enabled", "_required", "_provider", "_version",
    "_timeout", "_error", "_message", "_idx", "_index", "_pos", "_offset", "_start", "_end", "_kind",
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str) -> bool:
    """True if a key or variable called ``name`` probably holds a secret.

    Only the last part of an attribute path counts (``token.type`` is a type,
    ``settings.SECRET_KEY`` a secret); camelCase is read as snake_case.
    """
    last = name.strip("\"'`*- ").rsplit(".", 1)[-1]
    snake = _CAMEL.sub("_", last).lower().replace("-", "_")
    if not snake or snake == "pwd" or snake.endswith(_NOT_SECRET_SUFFIXES):
        return False  # PWD alone is the working directory (ODBC's Pwd= is _assign's, by its value)
    return _SECRET_NAME.search(snake) is not None


# --- token shapes (case-sensitive, searched in the text itself) -------------

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
# ~/.netrc: "machine HOST login USER password PASS", on one line or several
# (login required: "machine learning password is" is prose).
_NETRC = re.compile(
    r"machine[ \t]++\S++\s++login[ \t]++\S++(?:\s++(?:account|port)[ \t]++\S++)?+\s++password[ \t]++"
    r"(?P<s>[^\s\"'`]++)"
)

# A bare AWS secret access key is 40 characters of this alphabet with nothing
# around it to anchor a regex, and a regex trying every word boundary of a
# 50 MB text is slow, so _redact_aws_secrets maps the text to bytes in which
# every character of the alphabet is "a" and anything else " ", and a regex
# starting with 40 literal "a"s (a fast substring search in C) finds the runs
# of 40 or more. Each is judged by looks_like_aws_secret.
_KEY_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+")
_KEY_CHARS = bytes(ord("a") if chr(i) in _KEY_ALPHABET else ord(" ") for i in range(256))
_KEY_RUNS = re.compile(rb"a" * 40 + rb"a*+")  # a literal prefix: `re` searches for it in C


def _whole(_: re.Match[str]) -> str:
    return REDACTED


def _group(m: re.Match[str]) -> str:
    """The match with only its group "s" redacted; a placeholder ($PASS, <REDACTED>, PASS) stays."""
    if not _is_given(m.group("s")):
        return m.group(0)
    start, end = m.start("s") - m.start(), m.end("s") - m.start()
    return m.group(0)[:start] + REDACTED + m.group(0)[end:]


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
    for run in _KEY_RUNS.finditer(marks):
        start, end = run.span()
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
    return _splice(text, spans) if spans else text


_URL_PLACEHOLDERS = frozenset({"password", "passwd", "pass", "pwd", "secret", "token"})


def _url(m: re.Match[str]) -> str:
    pw = m.group("pw")
    if pw.startswith(("<", "$", "{", "%", "[")) or pw.lower() in _URL_PLACEHOLDERS:
        return m.group(0)  # redacted already, or documentation: user:[password]@, USER:PASSWORD@
    return f"://{m.group('user')}:{REDACTED}@"


_GLUED = re.compile(r"<REDACTED>(?:(?<=[\w.-]<REDACTED>)|(?=[\w.-]))")

_SHAPES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_PEM, _whole),
    (_URL_CREDS, _url),
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
    (_SLACK_HOOK, _group),
    (_DISCORD_HOOK, _group),
    (_SENTRY_DSN, _group),
    (_AZURE_SAS, _group),
    (_NETRC, _group),
)

# --- NAME=value (searched in the lower-cased text) ---------------------------

# Either a command-line flag (--api-key VALUE, --password=VALUE) or a name with
# a separator (KEY=v, KEY: v, "key": "v", key := v, 'key' => 'v', **Key**: v).
# Anchored on the keyword: the part of the name before it does not matter.
_VALUE_CHARS = r"""[^\s"'`,;&<>(){}\[\]\\|]"""
_ASSIGN = re.compile(
    rf"""
    (?P<name>                                           # top-level alternation of literals:
        -(?<![\w-]-)(?P<flag>)-?(?:[a-z0-9]++[_-]){{0,3}}(?:{_KEYWORD})   # lets `re` scan for
      | {_KEYWORD}                                      # their first characters only
    )
    (?P<rest>[\w.-]{{0,64}}+)                            # the rest of the name
    (?P<sep>(?(flag)(?:=|[ \t]++)|\\?["']?\**+[ \t]{{0,16}}+(?::=|=>|[:=])(?!=)[ \t]{{0,16}}+))
    (?:
        (?P<qpre>(?:[bfru]{{1,2}}(?=["']))?\\?)          # quoted: "v", b'v', \"v\" (in escaped JSON)
        (?:"(?P<dq>[^"\n]*+)|'(?P<sq>[^'\n]*+))
      |
        (?:(?P<scheme>bearer|basic|token|bot)[ \t]++)?+ # Authorization: Bearer v
        (?P<uv>{_VALUE_CHARS}++)
    )
    """,
    re.VERBOSE,
)
_SCHEME = re.compile(r"(?i)(?:bearer|basic|token|bot)[ \t]+")
# Words that are never credentials even under a secret-ish name.
_NOT_VALUES = frozenset(
    "true false null none nil undefined yes no on off enabled disabled required optional "
    "str string int integer bool boolean bytes float number object any".split()
)
_PLACEHOLDER_STARTS = ("<", "$", "{", "%", "*", "#", "...", "\u2026")  # <REDACTED>, ${VAR}, {x}, ****, # comment
_NUMBER = re.compile(r"-?\d{1,9}(?:\.\d+)?")
# Words without digits: in code, variables, parameters and types (token = tok,
# api_key=api_key, Token); in prose, words. A literal password has digits more often.
_IDENTIFIER = re.compile(r"[A-Za-z_]+")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # attribute paths
# "refresh_token", "ANTHROPIC_API_KEY": names of things, not secrets.
_SNAKE = re.compile(r"[A-Za-z]+(?:_[A-Za-z]+)+")


def _keep_value(name: str, value: str, sep: str, after: str, quoted: bool, config_line: bool) -> bool:
    """True for values that are not secrets even under a secret-ish name.

    ``after`` is the text right after the value, ``config_line`` says whether
    the name starts its line (YAML, .env) rather than sitting in prose.
    """
    if not value or value.startswith(_PLACEHOLDER_STARTS):
        return True
    lowered = value.lower()
    password = "passw" in name.lower() or "pwd" in name.lower()
    if lowered in _NOT_VALUES or lowered in (name.lower(), name.rsplit(".", 1)[-1].lower()):
        return True  # literals, and password=password
    if value.isupper() and lowered in _URL_PLACEHOLDERS:
        return True  # documentation: AccountKey=SECRET, Pwd=PASSWORD
    if name.lower().endswith("pwd") and value.startswith(("/", "~", "./", "../")):
        return True  # PWD=/work/main, OLDPWD=~: a directory, not ODBC's Pwd=
    if _NUMBER.fullmatch(value) and not password:
        return True  # "token: 1200" is a count; a numeric password is still a password
    if quoted:
        if value[0] in "),;]}>" or (len(value) < 3 and not password):
            return True  # the quote closed a string rather than opened one: ("Password: "); "|"
        # Prose, env var and field names and regexes are not credentials (a passphrase is):
        # "ANTHROPIC_API_KEY", ACCESS_KEY = 'AWSAccessKeyId'.
        named = (_IDENTIFIER.fullmatch(value) is not None and _INNER_UPPER.search(value) is not None
                 and any(h in lowered for h in _KEYWORD_HINTS))  # CamelCase naming a key; 'supersecret' is not
        return not password and (any(c.isspace() for c in value) or _SNAKE.fullmatch(value) is not None or named)
    # Unquoted: mostly protect source code, which the agents read and then edit verbatim.
    next_char = after[:1]
    colon = sep.strip(" \t\"'\\*") == ":"
    if next_char in ("(", "[") or _DOTTED.fullmatch(value):
        return True  # get_token(), os.environ["X"], self.token, options.oauth2_secret
    if colon and not sep[-1:].isspace() and (next_char == "}" or _IDENTIFIER.fullmatch(value)):
        return True  # f"{token:05d}", passwd:gid
    if not _IDENTIFIER.fullmatch(value):
        return False  # digits or punctuation: a literal
    if colon and not config_line:
        return True  # prose: "the token: it expires"
    if sep[-1:] in " \t" and after[:1] == " " and (after[1:2].isalpha() or after[1:2] == REDACTED[0]):
        return True  # prose: "Password: the one you chose", "--password options below", "-pwd is <REDACTED>"
    return (
        sep.startswith(("\"", "'", "\\"))  # {"token": tok}: JSON would have quoted a string
        or (sep[:1] in " \t" and sep[-1:] in " \t" and "=" in sep)  # token = tok
        or (value != lowered and value != value.upper())  # Token, SecretStr: type names
        or "_" in value
        or next_char in (",", ")")  # f(password=pw)
    )


def _assign(m: re.Match[str], text: str) -> str | None:
    """Replacement for one _ASSIGN match (found in the lower-cased text), or None to keep it."""

    def orig(group: str) -> str:  # groups are sliced from the original, case intact
        start, end = m.span(group)
        return text[start:end] if start >= 0 else ""

    flag = m.start("flag") >= 0
    start = m.start()
    if not flag:  # the match starts at the keyword; the name may start earlier (client_secret)
        while start > 0 and m.start() - start < 64 and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
            start -= 1
    name = text[start : m.end("rest")]
    if not is_secret_name(name) and not (name.lower() == "pwd" and orig("sep") in ("=", ":")):
        return None  # a bare Pwd only as ODBC writes it, with = and no spaces ("pwd: the directory" is prose)
    line_prefix = text[text.rfind("\n", max(0, start - 200), start) + 1 : start]
    config_line = line_prefix.strip(" \t-*>{,([\"'") in ("", "export")
    sep = orig("sep")
    head = text[m.start() : m.end("sep")]
    if m.start("qpre") >= 0:
        value = orig("dq") or orig("sq")
        # \"abc\": the backslash escaping the closing quote is not part of the value.
        tail = "\\" if orig("qpre").endswith("\\") and value.endswith("\\") else ""
        value = value[: len(value) - len(tail)]
        opening = text[m.start("qpre") : m.end("qpre") + 1]
        scheme = _SCHEME.match(value)
        if scheme:  # "Authorization": "Bearer abc" keeps its scheme word; the credential goes
            opening += scheme.group(0)
            value = value[scheme.end() :]
            if not value or value.startswith(_PLACEHOLDER_STARTS):
                return None  # 'Bearer ' + token, "Basic <username>:<password>"
        elif _keep_value(name, value, sep, "", True, config_line):
            return None
        return head + opening + REDACTED + tail
    value = orig("uv")
    if flag and value.startswith("-"):
        return None  # `--token --verbose`: the next flag, not a value
    if _keep_value(name, value, sep, text[m.end() : m.end() + 2], False, config_line):
        return None
    return head + text[m.end("sep") : m.start("uv")] + REDACTED


# --- passwords given to commands as short flags -----------------------------

# Each command's own flag: mysql's -pPASS (only glued: "-p db" prompts, and db
# is the database), sshpass -p, redis-cli -a, docker/podman login -p and curl
# -u USER:PASS (only PASS goes). Long flags (--password=x) are _ASSIGN's. One
# pattern per command, each starting with a literal that `re` scans for fast;
# a command runs to the end of its line ("\" continuations included) or to |;&.
_ARGS = r"(?P<args>(?:[^\n|;&\\]++|\\(?:\r?\n|.))*+)"
_FLAG_VALUE = r"""(?:'(?P<sq>[^'\n]*+)'|"(?P<dq>[^"\n]*+)"|(?P<uv>[^\s'"`]++))"""


def _command(name: str, flag: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    return re.compile(rf"{name}(?![\w-]){_ARGS}"), re.compile(rf"(?<=[ \t]){flag}{_FLAG_VALUE}")


_COMMANDS = (
    _command(r"mysql(?<![\w.-]mysql)\w*+", "-p"),
    _command(r"mariadb(?<![\w.-]mariadb)[\w-]*+", "-p"),
    _command(r"sshpass(?<![\w.-]sshpass)", r"-p[ \t]*+"),
    _command(r"redis-cli(?<![\w.-]redis-cli)", r"-a[ \t]++"),
    _command(r"login(?<=(?:docker|podman) login)", r"-p[ \t]++"),
    _command(r"curl(?<![\w.-]curl)", r"(?:-u[ \t]*+|--user[ \t=]++)"),
)


def _is_given(value: str) -> bool:
    """False for what documentation puts where a password goes ($PASS, <password>, -pPASSWORD) and for prose
    ("sshpass -p and", "-p,")."""
    lowered = value.lower()
    return (
        any(c.isalnum() for c in value)
        and not value.startswith(_PLACEHOLDER_STARTS)
        and REDACTED not in value
        and lowered not in _URL_PLACEHOLDERS
        and lowered not in _PROSE_WORDS
    )


def _redact_command_passwords(text: str) -> str:
    spans: list[tuple[int, int, str]] = []
    for command, flag in _COMMANDS:
        curl = command is _COMMANDS[-1][0]
        for found in command.finditer(text):
            for value in flag.finditer(text, found.start("args"), found.end("args")):
                start, end = value.span(value.lastgroup)  # the one of sq, dq and uv that matched
                if curl:  # curl -u USER:PASS
                    colon = text.find(":", start, end)
                    start = colon + 1 if colon >= 0 else end
                if _is_given(text[start:end]):
                    spans.append((start, end, REDACTED))
    return _splice(text, spans) if spans else text


# --- passwords in prose (searched in the lower-cased text) -----------------

# "my password is hunter2", "pwd was s3cr3t!", "the passphrase is correct horse".
# Only the password family: "the token is ..." or "the key is ..." name hashes
# and ids far too often for a prose rule, and their real formats are shapes above.
# The keyword is a literal (`re` scans for its "p"); the word before it is
# checked in Python (_prose).
_PROSE = re.compile(
    r"""
    # not after a letter or digit (getpwd, bypassword): checked here, so that such a
    # match cannot swallow a real one after it ("xpassword for ... db_password is x")
    (?P<kw>p(?<![^\W_]p)(?:ass(?:w(?:or)?d|phrase|code)|wd))
    # "for the admin account", "on db-1": up to four words, fewest first (at most 8 tries)
    (?:[ \t]++(?P<for>for|of|on)(?:[ \t]++[\w.@'-]++){1,4}?)?
    (?:'s|[ \t]++(?:is|was|has[ \t]been|will[ \t]be|should[ \t]be)
        (?:[ \t]++(?:now|still|set[ \t]to|changed[ \t]to))?+
      |[ \t]++(?:set|changed)[ \t]++to
      |(?(for)[ \t]*+:|(?!)))                            # "password for the VPN: x" (a bare colon is _ASSIGN's)
    [ \t]++
    # a lookahead, so that a keyword inside the value ("password is password is x") is still found
    (?=(?P<q>["'`])(?P<qv>[^"'`\n]{1,256}+)(?P=q)|(?P<uv>\S{1,256}+))
    """,
    re.VERBOSE,
)
# Further words of a passphrase ("correct horse battery staple"), up to the end of the clause.
_MORE_WORDS = re.compile(r"(?:[ \t]++[a-z]++(?![\w'-])){1,7}+")
# Words that make "passphrase is ..." a sentence about the passphrase rather than the passphrase.
_PROSE_WORDS = frozenset(
    "a an the not never no too now still set stored kept saved hashed encrypted required missing empty invalid "
    "wrong incorrect optional unset in on at of for to from with by and or but is was be been are that this it "
    "its your my our their his her used only also always being same different long short".split()
)
# Hash and encoding names: "the password is sha256-hashed", not a password.
_TECH_WORDS = ("sha1", "sha256", "sha512", "md5", "base64", "utf8", "utf-8", "bcrypt", "argon2", "pbkdf2")
_PLAIN_WORDS = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*")
_INNER_UPPER = re.compile(r"[a-z][A-Z]")


# A pure judgement of a short string (at most 256 characters): a text that repeats one phrase ("password is
# x" in a loop, a log) asks about the same value again and again.
@functools.lru_cache(maxsize=1024)
def _prose_value_is_secret(value: str, quoted: bool) -> bool:
    """True if ``value``, said to be a password in prose, looks like one rather than like a word."""
    lowered = value.lower()
    if not value or value.startswith(_PLACEHOLDER_STARTS) or REDACTED.lower() in lowered:
        return False  # ${DB_PASSWORD}, <REDACTED>: redacted already or documentation
    if lowered in _NOT_VALUES:
        return False  # "password is None", "password is required"
    if quoted:
        # 'letmein' was quoted to be given verbatim; in `"password is ", x` the quote closed a string.
        return value == value.strip() and value[0] not in "),;]}>+"
    if value.startswith(("/", "~", "./", "../")) or "://" in value or lowered.startswith(_TECH_WORDS):
        return False  # `pwd is /work/main`, URLs (their credentials are handled above), hashing
    if value.isdigit():
        return len(value) >= 4  # "is 123456" is a password, "is 8 characters" a length
    if _PLAIN_WORDS.fullmatch(value):
        return _INNER_UPPER.search(value) is not None  # "HunTer" yes, "never", "write-only" no
    return any(c.isalpha() or c.isdigit() for c in value)  # hunter2, s3cr3t!, Tr0ub4dor&3; not "--"


def _prose(m: re.Match[str], text: str, lowered: str) -> tuple[int, int] | None:
    """The span of the password in one _PROSE match, or None when it is prose after all."""
    if m.start("qv") >= 0:
        start, end = m.span("qv")
        return (start, end) if _prose_value_is_secret(text[start:end], True) else None
    start, end = m.span("uv")
    value = text[start:end].rstrip(".,;:?)]}\"'`")
    end = start + len(value)
    if m.group("kw") == "passphrase" and value.isalpha() and end == m.end("uv"):
        more = _MORE_WORDS.match(lowered, end)
        words = [value.lower(), *(more.group(0).split() if more else ())]
        if len(words) >= 2 and not _PROSE_WORDS.intersection(words):
            return start, more.end() if more else end  # passphrases are words by design
    return (start, end) if _prose_value_is_secret(value, False) else None


def _lower(text: str) -> str:
    # str.lower() keeps every index except for U+0130, which becomes two code
    # points; swapping it for "I" first keeps match offsets valid for `text`.
    return text.lower() if text.isascii() else text.replace("\u0130", "I").lower()


def _redact_names(text: str) -> str:
    """Redact the values of secret-ish names: passwords in prose (_PROSE), then assignments (_ASSIGN).

    One pass after the other, so each sees what the one before left, as a
    second call of ``redact`` would; that keeps ``redact`` idempotent. Prose
    first: a prose value is judged by itself alone, while _keep_value looks at
    the text after an assignment, which must not change after it.
    """
    lowered = _lower(text)
    if not any(h in lowered for h in _KEYWORD_HINTS):
        return text
    if "pass" in lowered or "pwd" in lowered:
        prose = [(*span, REDACTED) for m in _PROSE.finditer(lowered) if (span := _prose(m, text, lowered))]
        if prose:
            text = _splice(text, prose)
            # The same spans in the lower-cased copy: far cheaper than lowering tens of MB again.
            lowered = _splice(lowered, [(start, end, _lower(new)) for start, end, new in prose])
    spans = [(m.start(), m.end(), new) for m in _ASSIGN.finditer(lowered) if (new := _assign(m, text)) is not None]
    return _splice(text, spans) if spans else text


# --- public API -------------------------------------------------------------


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
    for _ in range(3):
        before = text
        for pattern, repl in _SHAPES:
            new = pattern.sub(repl, text)
            if new != text:  # a match kept as it was still makes a new object: keep the old one
                text = new
        # A token glued to one replaced after it ("AIza...pypi-...") only stands alone now.
        if text is before or not _GLUED.search(text):
            break
    # After the named shapes, so a key id or token found above is not judged again.
    text = _redact_aws_secrets(text)
    text = _redact_command_passwords(text)
    # Last, so values already redacted above are recognised and left alone.
    return _redact_names(text)


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


__all__ = ["REDACTED", "is_secret_name", "redact", "redact_message", "redact_value"]

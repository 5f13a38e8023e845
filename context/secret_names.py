"""Secrets by what names them: ``NAME=value`` for secret-ish names, flags of commands, passwords in prose.

* the ``NAME=value`` and prose-password rules run on a lower-cased copy of the
  text (case-insensitive regexes are several times slower in ``re``) and only
  when one of their keywords occurs at all (plain ``in`` checks);
* passwords given to commands (``mysql -pPASS``, ``curl -u user:PASS``) are
  found by one pattern per command, each starting with the command's name;
* judgement calls (placeholder? type hint? count? code or a literal?) are
  made in Python on the few matches rather than in the regexes.

detect-secrets has no rule for a password given in prose ("my password is
hunter2"), and its keyword regexes retry unbounded runs at every position of a
long line; these rules are anchored on the keyword and bounded.
"""

from __future__ import annotations

import functools
import re

from context.secret_words import (
    NOT_VALUES,
    PLACEHOLDER_STARTS,
    PROSE_WORDS,
    REDACTED,
    URL_PLACEHOLDERS,
    is_given,
    lower,
    splice,
)

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
_NUMBER = re.compile(r"-?\d{1,9}(?:\.\d+)?")
# Words without digits: in code, variables, parameters and types (token = tok,
# api_key=api_key, Token); in prose, words. A literal password has digits more often.
_IDENTIFIER = re.compile(r"[A-Za-z_]+")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # attribute paths
# "refresh_token", "ANTHROPIC_API_KEY": names of things, not secrets.
_SNAKE = re.compile(r"[A-Za-z]+(?:_[A-Za-z]+)+")


def _keep_value(
    name: str, value: str, sep: str, after: str, quoted: bool, config_line: bool, file_line: bool = False
) -> bool:
    """True for values that are not secrets even under a secret-ish name.

    ``after`` is the text right after the value, ``config_line`` says whether
    the name starts its line (YAML, .env) rather than sitting in prose, and
    ``file_line`` whether the line is one of a key=value file (_file_line).
    """
    if not value or value.startswith(PLACEHOLDER_STARTS):
        return True
    lowered = value.lower()
    password = "passw" in name.lower() or "pwd" in name.lower()
    if lowered in NOT_VALUES or lowered in (name.lower(), name.rsplit(".", 1)[-1].lower()):
        return True  # literals, and password=password
    if value.isupper() and lowered in URL_PLACEHOLDERS:
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
    if file_line:
        # A value in .env, .ini, "PASSWD: x" is a string whatever it looks like (Summer, hunter_two), where
        # in code the same word would be a variable or a type; only a constant it names stays (API_KEY = X_KEY).
        return sep != "=" and value.isupper() and _SNAKE.fullmatch(value) is not None
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


def _file_line(line_prefix: str, name: str, sep: str, line_rest: str) -> bool:
    """True if NAME and its value make a whole line of a key=value file (.env, .ini, .properties, YAML).

    Code writes names that way too, indented (kwargs, class fields such as
    ``DB_PASSWORD: SecretStr``) or with spaces (``token = Token``), so only
    an unindented line counts: ``name=value`` with no spaces, or an upper-case
    NAME with ``: value`` or `` = value``; and the value ends the line (a
    ``#`` comment may follow).
    """
    if not (line_prefix in ("", "export ") or line_prefix.lstrip(" \t") == "- "):  # "- KEY=v" in compose
        return False
    if line_rest and not line_rest.startswith("#"):
        return False
    return sep == "=" or (name == name.upper() and sep.strip(" \t") in (":", "=") and sep[-1:] in (" ", "\t"))


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
    # At most 200 characters back: with no newline there, a slice from the text's start would make one long
    # line of many assignments quadratic.
    window = max(0, start - 200)
    line_prefix = text[(text.rfind("\n", window, start) + 1) or window : start]
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
            if not value or value.startswith(PLACEHOLDER_STARTS):
                return None  # 'Bearer ' + token, "Basic <username>:<password>"
        elif _keep_value(name, value, sep, "", True, config_line):
            return None
        return head + opening + REDACTED + tail
    value = orig("uv")
    if flag and value.startswith("-"):
        return None  # `--token --verbose`: the next flag, not a value
    line_rest = text[m.end() : m.end() + 256].partition("\n")[0].strip()
    file_line = not flag and _file_line(line_prefix, name, sep, line_rest)
    if _keep_value(name, value, sep, text[m.end() : m.end() + 2], False, config_line, file_line):
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


def redact_command_passwords(text: str) -> str:
    spans: list[tuple[int, int, str]] = []
    for command, flag in _COMMANDS:
        curl = command is _COMMANDS[-1][0]
        for found in command.finditer(text):
            for value in flag.finditer(text, found.start("args"), found.end("args")):
                start, end = value.span(value.lastgroup)  # the one of sq, dq and uv that matched
                if curl:  # curl -u USER:PASS
                    colon = text.find(":", start, end)
                    start = colon + 1 if colon >= 0 else end
                if is_given(text[start:end]):
                    spans.append((start, end, REDACTED))
    return splice(text, spans) if spans else text


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
    if not value or value.startswith(PLACEHOLDER_STARTS) or REDACTED.lower() in lowered:
        return False  # ${DB_PASSWORD}, <REDACTED>: redacted already or documentation
    if lowered in NOT_VALUES:
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
        if len(words) >= 2 and not PROSE_WORDS.intersection(words):
            return start, more.end() if more else end  # passphrases are words by design
    return (start, end) if _prose_value_is_secret(value, False) else None


def redact_names(text: str) -> str:
    """Redact the values of secret-ish names: passwords in prose (_PROSE), then assignments (_ASSIGN).

    One pass after the other, so each sees what the one before left, as a
    second call of ``redact`` would; that keeps ``redact`` idempotent. Prose
    first: a prose value is judged by itself alone, while _keep_value looks at
    the text after an assignment, which must not change after it.
    """
    lowered = lower(text)
    if not any(h in lowered for h in _KEYWORD_HINTS):
        return text
    if "pass" in lowered or "pwd" in lowered:
        prose = [(*span, REDACTED) for m in _PROSE.finditer(lowered) if (span := _prose(m, text, lowered))]
        if prose:
            text = splice(text, prose)
            # The same spans in the lower-cased copy: far cheaper than lowering tens of MB again.
            lowered = splice(lowered, [(start, end, lower(new)) for start, end, new in prose])
    spans = [(m.start(), m.end(), new) for m in _ASSIGN.finditer(lowered) if (new := _assign(m, text)) is not None]
    return splice(text, spans) if spans else text


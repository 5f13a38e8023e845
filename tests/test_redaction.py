"""Redaction: secret shapes go, names and look-alikes stay, and it scales."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    assistant,
    user,
)
from context.redaction import REDACTED, is_secret_name, redact, redact_message, redact_value

R = REDACTED
ANTHROPIC = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcdEFGH"
OPENAI = "sk-Abc123Def456Ghi789Jkl012Mno345Pqr678Stu901"
OPENAI_PROJ = "sk-proj-Abc123Def456Ghi789Jkl012_Mno345-Pqr678"
GHP = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
GH_PAT = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV"
SLACK = "xoxb-1234567890-0987654321-abcdefghijklmnop"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi\n"
    "Z1BjP5CE/Wm/Rr500P\n"
    "-----END RSA PRIVATE KEY-----"
)

SECRETS = [
    # (text, expected after redaction)
    (f"ANTHROPIC_API_KEY={ANTHROPIC}", f"ANTHROPIC_API_KEY={R}"),
    (f"using key {ANTHROPIC} now", f"using key {R} now"),
    (f"client = OpenAI(api_key='{OPENAI}')", f"client = OpenAI(api_key='{R}')"),
    (f"key: {OPENAI_PROJ}.", f"key: {R}."),
    (f"{AWS_ID} is the id", f"{R} is the id"),
    ("ASIAY34FZKBOKMUTVV7A", R),
    (f"aws_secret_access_key = {AWS_SECRET}", f"aws_secret_access_key = {R}"),
    (f'"SecretAccessKey": "{AWS_SECRET}",', f'"SecretAccessKey": "{R}",'),
    (f"git clone https://{GHP}@github.com/o/r", f"git clone https://{R}@github.com/o/r"),
    (f"GH_PAT {GH_PAT}", f"GH_PAT {R}"),
    (f"slack({SLACK})", f"slack({R})"),
    (f"cookie jwt={JWT}; path=/", f"cookie jwt={R}; path=/"),
    (f"before\n{PEM}\nafter", f"before\n{R}\nafter"),
    ('{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADAN\\nBgkqhkiG9w0==\\n-----END PRIVATE KEY-----\\n"}',
     f'{{"private_key": "{R}\\n"}}'),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n[truncated]",
     f"{R}\n[truncated]"),
    ("Authorization: Bearer abc.def-ghi_123", f"Authorization: Bearer {R}"),
    ('curl -H "Authorization: Basic dXNlcjpwYXNz==" https://x', f'curl -H "Authorization: Basic {R}" https://x'),
    ('{"Authorization": "Bearer tok_123abc"}', f'{{"Authorization": "Bearer {R}"}}'),
    ("proxy-authorization: token abc123", f"proxy-authorization: token {R}"),
    ("login?user=bob&password=hunter2&next=/", f"login?user=bob&password={R}&next=/"),
    ("passwd: s3cr3t", f"passwd: {R}"),
    ("Password: 123456", f"Password: {R}"),
    ('"api_key": "abcd1234"', f'"api_key": "{R}"'),
    ("{'apiKey': 'abcd1234'}", f"{{'apiKey': '{R}'}}"),
    ('{\\"password\\": \\"abc\\"}', f'{{\\"password\\": \\"{R}\\"}}'),
    ("DATABASE_URL=postgres://admin:s3cretpw@db:5432/app", f"DATABASE_URL=postgres://admin:{R}@db:5432/app"),
    ("redis://:p4ss@localhost:6379/0", f"redis://:{R}@localhost:6379/0"),
    ("export GITHUB_TOKEN=abc123", f"export GITHUB_TOKEN={R}"),
    ('export OPENAI_API_KEY="not-a-real-key"', f'export OPENAI_API_KEY="{R}"'),
    ("SECRET_KEY='django-insecure-xyz'\nDEBUG=true", f"SECRET_KEY='{R}'\nDEBUG=true"),
    ("DB_PASSWORD = hunter2", f"DB_PASSWORD = {R}"),
    ("client_secret: abc", f"client_secret: {R}"),
    ("MY_CREDENTIALS=user:pw", f"MY_CREDENTIALS={R}"),
    ("auth_key := x9y8z7", f"auth_key := {R}"),
    ("private_key => 'k3y-abc'", f"private_key => '{R}'"),
    ("db:\n  password: letmein\n", f"db:\n  password: {R}\n"),
    ("PGPASSWORD=postgres psql -h db", f"PGPASSWORD={R} psql -h db"),
    ("connect(password=b'hunter2')", f"connect(password=b'{R}')"),
    ("**Password**: hunter2", f"**Password**: {R}"),
    ("tool --api-key abc123 --verbose", f"tool --api-key {R} --verbose"),
    ("tool --password=hunter2", f"tool --password={R}"),
    ("x-api-key: 0123abcd", f"x-api-key: {R}"),
    ('token = "abc"  # hard-coded', f'token = "{R}"  # hard-coded'),
]


@pytest.mark.parametrize(("text", "expected"), SECRETS)
def test_secret_shapes_are_redacted_and_names_kept(text: str, expected: str) -> None:
    assert redact(text) == expected


NEAR_MISSES = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "id 123e4567-e89b-12d3-a456-426614174000",
    "token count: 1200",
    "max_tokens=4000",
    "max_tokens: 4000",
    '"input_tokens": 1234, "output_tokens": 56',
    "tokens_used=1200",
    '"cache_read_input_tokens": 0, "cache_creation_input_tokens": 12',
    "token_count=3 --max-tokens 4000 --token-budget 100",
    "token: 1200",
    '{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4'
    '2mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="}',
    "Please reset your password using the link below.",
    "The password is never logged; tokens are counted, not stored.",
    "cat /home/user/.ssh/id_rsa.pub",
    "pip install scikit-learn sk-learn",
    "task-1234 risk-assessment-for-the-quarterly-report-2024",
    "the author: Jane Doe, authority: none",
    "tokenizer: cl100k_base",
    "token_url: https://example.com/oauth/token",
    '"password": null, "token": "", "secret": "${SECRET}", "api_key": "<your-key>"',
    "export GITHUB_TOKEN=$(gh auth token)",
    "token = get_token()",
    'api_key = os.environ["ANTHROPIC_API_KEY"]',
    "def login(token: str, password: Optional[str] = None, api_key: SecretStr | None = None): ...",
    "login(user, password=password)",
    "self.token = self._auth.token",
    "Authorization: Bearer <REDACTED>",
    "headers = {'Authorization': 'Bearer ' + access_token}",
    'password = ask_password("Password: ")',
    ":param token: the token returned by set()",
    '{"client_secret": client_secret, "scope": scope}',
    "credentials = creds_file",
    "Token.Comment: '#aaaaaa', token.type = 'strong_open'",
    'ENV_API_KEY = "ANTHROPIC_API_KEY"',
    "lastTokenIdx = -2",
    'glyph = f"cid{self.cur_token:05d}"',
    "# The --username and --password options can't be used here",
    "oauth_scope: Space-separated OAuth scopes",
    "'secret': options.oauth2_secret or default,",
    "git@github.com:org/repo.git https://host:8080/path@v2",
    "value == other_secret",
    "AKIA is a prefix, ASIA a continent",
    "",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_untouched(text: str) -> None:
    out = redact(text)
    assert out == text
    assert out is text  # the clean path hands back the same object


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("password", True), ("DB_PASSWD", True), ("api_key", True), ("apiKey", True), ("x-api-key", True),
        ("client_secret", True), ("GITHUB_TOKEN", True), ("access_token", True), ("Authorization", True),
        ("private_key", True), ("aws_credentials", True), ("auth", True),
        ("DB_PWD", True), ("DOCKER_CREDS", True), ("AccountKey", True), ("SharedAccessKey", True),
        ("PWD", False), ("OLDPWD", False), ("creds_file", False), ("sacred", False), ("SharedAccessKeyName", False),
        ("max_tokens", False), ("tokens", False), ("input_tokens", False), ("token_count", False),
        ("tokens_used", False), ("tokenizer", False), ("author", False), ("authority", False),
        ("token_url", False), ("private_key_path", False), ("name", False), ("", False),
    ],
)
def test_is_secret_name(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_redact_value_recurses_and_keeps_counts() -> None:
    data = {
        "scenario": "retail",
        "max_tokens": 4000,
        "usage": {"input_tokens": 12, "tokens": 5, "token_count": 3},
        "api_key": "plain-looking",
        "password": "",
        "token": None,
        "headers": [{"Authorization": "Bearer abc123"}, ("curl", "-H", "Authorization: Bearer abc123")],
        "env": {"GITHUB_TOKEN": 42, "note": f"key={OPENAI}"},
    }
    out = redact_value(data)
    assert out["scenario"] == "retail"
    assert out["max_tokens"] == 4000
    assert out["usage"] is data["usage"]  # unchanged subtrees are shared
    assert out["api_key"] == R
    assert out["password"] == ""
    assert out["token"] is None
    assert out["headers"] == [{"Authorization": R}, ("curl", "-H", f"Authorization: Bearer {R}")]
    assert out["env"] == {"GITHUB_TOKEN": 42, "note": f"key={R}"}
    assert data["api_key"] == "plain-looking"  # input not mutated


def test_redact_value_identity_when_clean() -> None:
    data = {"a": [1, "two", {"max_tokens": 3}], "b": ("x",), "c": 1.5}
    assert redact_value(data) is data
    assert redact_value(redact_value({"api_key": "x"})) == {"api_key": R}


def test_redact_message_identity_when_clean() -> None:
    msg = assistant(
        ThinkingBlock(thinking="plan", signature="sig"),
        "hello, max_tokens=4000",
        ToolUseBlock(id="t1", name="Bash", input={"command": "ls -la"}),
    )
    assert redact_message(msg) is msg
    result = user(
        ToolResultBlock(
            tool_use_id="t1",
            content=[TextBlock(text="ok"), ImageBlock(source={"type": "base64", "data": "iVBORw0KGgo"})],
        )
    )
    assert redact_message(result) is result


def test_redact_message_rewrites_every_block_kind_but_thinking() -> None:
    image = ImageBlock(source={"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo"})
    clean = TextBlock(text="nothing here")
    msg = assistant(
        ThinkingBlock(thinking=f"the key is {OPENAI}", signature="sig"),
        f"export API_KEY={ANTHROPIC}",
        clean,
        ToolUseBlock(id="t1", name="Bash", input={"command": f"curl -H 'Authorization: Bearer {JWT}'", "n": 1}),
    )
    msg = Message(role="assistant", content=msg.content, usage=Usage(input_tokens=10))
    out = redact_message(msg)
    assert out is not msg and out.usage == msg.usage
    thinking, text, kept, tool = out.content
    # Thinking is signed over its text: one with a secret is kept redacted and withheld (the assembler never
    # sends it again, context/prefix.py) rather than sent rewritten under its old signature.
    assert isinstance(thinking, ThinkingBlock) and thinking.withheld and thinking.signature == "sig"
    assert thinking.thinking == f"the key is {R}"
    clean_thinking = ThinkingBlock(thinking="plan the samples", signature="sig2")
    assert redact_message(assistant(clean_thinking)).content[0] is clean_thinking  # a clean one: exactly as is
    assert isinstance(text, TextBlock) and text.text == f"export API_KEY={R}"
    assert kept is clean
    assert isinstance(tool, ToolUseBlock) and tool.input == {"command": f"curl -H 'Authorization: Bearer {R}'", "n": 1}
    assert OPENAI not in json.dumps(out.stored) and ANTHROPIC not in out.canonical and JWT not in out.canonical

    results = user(
        ToolResultBlock(tool_use_id="t1", content=f"password={GHP}", is_error=True),
        ToolResultBlock(tool_use_id="t2", content=[TextBlock(text=f"token: {SLACK}"), image]),
    )
    out = redact_message(results)
    first, second = out.content
    assert isinstance(first, ToolResultBlock) and first.content == f"password={R}" and first.is_error
    assert isinstance(second, ToolResultBlock) and isinstance(second.content, list)
    assert second.content[0] == TextBlock(text=f"token: {R}")
    assert second.content[1] is image
    # the new block's cached token count belongs to the new text
    assert first.tokens != 0 and first.text == f"password={R}"


@pytest.mark.slow  # a 50 MB payload
def test_fifty_megabytes() -> None:
    # Mostly clean text full of look-alikes, with a few secrets at known places.
    chunk = "\n".join(NEAR_MISSES[:-1]) + "\n" + "lorem ipsum dolor sit amet " * 400 + "\n"
    pieces, expected = [], []
    n_chunks = 50_000_000 // len(chunk) + 1
    planted = {
        n_chunks // 7: (f"ANTHROPIC_API_KEY={ANTHROPIC}", f"ANTHROPIC_API_KEY={R}"),
        n_chunks // 2: ("Authorization: Bearer abc.def-ghi_123", f"Authorization: Bearer {R}"),
        n_chunks - 1: (f"before\n{PEM}\nafter", f"before\n{R}\nafter"),
    }
    for i in range(n_chunks):
        pieces.append(chunk)
        expected.append(chunk)
        if i in planted:
            text, redacted = planted[i]
            pieces.append(text + "\n")
            expected.append(redacted + "\n")
    big = "".join(pieces)
    assert len(big) >= 50_000_000
    out = redact(big)
    assert out == "".join(expected)
    assert out.count(R) == len(planted) + big.count(R)


def test_a_clean_text_comes_back_as_the_callers_own_object_when_an_equal_one_was_redacted_before() -> None:
    first, second = "".join(["a plain ", "line"]), "".join(["a plain ", "line"])
    assert first is not second and redact(first) is first and redact(second) is second
    secret, again = "".join(["key ", ANTHROPIC]), "".join(["key ", ANTHROPIC])
    assert redact(secret) == redact(again) == f"key {R}"


FRAGMENTS = [text for text, _ in SECRETS] + NEAR_MISSES + [
    ANTHROPIC, OPENAI, GHP, GH_PAT, SLACK, AWS_ID, JWT, PEM, "password", "token", "Bearer", "-", "--", "=", ":",
    '"', "'", "\\", "\n", " ", R, "sk-", "AKIA", "://", "@", "-----BEGIN PRIVATE KEY-----", "İ",
    # the bare AWS secret and prose rules: values glued to keys, quotes and redactions
    AWS_SECRET, AWS_SECRET[:39], "+", "/", "\\n", "my password is ", "passphrase is ", "pwd was ", "hunter2",
    "correct horse", "password's ", "`", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "AIzaSyBn7Ck1_Xq4mZ8pL2vT9wR6yU3sE0aD5fG",
    # the command, URL and prose-with-"for" rules: flags, quotes and values glued to each other
    "mysql ", "-p", "-pS3cr3t9", " -u ", "admin:", "curl ", "sshpass -p ", "redis-cli -a ", "docker login -p ", "'",
    "password for the vpn", " is ", ": ", "AccountKey=", "Pwd=", "PWD=/work", "DOCKER_CREDS=", ";",
    "https://hooks.slack.com/services/T0ABCDEF12/B0ABCDEF34/abcdEFGHijklMNOP1234", "://0123456789abcdef0123456789abcdef@",
    "machine h login u password ", "sig=", "?", "hf_abcdEFGHijklMNOPqrstUVWXyzABCDefgh",
]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=12))
def test_redact_is_idempotent(parts: list[str]) -> None:
    once = redact("".join(parts))
    assert redact(once) == once


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([ANTHROPIC, OPENAI, GHP, GH_PAT, SLACK, AWS_ID, AWS_SECRET, JWT]),
                min_size=1, max_size=5),
       st.lists(st.sampled_from(["hello", "max_tokens=4000", "the token", "x"]), max_size=5))
def test_embedded_keys_never_survive(keys: list[str], words: list[str]) -> None:
    text = " ".join(words + keys + words)
    out = redact(text)
    for key in keys:
        assert key not in out

"""A corpus of secrets in the places they turn up, and of look-alikes that must survive.

Every secret is synthetic: the well-known documentation examples (AWS's
``...EXAMPLE`` keys, jwt.io's token) or a value that ``fake`` builds from a
fixed stride through an alphabet, in the issuer's prefix, length and alphabet.
None was ever issued. Each positive names the one secret in its text; the
tests check that exactly that part becomes ``<REDACTED>``. Each negative must
come back unchanged. ``mask`` is what a failure shows instead of a secret.

Used by tests/test_secret_corpus.py (figures and per-entry checks) and by
bench/redaction_speed.py (look-alike text at scale).
"""

from __future__ import annotations

import base64
import hashlib
import string
from typing import Callable, NamedTuple

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
BASE64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def fake(n: int, alphabet: str = ALNUM, seed: int = 0) -> str:
    """``n`` characters of ``alphabet`` taken with a stride of 11: mixed, repeatable, never issued."""
    return "".join(alphabet[(seed + 11 * i) % len(alphabet)] for i in range(n))


def mask(secret: str) -> str:
    """What a failure message shows for ``secret``: its first two characters and its length."""
    return f"«{secret[:2]}…{len(secret)} chars»"


def masked(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, mask(secret))
    return text


class Secret(NamedTuple):
    label: str  # what it is and where: the test id (never the secret)
    text: str
    secret: str  # exactly as it appears in ``text``, once


def _in(label: str, template: str, secret: str) -> Secret:
    """A Secret whose text is ``template`` with ``{S}`` standing for the secret."""
    return Secret(label, template.replace("{S}", secret), secret)


# --- the secrets -----------------------------------------------------------

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_SECRET_2 = "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"
AWS_SECRET_3 = "9drTJvcXLB89EXAMPLELB8923FB892xMFI+RaNdo"  # starts with a digit, has a "+"
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
SLACK_HOOK = f"T0{fake(9, string.ascii_uppercase + string.digits, 3)}/B0{fake(9, string.ascii_uppercase, 5)}/{fake(24)}"
AZURE_KEY = fake(86, BASE64, 1) + "=="
AZURE_SB_KEY = fake(43, BASE64, 2) + "="
AZURE_SIG = fake(43, ALNUM, 4) + "%3D"
SENDGRID = f"SG.{fake(22, URLSAFE, 3)}.{fake(43, URLSAFE, 9)}"
HF = "hf_" + fake(34, string.ascii_letters, 6)
SENTRY_KEY = fake(32, HEX, 5)
FAKE_PW = "Fk3-pw!" + fake(6, ALNUM, 8)  # a password that is plainly one (digits, symbols)


def _pem(kind: str, body_lines: int = 2) -> str:
    body = "\n".join(fake(64, BASE64, i) for i in range(body_lines))
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----"


ANTHROPIC_KEY = "sk-ant-api03-Zq8wX3vN5mK2pL9rT4yB7cF1hJ6dS0gA-_eU8iO3"


def _b64(text: str, urlsafe: bool = False) -> str:
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(text.encode()).decode()


EC_PEM = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oJBq5h\n-----END EC PRIVATE KEY-----"
PKCS8_PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
PGP_PEM = _pem("PGP PRIVATE KEY BLOCK", 3)
OPENSSH_PEM = _pem("OPENSSH PRIVATE KEY")

POSITIVES: list[Secret] = [
    # AWS access key ids and secret access keys, bare and in prose
    Secret("aws key id bare", "AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    Secret("aws session key id in prose", "use ASIAY34FZKBOKMUTVV7A for the session", "ASIAY34FZKBOKMUTVV7A"),
    Secret("aws secret bare", AWS_SECRET, AWS_SECRET),
    Secret("aws secret in prose", f"the secret is {AWS_SECRET} (do not share)", AWS_SECRET),
    Secret("aws secret end of sentence", f"here you go: {AWS_SECRET_2}.", AWS_SECRET_2),
    Secret("aws secret cli argument", f"aws configure set aws_secret {AWS_SECRET_3}", AWS_SECRET_3),
    Secret("aws secret in a json list", f'"Credentials": ["deploy", "{AWS_SECRET_2}"]', AWS_SECRET_2),
    Secret("aws secret in escaped json", f"line one\\n{AWS_SECRET}\\nline three", AWS_SECRET),
    Secret("aws session token ini", f"[default]\naws_session_token = IQoJb3JpZ2luX2Vj{fake(120, BASE64, 2)}\n",
           f"IQoJb3JpZ2luX2Vj{fake(120, BASE64, 2)}"),
    # GitHub, GitLab
    _in("github classic token", "{S}", "ghp_R8aT3xkqL0wZp9mNvB2cYd7fHs4jE6uQ1iOg"),
    _in("github oauth token", "{S}", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    Secret("github fine-grained pat", f"GH_TOKEN github_pat_11AAAAAAA0{fake(71, ALNUM + '_', 1)}",
           f"github_pat_11AAAAAAA0{fake(71, ALNUM + '_', 1)}"),
    Secret("github app token in a log", f"2026-11-25T10:00:01Z INFO git fetch with ghs_{fake(36, ALNUM, 2)} ok",
           f"ghs_{fake(36, ALNUM, 2)}"),
    Secret("gitlab pat", "glpat-xK9mP2vQ8rT4wZ7yB3nC", "glpat-xK9mP2vQ8rT4wZ7yB3nC"),
    _in("gitlab pat as url user", "git clone https://oauth2:{S}@gitlab.example.com/r", f"glpat-{fake(20, URLSAFE)}"),
    # Slack and Discord
    _in("slack bot token", "posting with {S}", "xoxb-2048-1024-Zx9QwErTyUiOpAsDfGhJkLzX"),
    Secret("slack user token", f"xoxp-1234567890-098765432109-1234567890123-{fake(32, HEX)}",
           f"xoxp-1234567890-098765432109-1234567890123-{fake(32, HEX)}"),
    _in("slack app-level token", "SLACK_APP {S}",
        f"xapp-1-A0{fake(9, string.ascii_uppercase)}-{fake(13, string.digits)}-{fake(64, HEX, 3)}"),
    Secret("slack webhook in json config", f'{{"channel": "#ops", "webhook": "https://hooks.slack.com/services/{SLACK_HOOK}"}}',
           SLACK_HOOK),
    Secret("slack webhook in curl", f"curl -X POST -d '{{\"text\":\"hi\"}}' https://hooks.slack.com/services/{SLACK_HOOK}",
           SLACK_HOOK),
    _in("discord webhook", "DISCORD https://discord.com/api/webhooks/112233445566778899/{S}", fake(68, URLSAFE, 7)),
    # Payment, mail and SaaS keys
    Secret("stripe live key", "stripe.api_key = sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    _in("stripe restricted key", "restricted {S} ok", "rk_live_51H8xYzAbCdEfGhIjKlMnOpQr"),
    Secret("stripe test key", "test mode: sk_test_26PHem9AhJZvU623DfE1x4sd", "sk_test_26PHem9AhJZvU623DfE1x4sd"),
    Secret("stripe webhook secret", f"endpoint_secret = whsec_{fake(32, ALNUM, 5)}", f"whsec_{fake(32, ALNUM, 5)}"),
    Secret("sendgrid key in prose", f"the SendGrid key {SENDGRID} was rotated", SENDGRID),
    Secret("sendgrid key in python", f"sg = SendGridAPIClient('{SENDGRID}')", SENDGRID),
    Secret("shopify admin token", f"X-Shopify-Access-Token shpat_{fake(32, HEX, 2)}", f"shpat_{fake(32, HEX, 2)}"),
    Secret("digitalocean token", f"doctl auth init -t dop_v1_{fake(64, HEX, 1)}", f"dop_v1_{fake(64, HEX, 1)}"),
    _in("databricks token", "host = https://adb.example.net\ntoken {S}", f"dapi{fake(32, HEX, 7)}"),
    Secret("postman key", f"PMAK-{fake(24, HEX, 3)}-{fake(34, HEX, 9)}", f"PMAK-{fake(24, HEX, 3)}-{fake(34, HEX, 9)}"),
    Secret("grafana service account", f"GF glsa_{fake(32, ALNUM, 3)}_{fake(8, HEX, 1)}",
           f"glsa_{fake(32, ALNUM, 3)}_{fake(8, HEX, 1)}"),
    Secret("linear key", f"linear: lin_api_{fake(40, ALNUM, 6)}", f"lin_api_{fake(40, ALNUM, 6)}"),
    Secret("vault token", f"vault login hvs.{fake(90, URLSAFE, 2)}", f"hvs.{fake(90, URLSAFE, 2)}"),
    Secret("age secret key", f"# created\nAGE-SECRET-KEY-1{fake(58, string.ascii_uppercase + string.digits, 4)}",
           f"AGE-SECRET-KEY-1{fake(58, string.ascii_uppercase + string.digits, 4)}"),
    # Google
    Secret("google api key in a url", "https://maps.googleapis.com/maps/api/js?key=AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY&v=3",
           "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    _in("google api key bare", "GOOGLE_KEY {S}", "AIzaSyBn7Ck1_Xq4mZ8pL2vT9wR6yU3sE0aD5fG"),
    Secret("google oauth client secret", f'{{"installed": {{"client_id": "1234-abc.apps.googleusercontent.com", '
           f'"client_sec": "GOCSPX-{fake(28, URLSAFE, 8)}"}}}}', f"GOCSPX-{fake(28, URLSAFE, 8)}"),
    Secret("google oauth access token", f"curl -H 'X-Goog: ya29.{fake(120, URLSAFE, 3)}' https://www.googleapis.com",
           f"ya29.{fake(120, URLSAFE, 3)}"),
    # Package registries, Hugging Face
    _in("npm token in npmrc", "//registry.npmjs.org/:_authToken={S}", f"npm_{fake(36, ALNUM, 9)}"),
    Secret("pypi token", "twine upload -p pypi-AgEIcHlwaS5vcmcCJDk3ZTVmNjQ4LTEyYjItNGQ5Mi1hZDg0LWNmYmJlMzE0NmQ2YQ",
           "pypi-AgEIcHlwaS5vcmcCJDk3ZTVmNjQ4LTEyYjItNGQ5Mi1hZDg0LWNmYmJlMzE0NmQ2YQ"),
    Secret("hugging face token bare", f"api = HfApi(); api.whoami('{HF}')", HF),
    Secret("hugging face token in prose", f"my HF token {HF} has write access", HF),
    # JWTs and private keys
    Secret("jwt", f"token {JWT}", JWT),
    Secret("jwt in a cookie header", f"Cookie: theme=dark; session={JWT}; lang=en", JWT),
    Secret("ec private key", EC_PEM, EC_PEM),
    Secret("pkcs8 private key", PKCS8_PEM, PKCS8_PEM),
    Secret("openssh private key in a cat", f"$ cat ~/.ssh/id_ed25519\n{OPENSSH_PEM}\n$ ", OPENSSH_PEM),
    Secret("pgp private key block", f"gpg --export-secret-keys -a bob\n{PGP_PEM}", PGP_PEM),
    # Anthropic and OpenAI
    Secret("anthropic key", f"ANTHROPIC {ANTHROPIC_KEY} live", ANTHROPIC_KEY),
    _in("anthropic admin key", "admin {S}", f"sk-ant-admin01-{fake(80, URLSAFE, 2)}"),
    _in("openai project key", "{S}", "sk-proj-9fK2mXq8Lw3vN7pR4tY1bC6hJ0dS5gAe"),
    Secret("openai key", "openai key sk-3Tq9ZxW2mP8vL5nK1rB7cY4hJ6dF0gSa", "sk-3Tq9ZxW2mP8vL5nK1rB7cY4hJ6dF0gSa"),
    # Passwords in prose, in several phrasings
    Secret("prose is", "my password is hunter2", "hunter2"),
    Secret("prose is, full stop", "My password is hunter2.", "hunter2"),
    Secret("prose colon", "the password: hunter2", "hunter2"),
    Secret("prose pwd was", "pwd was s3cr3t!", "s3cr3t!"),
    Secret("prose passphrase two words", "passphrase is correct horse", "correct horse"),
    _in("prose passphrase four words", "The passphrase is {S}.", "correct horse battery staple"),
    Secret("prose changed to", "the admin password was changed to Tr0ub4dor&3 yesterday", "Tr0ub4dor&3"),
    Secret("prose single quotes", "Password is 'letmein'", "letmein"),
    Secret("prose double quotes", 'his password is "swordfish" apparently', "swordfish"),
    Secret("prose backticks", "the wifi password is `p@ssw0rd`", "p@ssw0rd"),
    Secret("prose now, digits", "root's password is now 123456", "123456"),
    Secret("prose env name is", "DB_PASSWORD is Sup3rS3cret, keep it safe", "Sup3rS3cret"),
    Secret("prose passcode", "the passcode is 8812", "8812"),
    Secret("prose possessive", "their password's P@ssword1", "P@ssword1"),
    Secret("prose password for the account is", f"the password for the admin account is {FAKE_PW}", FAKE_PW),
    Secret("prose password for user on host was", f"The password for deploy on db-1 was set to {FAKE_PW}.", FAKE_PW),
    Secret("prose password for colon", f"Password for the VPN: {FAKE_PW}", FAKE_PW),
    # Passwords in URLs, headers and connection strings
    Secret("postgres url", "postgres://app:Zx81!kq@db.internal:5432/prod", "Zx81!kq"),
    Secret("git https url", "git clone https://deploy:gh0st-w0rd@git.example.com/r.git", "gh0st-w0rd"),
    Secret("mongodb srv url in env", f"MONGO_URI=mongodb+srv://app:{FAKE_PW}@cluster0.example.net/shop", FAKE_PW),
    Secret("jdbc query password", f"jdbc:postgresql://db:5432/app?user=app&password={FAKE_PW}&ssl=true", FAKE_PW),
    Secret("bearer header", "Authorization: Bearer 8f2b1c0d-live-Qm7xZ", "8f2b1c0d-live-Qm7xZ"),
    _in("bearer in curl", 'curl -H "Authorization: Bearer {S}" https://api.example.com', "abcDEF123ghiJKL456"),
    _in("x-api-key in a request log", "> POST /v1/messages\n> x-api-key: {S}\n> accept: json", fake(40, URLSAFE, 1)),
    Secret("azure storage connection string", f'AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=https;'
           f'AccountName=fakeacct;AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net"', AZURE_KEY),
    Secret("azure service bus connection string", "Endpoint=sb://fake.servicebus.windows.net/;SharedAccessKeyName="
           f"RootManageSharedAccessKey;SharedAccessKey={AZURE_SB_KEY}", AZURE_SB_KEY),
    Secret("azure sas url", f"https://fakeacct.blob.core.windows.net/c/a.csv?sv=2022-11-02&sp=r&se=2026-12-01&sig={AZURE_SIG}",
           AZURE_SIG),
    Secret("ado.net connection string", f"Server=tcp:db,1433;Database=shop;User Id=sa;Password={FAKE_PW};Encrypt=True",
           FAKE_PW),
    _in("odbc pwd", "Driver={ODBC Driver 18 for SQL Server};Server=db;Uid=sa;Pwd={S};Encrypt=yes;", FAKE_PW),
    Secret("odbc pwd in python", f'pyodbc.connect("DSN=shop;UID=app;PWD={FAKE_PW}")', FAKE_PW),
    Secret("sentry dsn in env", f"SENTRY_DSN=https://{SENTRY_KEY}@o450123.ingest.sentry.io/5501234", SENTRY_KEY),
    Secret("sentry dsn in code", f'sentry_sdk.init(dsn="https://{SENTRY_KEY}@o1.ingest.us.sentry.io/2", traces=1.0)',
           SENTRY_KEY),
    # Shell commands
    Secret("mysql -p glued", f"mysql -h db -uroot -p{FAKE_PW} shop < dump.sql", FAKE_PW),
    Secret("mysqldump -p glued quoted", f"mysqldump -u app -p'{FAKE_PW}' shop > shop.sql", FAKE_PW),
    Secret("mysql --password=", f"mysql --user=app --password={FAKE_PW} -e 'select 1'", FAKE_PW),
    Secret("mariadb -p glued", "$ mariadb -u app -pHunter2x9 shop\nWelcome to the MariaDB monitor.", "Hunter2x9"),
    Secret("sshpass -p", f"sshpass -p '{FAKE_PW}' ssh deploy@10.0.0.5 uptime", FAKE_PW),
    Secret("redis-cli -a", f"redis-cli -h cache -a {FAKE_PW} PING", FAKE_PW),
    Secret("docker login -p", f"docker login -u bob -p {FAKE_PW} registry.example.com", FAKE_PW),
    Secret("curl -u user:pass", f"curl -u admin:{FAKE_PW} https://jenkins.example.com/api/json", FAKE_PW),
    Secret("netrc", f"machine api.example.com\n  login bob\n  password {FAKE_PW}\n", FAKE_PW),
    Secret("PGPASSWORD inline", f"PGPASSWORD={FAKE_PW} psql -h db -U app", FAKE_PW),
    # Names that hold secrets: env files, configs
    Secret("creds env assignment", f"export DOCKER_CREDS=bob:{FAKE_PW}", f"bob:{FAKE_PW}"),
    Secret("creds env in compose", f"    environment:\n      - JENKINS_CREDS={FAKE_PW}\n", FAKE_PW),
    Secret("compose postgres password", f"      - POSTGRES_PASSWORD={FAKE_PW}", FAKE_PW),
    Secret("k8s secret stringData", f"kind: Secret\nstringData:\n  password: {FAKE_PW}\n", FAKE_PW),
    Secret("tfvars", f'db_password = "{FAKE_PW}"\nregion = "eu-west-1"', FAKE_PW),
    Secret("json log line", f'{{"level":"info","msg":"login","user":"bob","password":"{FAKE_PW}"}}', FAKE_PW),
    Secret("dotenv client secret", f"AZURE_CLIENT_SECRET={fake(40, ALNUM + '~._-', 2)}\n", fake(40, ALNUM + "~._-", 2)),
    # Key=value files, netrc and .pgpass, where a word is a literal
    Secret("dotenv word password", "DB_HOST=db\ndb_password=Summertime\n", "Summertime"),
    Secret("properties upper-case name", "SMTP_HOST: mail.example.com\nSMTP_PASSWD: CorrectHorse\n", "CorrectHorse"),
    Secret("netrc passwd", f"machine ftp.example.com login bob passwd {FAKE_PW}", FAKE_PW),
    Secret("netrc without login", f"machine api.example.com\n  password {FAKE_PW}\n", FAKE_PW),
    Secret("pgpass line", f"$ cat ~/.pgpass\ndb.internal:5432:shop:app:{FAKE_PW}\n", FAKE_PW),
    # Encoded and reversed: undone with one command, so still secrets
    _in("base64 anthropic key in a configmap", "kind: ConfigMap\ndata:\n  blob: {S}\n", _b64(ANTHROPIC_KEY)),
    _in("urlsafe base64 redis url in a log", "2026-11-25 INFO cache={S} connected",
        _b64(f"redis://:{FAKE_PW}@cache:6379/0", urlsafe=True)),
    _in("base64 env file with a password", "echo {S} | base64 -d > .env", _b64(f"DB_HOST=db\nDB_PASSWORD={FAKE_PW}\n")),
    _in("hex aws key id", "payload (hex): {S}", "AKIAIOSFODNN7EXAMPLE".encode().hex()),
    _in("upper-case hex github token", "0x{S}", f"ghs_{fake(36, ALNUM, 2)}".encode().hex().upper()),
    _in("reversed anthropic key", "note to self: {S}", ANTHROPIC_KEY[::-1]),
    _in("reversed github token in json", '{{"k": "{S}"}}', f"ghp_{fake(36, ALNUM, 4)}"[::-1]),
]

# --- the look-alikes -------------------------------------------------------


def _base64_of_text(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _random_base64(n_bytes: int, seed: int) -> str:
    raw = b"".join(hashlib.sha512(bytes([seed, i])).digest() for i in range(n_bytes // 64 + 1))
    return base64.b64encode(raw[:n_bytes]).decode()


SIGNATURE = "EqQBCkgIBxABGAIqQ" + _random_base64(300, 1)  # a thinking block's signature: long base64
PNG_URL = "data:image/png;base64," + _random_base64(600, 2)
API_ERROR = (
    "messages.1.content.0: Invalid `signature` in `thinking` block. The block is bound to a different conversation. "
    "Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to \"drop_block\"."
)

NEGATIVES: list[tuple[str, str]] = [
    # (label, text)
    # hashes and ids
    ("git sha", "commit 3f786850e387550fdab836ed7e6dc881de23001b"),
    ("git sha upper", "3F786850E387550FDAB836ED7E6DC881DE23001B"),
    ("sha256 digest", "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    ("sha256 docker digest", "image@sha256:" + hashlib.sha256(b"img").hexdigest()),
    ("uuids", "id=123e4567-e89b-12d3-a456-426614174000 parent=9b2c1e0a-7d3f-4c5b-8a6e-1f2d3c4b5a69"),
    ("celery task id", "Task workers.step[5f0c9a3e-2b1d-4e8f-9a7c-6d5e4f3a2b1c] succeeded in 0.51s"),
    ("fingerprint", "request fingerprint fp_a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0"),
    ("token usage json", '{"input_tokens": 1234567, "output_tokens": 89012, "cache_read_input_tokens": 4096}'),
    ("git log", "\n".join(f"{hashlib.sha1(bytes([i])).hexdigest()} fix #{i}" for i in range(50))),
    ("hash list upper", "\n".join(hashlib.sha1(bytes([i])).hexdigest().upper() for i in range(50))),
    ("api ids", "msg_01XFDUDYJgAACzvnptvVoYEL req_011CVz8bP9gWq4hXk2mN7rTy toolu_01A09q90qw90lq917835lq9X"),
    ("tool_use json", '{"type": "tool_use", "id": "toolu_01AbCdEfGhIjKlMnOpQrStUv", "name": "Read", '
                      '"input": {"file_path": "tools/tools.py"}}'),
    # base64
    ("base64 of text, 40 chars", _base64_of_text(b"hello world this is a normal s")),
    ("base64 csv in json", '"data": "' + _base64_of_text(b"name,price,qty\napple,1.20,3\npe") + '"'),
    ("tiny png", "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="),
    ("png data url", f'<img src="{PNG_URL}">'),
    ("image block json", f'{{"type": "base64", "media_type": "image/png", "data": "{PNG_URL[22:]}"}}'),
    ("thinking signature", f'{{"type": "thinking", "thinking": "Plan the checker.", "signature": "{SIGNATURE}"}}'),
    ("aws-length run with padding", f"{AWS_SECRET}=="),
    ("aws-length run in a name", f"token_{AWS_SECRET}"),
    ("aws-length run with suffix", f"{AWS_SECRET}-suffix"),
    # JWT look-alikes that grant nothing: an unsigned token (alg none, empty signature) and a lone header
    ("unsigned jwt", "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJib2IiLCJyb2xlIjoiYWRtaW4ifQ."),
    ("jws header alone", "protected header eyJhbGciOiJSUzI1NiIsImtpZCI6ImZha2UtMSJ9 (base64url)"),
    # API error texts
    ("api error prefix mismatch", API_ERROR),
    ("api error body", '{"type":"error","error":{"type":"invalid_request_error","message":'
                       + API_ERROR.replace('"', '\\"') + '},"request_id":"req_011CVz8bP9gWq4hXk2mN7rTy"}'),
    ("api error beta header", "That setting requires the `thinking-binding-controls-2026-08-01` value in the "
                              "`anthropic-beta` header. block_binding: Extra inputs are not permitted"),
    ("api error modified thinking", "messages.3.content.0: `thinking` or `redacted_thinking` blocks in the latest "
                                    "assistant message cannot be modified."),
    ("api error auth", '{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'),
    ("api error max tokens", "max_tokens: 128000 > 64000, which is the maximum allowed number of output tokens"),
    ("api error budget", "thinking.budget_tokens: Input should be greater than or equal to 1024"),
    ("api error prompt too long", "prompt is too long: 212345 tokens > 200000 maximum"),
    ("api error tool id", "messages.4.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
                          "toolu_01A09q90qw90lq917835lq9X. Each `tool_result` block must have a corresponding "
                          "`tool_use`"),
    ("thinking config json",
     '"thinking": {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}'),
    # code identifiers and code
    ("identifiers", "max_tokens token_count password_hash_field api_key_env prefix_mismatch_behavior"),
    ("settings assignments", 'max_tokens = 4000\ntoken_count = 12\npassword_hash_field = "pw_hash"\n'
                             'api_key_env = "ANTHROPIC_API_KEY"\ncreds_file = "/run/secrets/creds"'),
    ("dotted attribute paths", "config.auth.token_url, settings.password_validators, self.api_key_env"),
    ("snake names", "very_long_snake_case_function_name_here_and_then_some_more"),
    ("camel class names", "TestRefundPolicyCheckerHandlesEdgeCases2 VeryLongCamelCaseFunctionNameHere1234567 "
                          "ThisIsAVeryLongJavaClassNameFactoryBean2 HTTPSConnectionPoolManagerFactoryV2Impl1"),
    ("password function", "def check_password(password: str) -> bool: return verify(password, stored_hash)"),
    ("password none check", "if password is None: raise ValueError('password is required')"),
    ("getpass", "password = getpass.getpass('Password: ')"),
    ("creds loader", "creds = load_creds(path)\nDOCKER_CREDS_FILE=/run/secrets/docker"),
    ("hf hub code", "from huggingface_hub import hf_hub_download\nHF_HUB_ENABLE_HF_TRANSFER=1 hf_transfer"),
    ("sentry init from env", 'sentry_sdk.init(dsn=os.environ["SENTRY_DSN"])'),
    ("curl with variables", 'curl -u "$USER:$PASS" https://api.example.com'),
    # paths and urls
    ("checker path", "tools/checkers/refund_policy_check.py"),
    ("java path", "src/main/java/com/example/Project/Foo123x"),
    ("site-packages path", "/usr/lib/python3.11/site-packages/anthropic/resources/messages"),
    ("github url", "https://github.com/anthropics/anthropic-sdk-python/blob/main/src/anthropic/_client.py"),
    ("urls without credentials", "redis://localhost:6379/0 git@github.com:org/repo.git https://o1.ingest.sentry.io/api/2/"),
    ("slack docs url", "see https://api.slack.com/messaging/webhooks and https://hooks.slack.com/services/ for hooks"),
    ("env dump", "PWD=/work/main\nOLDPWD=/home/bob\nHOME=/home/bob\nSHELL=/bin/bash"),
    # shell commands with -p and -a that are not passwords
    ("mysql prompting", "mysql -h db -P 3306 -u root -p shop\nmysql --password -u app"),
    ("other -p flags", "mkdir -p /tmp/x && ssh -p 2222 host && cp -pr a b && python -m pip install -e ."),
    ("docker login stdin", "echo $TOKEN | docker login -u bob --password-stdin ghcr.io"),
    ("command docs", "mysql -u USER -pPASSWORD db\ncurl -u username:password https://api.example.com\n"
                     "redis-cli -a <password> ping"),
    ("command docs in markdown", "`mysql -pPASS`, `curl -u user:PASS`; the `sshpass -p` and `redis-cli -a` flags"),
    ("key names in code", "ACCESS_KEY = 'AWSAccessKeyId'\nSECRET_KEY = 'AWSSecretKey'"),
    ("connection string docs", "azureblockblob://AccountKey=SECRET;... or Driver={x};Pwd=PASSWORD;"),
    ("hf camelcase name", "from transformers import 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"),
    ("machine learning prose", "the machine learning password is stored in the vault"),
    # connection strings without secrets
    ("azure account name only", "DefaultEndpointsProtocol=https;AccountName=fakeacct;EndpointSuffix=core.windows.net"),
    ("odbc without password", "Driver={ODBC Driver 18 for SQL Server};Server=db;Trusted_Connection=yes;"),
    # publishable and public ids
    ("stripe publishable key", f"Stripe('pk_live_{fake(24, ALNUM, 3)}')"),
    ("openai org id", "OpenAI-Organization: org-AbCdEf012345"),
    # prose that mentions a password without giving one
    ("prose reset", "Please reset your password in settings."),
    ("prose field required", "The password field is required."),
    ("prose never logged", "The password is never logged; tokens are counted, not stored."),
    ("prose too short", "Your password is too short."),
    ("prose incorrect", "the password is incorrect, try again"),
    ("prose changed", "The password was changed yesterday."),
    ("prose bcrypt", "The password is stored as a bcrypt hash."),
    ("prose vault", "The passphrase is stored in the vault."),
    ("prose length", "The password is 8 characters long."),
    ("prose hashed", "The password is sha256-hashed before it is written."),
    ("prose pwd path", "the pwd is /work/main"),
    ("prose redacted", "Password is <REDACTED> and passphrase is <REDACTED>"),
    ("prose variable", "the password is ${DB_PASSWORD}"),
    ("prose table", "passwords is a table with 1200 rows"),
    ("prose print", 'print("my password is ", pw, "and the passphrase is ", phrase)'),
    ("prose password for is stored", "The password for the admin account is stored in Vault."),
    ("prose password for is hashed", "the password for each user is hashed with argon2"),
    # near misses of the token formats
    ("sk- words", "pip install scikit-learn sk-learn; task-1234 risk-assessment"),
    ("akia words", "AKIA is a prefix, ASIA a continent"),
    ("ghp words", "ghp_ is the prefix of classic tokens"),
    ("live/test words", "mask_live_preview and desk_test_runner are functions"),
    ("aiza words", "AIza is how Google keys start"),
    ("prefix words", "SG. is how SendGrid keys start, hf_ is Hugging Face, hvs. is Vault, dapi a Databricks token"),
    # encodings of what holds no secret, and what looks encoded
    ("base64 of prose", _b64("The quick brown fox jumps over the lazy dog. Nothing to hide here.")),
    ("base64 of a json config", '{"config": "' + _b64('{"scenario": "refund_desk", "max_tokens": 4000}') + '"}'),
    ("base64 of prose about passwords", "echo " + _b64("Please reset your password in settings.") + " | base64 -d"),
    ("urlsafe base64 of a url", "next=" + _b64("https://example.com/docs?page=2&q=token+limits", urlsafe=True)),
    ("hex of text", "hexdump: " + b"Hello, world! This is plain text.".hex()),
    ("upper-case hex of text", b"max_tokens=4000 for every step".hex().upper()),
    ("sha256sum output", "\n".join(f"{hashlib.sha256(n.encode()).hexdigest()}  {n}" for n in ("tools.py", "a.json"))),
    ("sha512 digest", "sha512-" + hashlib.sha512(b"pkg").hexdigest()),
    ("hex bytes of a binary", hashlib.sha256(b"x").digest().hex() + hashlib.md5(b"y").digest().hex()),
    ("git ids in a log line", "Merge 3f786850e387 into a94a8fe5ccb19ba61c4c0873d391e987982fbbd3 (9b2c1e0a)"),
    ("base64 words", "AbCdEfGhIjKlMnOpQrStUvWxYz base64url TWFueSBoYW5kcyBtYWtl"),
    # words turned round
    ("reversed words", "drowssap nekot terces yek-ipa laitnederc tsoh_ksed_gnitset"),
    ("reversed sentence", "The password is never logged; tokens are counted, not stored."[::-1]),
    ("reversed identifiers", "snekot_xam tnuoc_nekot ks-nrael-tikics AIKA ASIA azIA"),
    # netrc, .pgpass and key=value look-alikes
    ("netrc in prose", "Put the login and password for each machine in ~/.netrc; curl reads it with --netrc."),
    ("netrc placeholders", "machine api.example.com login $USER password $PASS"),
    ("host port db tuples", "connect to db.internal:5432:shop as app; replicas localhost:5433:postgres"),
    ("pgpass format line", "hostname:port:database:username:password\n*:5432:*:app:*"),
    ("clock and mac", "10:00:01:02:03 eth0 00:1a:2b:3c:4d:5e"),
    ("code assignments", "token = Token\nsecret = Secret\n    password=password_var\nAPI_KEY = ANTHROPIC_API_KEY"),
    ("settings class", "class Settings(BaseSettings):\n    DB_PASSWORD: SecretStr\n    API_KEY: str\n"),
]


class Figures(NamedTuple):
    caught: int
    secrets: int
    false_positives: int
    look_alikes: int
    missed: list[str]  # labels
    touched: list[str]  # labels

    @property
    def recall(self) -> float:
        return self.caught / self.secrets

    def line(self) -> str:
        return (f"secrets caught {self.caught}/{self.secrets} ({self.recall:.1%}), "
                f"look-alikes changed {self.false_positives}/{self.look_alikes}")


def exactly_redacted(redact: Callable[[str], str], entry: Secret, replacement: str) -> bool:
    """True if ``entry``'s secret, and nothing else, became ``replacement``."""
    return redact(entry.text) == entry.text.replace(entry.secret, replacement, 1)


def score(redact: Callable[[str], str], replacement: str) -> Figures:
    missed = [e.label for e in POSITIVES if not exactly_redacted(redact, e, replacement)]
    touched = [label for label, text in NEGATIVES if redact(text) != text]
    return Figures(len(POSITIVES) - len(missed), len(POSITIVES), len(touched), len(NEGATIVES), missed, touched)

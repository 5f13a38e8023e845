"""A corpus of real secret formats (synthetic values) and of look-alikes that must survive.

Every positive entry names where the secret sits in its text; the test checks
that exactly that part became ``<REDACTED>`` and everything around it stayed.
Every negative entry must come back unchanged (the very same object).
"""

from __future__ import annotations

import base64
import hashlib

import pytest

from context.redaction import REDACTED, redact

# Synthetic values in the real formats: prefixes, lengths and alphabets as issued.
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_SECRET_2 = "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"
AWS_SECRET_3 = "9drTJvcXLB89EXAMPLELB8923FB892xMFI+RaNdo"  # starts with a digit, has a "+"
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"

POSITIVES: list[tuple[str, str]] = [
    # (text with the secret, the secret exactly as it appears in the text)
    # AWS access key ids and secret access keys, bare and in prose
    ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("use ASIAY34FZKBOKMUTVV7A for the session", "ASIAY34FZKBOKMUTVV7A"),
    (AWS_SECRET, AWS_SECRET),
    (f"the secret is {AWS_SECRET} (do not share)", AWS_SECRET),
    (f"here you go: {AWS_SECRET_2}.", AWS_SECRET_2),
    (f"aws configure set aws_secret {AWS_SECRET_3}", AWS_SECRET_3),
    (f'"Credentials": ["deploy", "{AWS_SECRET_2}"]', AWS_SECRET_2),
    (f"line one\\n{AWS_SECRET}\\nline three", AWS_SECRET),  # inside a JSON string
    # GitHub
    ("ghp_R8aT3xkqL0wZp9mNvB2cYd7fHs4jE6uQ1iOg", "ghp_R8aT3xkqL0wZp9mNvB2cYd7fHs4jE6uQ1iOg"),
    ("gho_16C7e42F292c6912E7710c838347Ae178B4a", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("GH_TOKEN github_pat_11AAAAAAA0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefg",
     "github_pat_11AAAAAAA0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefg"),
    # Slack
    ("posting with xoxb-2048-1024-Zx9QwErTyUiOpAsDfGhJkLzX", "xoxb-2048-1024-Zx9QwErTyUiOpAsDfGhJkLzX"),
    ("xoxp-1234567890-098765432109-1234567890123-0123456789abcdef0123456789abcdef",
     "xoxp-1234567890-098765432109-1234567890123-0123456789abcdef0123456789abcdef"),
    # Stripe
    ("stripe.api_key = sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("restricted rk_live_51H8xYzAbCdEfGhIjKlMnOpQr ok", "rk_live_51H8xYzAbCdEfGhIjKlMnOpQr"),
    ("test mode: sk_test_26PHem9AhJZvU623DfE1x4sd", "sk_test_26PHem9AhJZvU623DfE1x4sd"),
    # Google API keys
    ("https://maps.googleapis.com/maps/api/js?key=AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY&v=3",
     "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    ("GOOGLE_KEY AIzaSyBn7Ck1_Xq4mZ8pL2vT9wR6yU3sE0aD5fG", "AIzaSyBn7Ck1_Xq4mZ8pL2vT9wR6yU3sE0aD5fG"),
    # GitLab, npm, PyPI
    ("glpat-xK9mP2vQ8rT4wZ7yB3nC", "glpat-xK9mP2vQ8rT4wZ7yB3nC"),
    ("//registry.npmjs.org/:_authToken=npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
     "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    ("twine upload -p pypi-AgEIcHlwaS5vcmcCJDk3ZTVmNjQ4LTEyYjItNGQ5Mi1hZDg0LWNmYmJlMzE0NmQ2YQ",
     "pypi-AgEIcHlwaS5vcmcCJDk3ZTVmNjQ4LTEyYjItNGQ5Mi1hZDg0LWNmYmJlMzE0NmQ2YQ"),
    # JWTs
    (f"token {JWT}", JWT),
    # Private keys
    ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oJBq5h\n-----END EC PRIVATE KEY-----",
     "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oJBq5h\n-----END EC PRIVATE KEY-----"),
    ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
     "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"),
    # Anthropic and OpenAI
    ("ANTHROPIC sk-ant-api03-Zq8wX3vN5mK2pL9rT4yB7cF1hJ6dS0gA-_eU8iO3 live",
     "sk-ant-api03-Zq8wX3vN5mK2pL9rT4yB7cF1hJ6dS0gA-_eU8iO3"),
    ("sk-proj-9fK2mXq8Lw3vN7pR4tY1bC6hJ0dS5gAe", "sk-proj-9fK2mXq8Lw3vN7pR4tY1bC6hJ0dS5gAe"),
    ("openai key sk-3Tq9ZxW2mP8vL5nK1rB7cY4hJ6dF0gSa", "sk-3Tq9ZxW2mP8vL5nK1rB7cY4hJ6dF0gSa"),
    # Passwords in prose, in several phrasings
    ("my password is hunter2", "hunter2"),
    ("My password is hunter2.", "hunter2"),
    ("the password: hunter2", "hunter2"),
    ("pwd was s3cr3t!", "s3cr3t!"),
    ("passphrase is correct horse", "correct horse"),
    ("The passphrase is correct horse battery staple.", "correct horse battery staple"),
    ("the admin password was changed to Tr0ub4dor&3 yesterday", "Tr0ub4dor&3"),
    ("Password is 'letmein'", "letmein"),
    ('his password is "swordfish" apparently', "swordfish"),
    ("the wifi password is `p@ssw0rd`", "p@ssw0rd"),
    ("root's password is now 123456", "123456"),
    ("DB_PASSWORD is Sup3rS3cret, keep it safe", "Sup3rS3cret"),
    ("the passcode is 8812", "8812"),
    ("their password's P@ssword1", "P@ssword1"),
    # Passwords in URLs and headers
    ("postgres://app:Zx81!kq@db.internal:5432/prod", "Zx81!kq"),
    ("git clone https://deploy:gh0st-w0rd@git.example.com/r.git", "gh0st-w0rd"),
    ("Authorization: Bearer 8f2b1c0d-live-Qm7xZ", "8f2b1c0d-live-Qm7xZ"),
    ('curl -H "Authorization: Bearer abcDEF123ghiJKL456" https://api.example.com', "abcDEF123ghiJKL456"),
]


@pytest.mark.parametrize(("text", "secret"), POSITIVES, ids=range(len(POSITIVES)))
def test_secret_is_redacted_and_its_surroundings_kept(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert out == text.replace(secret, REDACTED, 1)
    assert redact(out) == out


def _base64_of_text(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


NEGATIVES: list[str] = [
    # hashes and ids
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "3F786850E387550FDAB836ED7E6DC881DE23001B",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "id=123e4567-e89b-12d3-a456-426614174000 parent=9b2c1e0a-7d3f-4c5b-8a6e-1f2d3c4b5a69",
    "request fingerprint fp_a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0",
    '{"input_tokens": 1234567, "output_tokens": 89012, "cache_read_input_tokens": 4096}',
    # base64 of ordinary data agents edit (exactly 40 characters is the AWS length)
    _base64_of_text(b"hello world this is a normal s"),
    '"data": "' + _base64_of_text(b"name,price,qty\napple,1.20,3\npe") + '"',
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    # 40 characters of the AWS alphabet that are part of something longer
    f"{AWS_SECRET}==",  # base64 padding: 30 bytes of data
    f"token_{AWS_SECRET}",
    f"{AWS_SECRET}-suffix",
    "\n".join(f"{hashlib.sha1(bytes([i])).hexdigest()} fix #{i}" for i in range(50)),  # git log
    "\n".join(hashlib.sha1(bytes([i])).hexdigest().upper() for i in range(50)),
    # paths, identifiers and code
    "tools/checkers/refund_policy_check.py",
    "src/main/java/com/example/Project/Foo123x",
    "very_long_snake_case_function_name_here_and_then_some_more",
    "TestRefundPolicyCheckerHandlesEdgeCases2",
    "VeryLongCamelCaseFunctionNameHere1234567",
    "ThisIsAVeryLongJavaClassNameFactoryBean2",
    "HTTPSConnectionPoolManagerFactoryV2Impl1",
    "/usr/lib/python3.11/site-packages/anthropic/resources/messages",
    "https://github.com/anthropics/anthropic-sdk-python/blob/main/src/anthropic/_client.py",
    "def check_password(password: str) -> bool: return verify(password, stored_hash)",
    "if password is None: raise ValueError('password is required')",
    "password = getpass.getpass('Password: ')",
    # prose that mentions a password without giving one
    "Please reset your password in settings.",
    "The password field is required.",
    "The password is never logged; tokens are counted, not stored.",
    "Your password is too short.",
    "the password is incorrect, try again",
    "The password was changed yesterday.",
    "The password is stored as a bcrypt hash.",
    "The passphrase is stored in the vault.",
    "The password is 8 characters long.",
    "The password is sha256-hashed before it is written.",
    "the pwd is /work/main",
    "Password is <REDACTED> and passphrase is <REDACTED>",
    "the password is ${DB_PASSWORD}",
    "passwords is a table with 1200 rows",
    'print("my password is ", pw, "and the passphrase is ", phrase)',
    # near misses of the token formats
    "pip install scikit-learn sk-learn; task-1234 risk-assessment",
    "AKIA is a prefix, ASIA a continent",
    "ghp_ is the prefix of classic tokens",
    "mask_live_preview and desk_test_runner are functions",
    "AIza is how Google keys start",
]


@pytest.mark.parametrize("text", NEGATIVES, ids=range(len(NEGATIVES)))
def test_look_alike_is_untouched(text: str) -> None:
    out = redact(text)
    assert out == text
    assert out is text


def test_random_forty_character_strings_are_caught() -> None:
    # The bare AWS rule judges by shape and entropy: real keys are random, so
    # nearly all random 40-character strings of their alphabet must be caught.
    import random
    import string

    rng = random.Random(11)
    alphabet = string.ascii_letters + string.digits + "/+"
    keys = ["".join(rng.choice(alphabet) for _ in range(40)) for _ in range(2000)]
    missed = [k for k in keys if redact(f"key {k} end") != f"key {REDACTED} end"]
    assert len(missed) <= 20, missed[:5]  # at most 1% slips through

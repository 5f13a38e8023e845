"""The Markdown prompts of each role (``agents/role_prompts/<role>/system.md`` and ``compact.md``).

They are package data (pyproject.toml), read through importlib.resources so an installed
baton finds them wherever it lives."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

PROMPTS_DIR = files("agents") / "role_prompts"


@cache
def prompt(role: str, kind: str) -> str:
    """The prompt text, read once per process: the system prompt must be byte-identical
    on every call for the prompt cache to hold."""
    path = PROMPTS_DIR / role / f"{kind}.md"
    try:
        return path.read_text(encoding="utf-8").strip() + "\n"
    except FileNotFoundError:
        raise FileNotFoundError(
            f"prompt {path} is missing; baton needs agents/role_prompts/<role>/system.md and compact.md "
            "for roles init and execute (reinstall baton, or restore the folder in a checkout)"
        ) from None

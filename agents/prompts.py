"""The Markdown prompts of each role (``prompts/<role>/system.md`` and ``compact.md``)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"


@cache
def prompt(role: str, kind: str) -> str:
    """The prompt text, read once per process: the system prompt must be byte-identical
    on every call for the prompt cache to hold."""
    path = PROMPTS_DIR / role / f"{kind}.md"
    try:
        return path.read_text(encoding="utf-8").strip() + "\n"
    except FileNotFoundError:
        raise FileNotFoundError(
            f"prompt {path} is missing; baton needs prompts/<role>/system.md and compact.md "
            "for roles init and execute (reinstall or restore the prompts folder)"
        ) from None

"""The Markdown prompts of each role (``prompts/<role>/system.md`` and ``compact.md``).

In a checkout they are the top-level ``prompts/`` folder; the wheel ships that folder as package
data of baton's own package (``baton/prompts``, mapped in setup.py), so an installed baton finds
them wherever it lives and no generic top-level ``prompts`` lands in site-packages."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

# Installed: site-packages/baton/prompts. A checkout has no baton/prompts, so the top-level folder
# beside agents/ is used; the installed copy is looked at first, so a stray `prompts` folder beside
# site-packages' agents/ is never read.
INSTALLED_DIR = files("baton") / "prompts"
CHECKOUT_DIR = Path(__file__).resolve().parents[1] / "prompts"


def _prompts_dir() -> Traversable:
    return INSTALLED_DIR if INSTALLED_DIR.is_dir() else CHECKOUT_DIR


PROMPTS_DIR = _prompts_dir()


@cache
def prompt(role: str, kind: str) -> str:
    """The prompt text, read once per process: the system prompt must be byte-identical
    on every call for the prompt cache to hold."""
    path = PROMPTS_DIR / role / f"{kind}.md"
    try:
        return path.read_text(encoding="utf-8").strip() + "\n"
    except FileNotFoundError:
        raise FileNotFoundError(
            f"prompt {path} is missing; baton needs prompts/<role>/system.md and compact.md for roles init "
            "and execute (reinstall baton, or restore the top-level prompts/ folder in a checkout)"
        ) from None

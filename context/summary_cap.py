"""Summaries that stay bounded.

Each compaction summarises the previous summary plus the steps since, so over many
compactions a summary can grow until it alone fills much of the threshold, and the
compactions come ever closer together. Two guards keep it bounded, both measured in
the summary's tokens against a cap, ``Policy.summary_cap_share`` of the threshold
(15% by default; 0 turns both off):

- **asked**: when the previous summary is over the cap, the next summary request ends
  with ``CONDENSE``, asking for a condensed summary: the strategic facts (the goal,
  every key path, open items, decisions awaiting review) without the narrative;
- **enforced**: a summary still over twice the cap, whether the model ignored the ask
  or the fallback carried too much, is condensed here: the schema's narrative fields
  are emptied first, then long texts clipped and long lists cut, with ever tighter
  limits until it fits. ``key_paths`` is never touched, and every field keeps its
  type, so the summary still fits its schema.
"""

from __future__ import annotations

import json
from typing import Any

from context.tokens import count_text

CONDENSE = (
    "\n\nYour previous summary is about {tokens:,} tokens, over the cap of {cap:,} for a summary. Write a "
    "condensed one this time: keep the goal, every entry of key_paths, the open items and pending work, and the "
    "decisions awaiting review; drop the narrative (what was tried and how it went), finished work, and anything "
    "the files named in key_paths already hold."
)
LIMITS = ((600, 12), (300, 8), (150, 5), (80, 3), (40, 1))  # (characters per text, items per list), tighter each round


def summary_tokens(summary: dict[str, Any]) -> int:
    return count_text(json.dumps(summary, ensure_ascii=False, sort_keys=True))


def cap_tokens(share: float, threshold: int) -> int | None:
    return int(share * threshold) if share > 0 else None


def condense_note(previous: dict[str, Any] | None, cap: int | None) -> str:
    """What to add to the compact prompt: ``CONDENSE`` when the previous summary is over the cap, else nothing."""
    if previous is None or cap is None:
        return ""
    tokens = summary_tokens(previous)
    return CONDENSE.format(tokens=tokens, cap=cap) if tokens > cap else ""


def enforce(summary: dict[str, Any], narrative: tuple[str, ...], cap: int | None) -> tuple[dict[str, Any], bool]:
    """The summary within twice the cap (and whether it had to be condensed here)."""
    if cap is None or summary_tokens(summary) <= 2 * cap:
        return summary, False
    out = json.loads(json.dumps(summary))  # a copy the trimming may change
    for path in narrative:
        _empty(out, path.split("."))
    for chars, items in LIMITS:
        if summary_tokens(out) <= 2 * cap:
            break
        out = {key: value if key == "key_paths" else _clip(value, chars, items) for key, value in out.items()}
    return out, True


def _empty(summary: dict[str, Any], path: list[str]) -> None:
    node = summary
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict) and path[-1] in node:
        value = node[path[-1]]
        node[path[-1]] = type(value)() if isinstance(value, (str, list, dict)) else None


def _clip(value: Any, chars: int, items: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= chars else value[: chars - 1] + "…"
    if isinstance(value, list):
        kept = [_clip(v, chars, items) for v in value[:items]]
        return kept + ([f"… and {len(value) - items} more"] if len(value) > items else [])
    if isinstance(value, dict):
        return {k: _clip(v, chars, items) for k, v in value.items()}
    return value

"""A running digest of a request body's prefix, for the benchmarks that measure request bodies
(``bench/prefix_stability.py``). The engine's own chain, over its typed messages, block by block, is
``context/prefix.py``; this one reads the JSON bodies any policy sends.

Each `thinking` or `redacted_thinking` block is signed over its prefix: the top-level `system`, `tools` and
every message before it, `cache_control` aside (issue 22). `chain(seed(system, tools), messages)[i]` is one
digest of system, tools and `messages[:i]`; two requests share a prefix up to a point exactly when their
digests there are equal (SHA-256; key order and `cache_control` do not count). A block stored with the
digest it was produced under can be checked against a new request in O(1), and a chain is extended one
message at a time, so a caller that keeps the previous request's chain rehashes only what changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

from context.prefix import without_cache_control


def canonical(value: Any) -> str:
    """Deterministic JSON of `value` without `cache_control` (the same form as `Message.canonical`)."""
    return json.dumps(without_cache_control(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _blocks(content: Any) -> Any:
    # The API reads a bare string as one text block: both forms are the same prefix.
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def canonical_message(message: dict[str, Any]) -> str:
    """One request message (`{"role", "content"}`) in canonical form."""
    return canonical({"role": message["role"], "content": _blocks(message["content"])})


def link(digest: str, part: str) -> str:
    """The chain's next digest: `digest` followed by one canonical part."""
    return hashlib.sha256(f"{digest}\n{part}".encode()).hexdigest()


def seed(system: Any = None, tools: Iterable[dict[str, Any]] | None = None) -> str:
    """The digest of the static prefix: the top-level system (a string or text blocks) and the tools."""
    return link("", canonical({"system": _blocks(system or []), "tools": list(tools or [])}))


def chain(start: str, canonical_messages: Iterable[str]) -> list[str]:
    """`[start, d1, d2, ...]`: `d_i` covers the static prefix and the first i messages (canonical strings)."""
    out = [start]
    for part in canonical_messages:
        out.append(link(out[-1], part))
    return out


def block_digest(message_digest: str, role: str, blocks_before: list[dict[str, Any]]) -> str:
    """The prefix of a block inside a message: the chain digest before that message, its role and the blocks
    before the block (a thinking block between tool calls is bound to those too)."""
    return link(message_digest, canonical({"role": role, "content": blocks_before}))

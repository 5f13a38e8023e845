"""How many tokens the double says a request is, piece by piece.

A request is read as the API caches it: the tools, then the system blocks, then each
message's content blocks, in that order. Each piece is one tool definition or one
content block; a piece carries its token count, its canonical JSON (what the prompt
cache hashes) and whether it ends at a ``cache_control`` breakpoint.

The count is Claude-like, not Claude's: the raw cl100k count (``context.tokens``)
times ``CLAUDE_PER_CL100K`` (1.19, the estimator's prior: Claude's tokenizer counts
about 19% more than cl100k on baton's traffic, see ``context/estimator.py``), plus
``PER_BLOCK`` for each piece's framing and ``PER_MESSAGE`` for each message's. A thinking block
the double signed counts the thinking tokens its seal recorded (``seal.thinking_cost``): a kept block
is billed as input at its full count, not at its visible text (empty under the default display).
The same count answers ``count_tokens``, ``usage`` and the "prompt is too long" rule.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from context.messages import Message
from context.prefix import without_cache_control
from context.tokens import count_text
from workers.fake_api.seal import thinking_cost

CLAUDE_PER_CL100K = 1.19
PER_BLOCK = 12
PER_MESSAGE = 24
ONE_HOUR_S, FIVE_MINUTES_S = 3600.0, 300.0


@dataclass(frozen=True)
class Piece:
    key: str  # canonical JSON, cache_control left out: moving a breakpoint does not change the content
    tokens: int
    breakpoint_ttl_s: float | None = None  # set when the piece carries a cache_control marker
    in_messages: bool = False  # a message block: its cache also depends on tool_choice, thinking and effort


def claude_tokens(raw: int) -> int:
    """Claude-like tokens for ``raw`` cl100k tokens."""
    return math.ceil(raw * CLAUDE_PER_CL100K)


def _canonical(where: str, value: Any) -> str:
    return json.dumps({"at": where, "v": without_cache_control(value)}, sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"))


def _ttl(marker: Any) -> float:
    return ONE_HOUR_S if isinstance(marker, dict) and marker.get("ttl") == "1h" else FIVE_MINUTES_S


def _breakpoint(block: Any) -> float | None:
    """The TTL of the block's breakpoint: its own marker, or one on a part of a tool_result's content."""
    if not isinstance(block, dict):
        return None
    if block.get("cache_control"):
        return _ttl(block["cache_control"])
    parts = block.get("content")
    marked = [p["cache_control"] for p in parts if isinstance(p, dict) and p.get("cache_control")] \
        if isinstance(parts, list) else []
    return _ttl(marked[-1]) if marked else None


def markers(tools: list[Any], system: Any, messages: list[dict[str, Any]]) -> int:
    """cache_control markers where the API counts them (tools, system, message blocks, tool_result parts)."""
    def marked(blocks: Any) -> int:
        return sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control")) \
            if isinstance(blocks, list) else 0

    count = marked(tools) + marked(system)
    for message in messages:
        content = message.get("content")
        count += marked(content)
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict):
                count += marked(block.get("content"))
    return count


def pieces(tools: list[dict[str, Any]], system: str | list[dict[str, Any]] | None,
           raw_messages: list[dict[str, Any]], messages: list[Message]) -> list[Piece]:
    """The request as the cache sees it: tools, system, then every message block, in order."""
    out = [Piece(_canonical("tools", tool), claude_tokens(count_text(_canonical("tools", tool))) + PER_BLOCK,
                 _breakpoint(tool)) for tool in tools]
    system_blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system or [])
    out += [Piece(_canonical("system", block), claude_tokens(count_text(block.get("text", ""))) + PER_BLOCK,
                  _breakpoint(block)) for block in system_blocks]
    for n, (raw, message) in enumerate(zip(raw_messages, messages)):
        raw_blocks = raw["content"] if isinstance(raw["content"], list) else [{"type": "text", "text": raw["content"]}]
        for k, (raw_block, block) in enumerate(zip(raw_blocks, message.content)):
            framing = PER_BLOCK + (PER_MESSAGE if k == 0 else 0)
            thinking = thinking_cost(raw_block)  # a signed block is billed at what it cost, not at its text
            tokens = claude_tokens(block.tokens) if thinking is None else thinking
            out.append(Piece(_canonical(f"{message.role}#{n}", raw_block), tokens + framing,
                             _breakpoint(raw_block), in_messages=True))
    return out

"""The ``api`` result compressor: the server clears older tool results (context editing), the client does not.

Why beside baton's own: every change baton makes to an older step invalidates the thinking after it, while
context editing is applied by the server to what the model reads, and the client keeps sending its history
unchanged, append-only (platform docs, "Context editing": "server-side context management never invalidates
thinking blocks" on Opus 5.5). So with this compressor the assembler keeps its view unmanaged (no older step
compressed, no earlier round cut to its ends) and each request asks, beta ``context-management-2025-06-27``:

- ``clear_thinking_20251015`` with ``keep: "all"``, first as the docs require: preserved thinking keeps every
  block (clearing one would invalidate the cache and the blocks after it), said explicitly as the docs advise;
- ``clear_tool_uses_20250919`` once the prompt passes the policy's start size, keeping the last N steps'
  tool uses, and only when it clears at least what repays the cache it breaks (``clear_at_least``): the
  payback rule of baton's own compression, at the model's cache prices (``Assembler.rates``).

Results over the size cap are still cut to head + tail by the client (the same way every time, so the
history stays append-only), and the emergency trim still shrinks a request that would not fit the window.
"""

from __future__ import annotations

import math
from typing import Any

from context.assembly import Assembled, Assembler
from context.per_tool_compression import PerToolCompressor

CONTEXT_BETA = "context-management-2025-06-27"


def clear_at_least(assembler: Assembler, assembled: Assembled) -> int:
    """The fewest tokens a clearing must remove to repay the cache it invalidates within `payback_calls` calls.

    The server clears the oldest results first, so the cache is rewritten from the first tool result to the
    end of the request (at the write price); each cleared token is then not read on every later call (at
    the read price). Counted in the API's tokens (the estimator's calibration of the raw counts)."""
    policy, rates = assembler.policy, assembler.rates
    if policy.payback_calls == 0:
        return 0
    first = next((i for i, m in enumerate(assembled.messages) if m.tool_results), None)
    if first is None:
        return 0
    rewrite_raw = sum(m.tokens for m in assembled.messages[first:])
    scale = assembled.scale
    return math.ceil(rewrite_raw * scale * rates.write / (rates.read * policy.payback_calls))


class ApiEditingCompressor(PerToolCompressor):
    """Context editing by the server (named ``api`` in ``Policy``); the per-tool forms serve the emergency only."""

    client_side = False

    def request_fields(self, assembler: Assembler, assembled: Assembled) -> dict[str, Any]:
        policy = assembler.policy
        clear_tools: dict[str, Any] = {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": max(policy.start_tokens, 1)},
            "keep": {"type": "tool_uses", "value": policy.keep_last_steps},
        }
        least = clear_at_least(assembler, assembled)
        if least:
            clear_tools["clear_at_least"] = {"type": "input_tokens", "value": least}
        edits = [{"type": "clear_thinking_20251015", "keep": "all"}, clear_tools]
        return {"context_management": {"edits": edits}}

    def betas(self) -> list[str]:
        return [CONTEXT_BETA]

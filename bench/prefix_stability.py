"""How stable a conversation's requests are: prefix breaks and thinking blocks that stay valid (issue 22).

Fed the Messages API bodies of one conversation in order, and the model's reply after each, a
`PrefixTracker` counts

* prefix breaks: calls whose messages do not start with the previous request's messages plus its reply,
  exactly (canonical JSON, `cache_control` aside; `bench/request_prefix.py`); the first call is never one. The
  caller says which calls the engine chose to change (a planned break: a batch leaving the verbatim
  window, a compaction); any other break is unplanned;
* thinking blocks, assuming each reply carried one thinking block at its start (the replayed runs have
  none): the block of the reply to call k is bound to the request of call k (system, tools, messages). At
  a later call it is *sent* while that reply is still in the request, and *sent valid* when the request's
  prefix before the reply is still identical to call k's. `valid_next` counts blocks still valid at the
  call right after the one that produced them.

Replies are recognised in later requests by their tool call ids, or their text when they call no tool
(the engine may cut a call's bulky inputs, never its id or the text); an assistant message that is no
reply of this conversation (a compaction's summary) is not a send.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from request_prefix import canonical_message, chain, link, seed  # noqa: E402  (bench/ is on the path)


@dataclass
class PrefixStats:
    calls: int = 0
    breaks_planned: int = 0  # the engine chose to change the view (a batch compressed, a compaction)
    breaks_unplanned: int = 0  # anything else: a per-call rewrite
    sends: int = 0  # thinking blocks sent back: an earlier reply still in a request
    valid_sends: int = 0  # ... with the prefix it was produced under
    produced: int = 0  # replies followed by another call of the conversation
    valid_next: int = 0  # ... whose block is still valid at that next call

    def add(self, other: PrefixStats | dict[str, int]) -> None:
        values = other if isinstance(other, dict) else vars(other)
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + values[f.name])

    @property
    def breaks(self) -> int:
        return self.breaks_planned + self.breaks_unplanned


def reply_key(message: dict[str, Any]) -> tuple[str, ...]:
    """What identifies a reply across the engine's rewrites: its tool call ids, else its text."""
    blocks = [b for b in message["content"] if isinstance(b, dict)] if isinstance(message["content"], list) else []
    ids = tuple(b["id"] for b in blocks if b.get("type") == "tool_use")
    if ids:
        return ids
    if isinstance(message["content"], str):
        return ("text", message["content"])
    return ("text", *(b.get("text", "") for b in blocks if b.get("type") == "text"))


class PrefixTracker:
    """One conversation's requests and replies, in order (see the module docstring)."""

    def __init__(self) -> None:
        self.stats = PrefixStats()
        self._sent: list[str] = []  # canonical messages of the last request, then its reply
        self._chain: list[str] = []  # their digests (one more than messages)
        # id(message dict) -> (it, its canonical form, its reply key if an assistant message)
        self._memo: dict[int, tuple[dict, str, tuple[str, ...] | None]] = {}
        self._replies: dict[str, tuple[str, ...]] = {}  # digest a reply's block is bound to -> the reply's key
        self._keys: set[tuple[str, ...]] = set()
        self._last_bound: str | None = None  # the last reply's binding, until the next call checks it

    def request(self, body: dict[str, Any], *, planned: bool = False) -> None:
        """The Messages API body of the next call; `planned` if the engine chose to change the view here."""
        messages = body["messages"]
        canon, keys = self._canonicals(messages)
        start = seed(body.get("system"), body.get("tools"))
        same = self._common(canon) if self._chain and self._chain[0] == start else 0
        if self.stats.calls and same < len(self._sent):
            if planned:
                self.stats.breaks_planned += 1
            else:
                self.stats.breaks_unplanned += 1
        self.stats.calls += 1
        digests = self._chain[: same + 1] if same else [start]
        digests += chain(digests[-1], canon[same:])[1:]
        valid = self._count_sends(keys, digests)
        if self._last_bound is not None:
            self.stats.produced += 1
            self.stats.valid_next += self._last_bound in valid
        self._sent, self._chain, self._last_bound = canon, digests, None

    def reply(self, message: dict[str, Any]) -> None:
        """The model's reply to the last request."""
        if not self._chain:
            raise ValueError("a reply before any request: call request() first")
        bound = self._chain[-1]  # its thinking block's prefix: the whole request it answered
        key = reply_key(message)
        self._replies[bound] = key
        self._keys.add(key)
        self._last_bound = bound
        part = canonical_message(message)
        self._sent = [*self._sent, part]
        self._chain = [*self._chain, link(bound, part)]

    # ---- helpers ---------------------------------------------------------------------

    def _canonicals(self, messages: Sequence[dict[str, Any]]) -> tuple[list[str], list[tuple[str, ...] | None]]:
        """The messages' canonical forms and reply keys (None for user messages)."""
        # Unchanged messages are usually the same dict objects from call to call: read each once.
        memo, canon, keys = {}, [], []
        for m in messages:
            hit = self._memo.get(id(m))
            if hit is None or hit[0] is not m:
                hit = (m, canonical_message(m), reply_key(m) if m["role"] == "assistant" else None)
            memo[id(m)] = hit
            canon.append(hit[1])
            keys.append(hit[2])
        self._memo = memo  # only the last request's: nothing older is kept alive
        return canon, keys

    def _common(self, canon: list[str]) -> int:
        """How many leading messages `canon` shares with the last request plus its reply."""
        n = 0
        for old, new in zip(self._sent, canon):
            if old != new:
                break
            n += 1
        return n

    def _count_sends(self, keys: list[tuple[str, ...] | None], digests: list[str]) -> set[str]:
        """Count the earlier replies in this request and those sent valid; returns the valid ones' bindings."""
        valid: set[str] = set()
        for i, key in enumerate(keys):
            if key is None or key not in self._keys:
                continue  # not a reply of this conversation (a summary)
            self.stats.sends += 1
            if self._replies.get(digests[i]) == key:
                self.stats.valid_sends += 1
                valid.add(digests[i])
        return valid

"""Prompt-cache accounting: which input tokens of a request were cache reads, cache writes or plain input.

The rule, kept simple (the real one has more: minimum cacheable lengths, 1h-before-5m
ordering, per-model and per-workspace caches):

- The cacheable prefix ends at each ``cache_control`` breakpoint (``counting.Piece``);
  its key is the hash of the canonical JSON of every piece up to and including it.
- At each breakpoint the cache looks back up to ``LOOKBACK_PIECES`` pieces for a prefix it
  holds, as the API looks back up to 20 blocks. Everything up to the highest prefix found
  by any breakpoint is a **read**; the rest, up to the last breakpoint, a **write** (see
  ``account`` for the 1-hour/5-minute positions), and the prefixes ending at the
  breakpoints after the read are stored.
- An entry lives for its TTL (5 minutes, or 1 hour for ``"ttl": "1h"``) after it was
  last written or read. A write is priced by the TTL of the breakpoint that stores it
  (``CacheUse.written_1h``, usage's ``cache_creation`` split).
- Tokens after the last breakpoint are plain input.
- What invalidates what follows the prompt-caching page's table: a change of the tools or the system
  prompt changes every later key (the hash runs on), and a change of ``tool_choice``, of the thinking
  mode or of ``output_config.effort`` (``settings``) changes the keys of the message blocks only.

The clock is injectable (``clock``), so tests move time instead of sleeping; the server wraps it in a
``clock.MovableClock`` that ``POST /clock`` moves forward, for tests that drive the double over HTTP.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workers.fake_api.counting import ONE_HOUR_S, Piece

LOOKBACK_PIECES = 20


@dataclass(frozen=True)
class CacheUse:
    read: int = 0
    written: int = 0  # all writes; usage's cache_creation_input_tokens
    plain: int = 0
    written_1h: int = 0  # the part of ``written`` stored under a 1-hour breakpoint (priced 2x, not 1.25x)

    @property
    def written_5m(self) -> int:
        return self.written - self.written_1h

    def cache_creation(self) -> dict[str, int]:
        """usage.cache_creation: the writes by TTL ("the current ``cache_creation_input_tokens`` field equals
        the sum of the values in the ``cache_creation`` object", prompt-caching page)."""
        return {"ephemeral_5m_input_tokens": self.written_5m, "ephemeral_1h_input_tokens": self.written_1h}

    def usage(self, output_tokens: int) -> dict[str, Any]:
        """A Messages API usage of this input and ``output_tokens`` (Claude-like): a reply's, or an iteration's."""
        return {"input_tokens": self.plain, "cache_creation_input_tokens": self.written,
                "cache_read_input_tokens": self.read, "output_tokens": output_tokens,
                "cache_creation": self.cache_creation()}


class PromptCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._expiry: dict[str, tuple[float, float]] = {}  # prefix hash -> (expires at, ttl)
        self._lock = threading.Lock()

    def account(self, pieces: Sequence[Piece], settings: str = "") -> CacheUse:
        """Split the request's input tokens into read, written and plain; remember the prefixes written.
        ``settings``: what the message blocks' cache depends on besides their content (see above).

        The prompt-caching page's billing positions: A, the highest cache hit any breakpoint finds (looking back
        up to ``LOOKBACK_PIECES`` from itself): everything up to it is read, whatever earlier breakpoints found;
        B, the last 1-hour breakpoint after A: 1-hour writes up to it; C, the last breakpoint: 5-minute writes
        up to it; plain input after C. Each breakpoint after A stores the prefix ending at it."""
        keys = _prefix_keys(pieces, settings)
        marks = [i for i, p in enumerate(pieces) if p.breakpoint_ttl_s is not None]
        tokens = [p.tokens for p in pieces]
        with self._lock:
            now = self.clock()
            self._expiry = {k: v for k, v in self._expiry.items() if v[0] > now}
            hits = [next((j for j in range(end, max(-1, end - LOOKBACK_PIECES - 1), -1) if keys[j] in self._expiry),
                         None) for end in marks]
            a = max((h for h in hits if h is not None), default=-1)
            if a >= 0:
                ttl = self._expiry[keys[a]][1]
                self._expiry[keys[a]] = (now + ttl, ttl)  # a read refreshes the entry for its own lifetime
            later = [end for end in marks if end > a]
            b = max((end for end in later if pieces[end].breakpoint_ttl_s >= ONE_HOUR_S), default=a)
            c = max(later, default=a)
            for end in later:
                if keys[end] not in self._expiry:
                    self._expiry[keys[end]] = (now + pieces[end].breakpoint_ttl_s, pieces[end].breakpoint_ttl_s)
        read, written_1h, written = sum(tokens[:a + 1]), sum(tokens[a + 1:b + 1]), sum(tokens[a + 1:c + 1])
        return CacheUse(read=read, written=written, plain=sum(tokens[c + 1:]), written_1h=written_1h)

    def clear(self) -> None:
        with self._lock:
            self._expiry.clear()


def _prefix_keys(pieces: Sequence[Piece], settings: str = "") -> list[str]:
    running = hashlib.sha256()
    keys, salted = [], False
    for piece in pieces:
        if piece.in_messages and not salted:  # from the first message block on, the settings count too
            running.update(f"settings:{settings}\x00".encode())
            salted = True
        running.update(piece.key.encode())
        running.update(b"\x00")  # pieces never merge: "ab"+"c" and "a"+"bc" hash apart
        keys.append(running.copy().hexdigest())
    return keys

"""What ``GET /stats`` reports: requests per endpoint and per model, token totals (cache writes split by TTL),
faults and errors served, preserved thinking, compaction and context editing, and the delay injected
(``latency``), so a benchmark can tell waiting from work."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict, deque
from typing import Any

from workers.fake_api.cache import CacheUse
from workers.fake_api.latency import Delay

RECENT_DELAYS = 100


class Stats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()  # "POST /v1/messages"
        self.models: Counter[str] = Counter()  # message and count_tokens requests by model id
        self.tokens: Counter[str] = Counter()  # cache_read, cache_write, input (plain), output
        self.by_purpose: dict[str, Counter[str]] = {}  # the same, for "step" and "summary" (text-only) requests
        self.stop_reasons: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()  # "400 invalid_request_error"
        self.delayed = 0  # message requests the latency settings delayed
        self.delay_s: defaultdict[str, float] = defaultdict(float)  # total_s, first_token_s, output_s, max_s
        self.delay_by_model: defaultdict[str, float] = defaultdict(float)  # model id -> seconds waited
        self.recent_delays: deque[float] = deque(maxlen=RECENT_DELAYS)  # bounded: a long benchmark stays small
        self.waiting = self.most_waiting = 0  # replies held back now, and the most ever held back at once
        # Preserved thinking: blocks produced (thinking, redacted), sent back, found valid, dropped (drop_block),
        # and requests refused by the prefix check (400)
        self.thinking: Counter[str] = Counter()
        # On-demand compaction: requests, blocks produced, empty answers, blocks sent back, and the thinking
        # sent back after a block (all of it is in kept turns or produced since): sent, valid, dropped, refused
        self.compaction: Counter[str] = Counter()
        self.editing: Counter[str] = Counter()  # context editing: requests, what the applied edits cleared
        self.system_messages = 0  # mid-conversation system messages in the message requests answered

    def request(self, endpoint: str) -> None:
        with self._lock:
            self.requests[endpoint] += 1

    def model(self, model_id: str) -> None:
        with self._lock:
            self.models[model_id] += 1

    def usage(self, cache: CacheUse, output_tokens: int, stop_reason: str, purpose: str = "step") -> None:
        with self._lock:
            counts = {"cache_read": cache.read, "cache_write": cache.written, "cache_write_5m": cache.written_5m,
                      "cache_write_1h": cache.written_1h, "input": cache.plain, "output": output_tokens}
            self.tokens.update(counts)
            self.by_purpose.setdefault(purpose, Counter()).update(counts | {"requests": 1})
            self.stop_reasons[stop_reason] += 1

    def system(self, count: int) -> None:
        with self._lock:
            self.system_messages += count

    def thinking_use(self, **counts: int) -> None:
        with self._lock:
            self.thinking.update(counts)

    def compaction_use(self, **counts: int) -> None:
        with self._lock:
            self.compaction.update(counts)

    def editing_use(self, applied: list[dict[str, Any]]) -> None:
        with self._lock:
            self.editing["requests"] += 1
            for edit in applied:
                self.editing.update({key: value for key, value in edit.items() if key != "type"})

    def fault(self, kind: str) -> None:
        with self._lock:
            self.faults[kind] += 1

    def error(self, status: int, error_type: str) -> None:
        with self._lock:
            self.errors[f"{status} {error_type}"] += 1

    def hold(self, change: int) -> None:
        """A reply starts (+1) or stops (-1) waiting out its delay: the peak says whether waits overlapped."""
        with self._lock:
            self.waiting += change
            self.most_waiting = max(self.most_waiting, self.waiting)

    def delay(self, model_id: str, delay: Delay) -> None:
        with self._lock:
            self.delayed += 1
            self.delay_s["total_s"] += delay.total_s
            self.delay_s["first_token_s"] += delay.first_token_s
            self.delay_s["output_s"] += delay.output_s
            self.delay_s["max_s"] = max(self.delay_s["max_s"], delay.total_s)
            self.recent_delays.append(delay.total_s)
            self.delay_by_model[model_id] += delay.total_s

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": dict(self.requests),
                "models": dict(self.models),
                "tokens": {key: self.tokens[key] for key in
                           ("cache_read", "cache_write", "cache_write_5m", "cache_write_1h", "input", "output")},
                "by_purpose": {purpose: dict(counts) for purpose, counts in self.by_purpose.items()},
                "stop_reasons": dict(self.stop_reasons),
                "faults": dict(self.faults),
                "errors": dict(self.errors),
                "thinking": {key: self.thinking[key] for key in
                             ("produced", "redacted_produced", "sent_back", "redacted_sent_back", "valid",
                              "dropped", "refused")},
                "compaction": {key: self.compaction[key] for key in
                               ("requests", "blocks", "empty", "blocks_sent_back", "thinking_sent",
                                "thinking_valid", "thinking_dropped", "thinking_refused")},
                "context_editing": {key: self.editing[key] for key in
                                    ("requests", "cleared_tool_uses", "cleared_thinking_turns",
                                     "cleared_input_tokens")},
                "system_messages": self.system_messages,
                "delay": self._delay_snapshot(),
            }

    def _delay_snapshot(self) -> dict[str, Any]:
        """Seconds the double waited on purpose (``latency``), apart from the time it took to answer."""
        return {
            "requests": self.delayed,
            **{key: self.delay_s[key] for key in ("total_s", "first_token_s", "output_s")},
            "mean_s": self.delay_s["total_s"] / self.delayed if self.delayed else 0.0,
            "max_s": self.delay_s["max_s"],
            "most_at_once": self.most_waiting,
            "by_model": dict(self.delay_by_model),
            "recent_s": list(self.recent_delays),  # the last RECENT_DELAYS waits, oldest first
        }

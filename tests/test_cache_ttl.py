"""The 1-hour cache TTL (context.cache_ttl): chosen when the expected idle repays the dearer write, and, through the
double with a clock that moves, Init's first request after an Execute turn longer than five minutes reads its prefix
from the cache."""

from __future__ import annotations

import json
import threading
import time

import pytest

from context.cache_rates import CacheRates
from context.cache_ttl import choose_ttl, long_idle_share
from tests.fake_api_support import run_example_through
from workers.fake_api.cache import PromptCache
from workers.fake_api.server import FakeApi, start

OPUS_5_5 = CacheRates.of(4.0, 0.20, 5.0, 8.0)


def test_an_agent_that_never_idles_keeps_five_minutes():
    assert choose_ttl([3.0] * 40, prefix_tokens=50_000, written_tokens=2_000, rates=OPUS_5_5, prior=0.0) == "5m"


def test_one_long_idle_a_turn_repays_the_hour_when_the_prefix_is_much_larger_than_the_step():
    gaps = [4.0] * 9 + [900.0]  # Init: nine quick steps, then Execute's 15-minute turn
    assert long_idle_share(gaps, prior=0.1) == pytest.approx(0.1)
    assert choose_ttl(gaps, prefix_tokens=60_000, written_tokens=2_000, rates=OPUS_5_5, prior=0.1) == "1h"
    # The same odds do not repay the dearer write of a step as large as the prefix.
    assert choose_ttl(gaps, prefix_tokens=10_000, written_tokens=8_000, rates=OPUS_5_5, prior=0.1) == "5m"


def test_idles_over_an_hour_outlive_either_entry_and_count_for_nothing():
    assert long_idle_share([7200.0] * 10, prior=0.0) == 0.0


def test_the_model_s_ratios_decide():
    gaps = [4.0] * 19 + [900.0]
    usual = CacheRates()  # a read at 0.1x: the rewrite saves less
    assert choose_ttl(gaps, 20_000, 1_000, CacheRates(read=1.2), prior=0.0) == "5m"  # reads dearer than writes
    assert choose_ttl(gaps, 20_000, 1_000, usual, prior=0.0) == "1h"


class JumpingClock:
    """The double's cache clock: real time, plus ten minutes each time the requests turn from Init to Execute,
    so each Execute turn lasts longer than a 5-minute entry lives."""

    def __init__(self) -> None:
        self.offset, self.last_role, self.lock = 0.0, "init", threading.Lock()

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def saw(self, role: str) -> None:
        with self.lock:
            if role == "execute" and self.last_role == "init":
                self.offset += 600.0
            self.last_role = role


@pytest.mark.slow
def test_init_reads_its_prefix_from_the_cache_after_an_execute_turn_longer_than_five_minutes(tmp_path):
    clock = JumpingClock()
    api = FakeApi(cache=PromptCache(clock=clock))
    asked: list[tuple[str, dict]] = []
    answer = api.messages

    def messages(body: bytes, headers: dict[str, str]):
        raw = json.loads(body)
        system = json.dumps(raw.get("system"))
        role = "execute" if "You are the Execute agent" in system else "init"
        clock.saw(role)
        reply = answer(body, headers)
        asked.append((role, reply.body.get("usage") or {}))
        return reply

    api.messages = messages  # type: ignore[method-assign]
    double = start(api)
    try:
        # Init's view stays append-only (a start size no context reaches: past it, baton's own compressor cuts an
        # earlier round to its ends, so a new turn would lay its prefix out anew anyway) and room enough that no
        # compaction falls on the turn's boundary (a summary rewrites the prefix whatever the cache holds).
        run_example_through(tmp_path, double.url, BATON_INIT_START_TOKENS="1000000000", BATON_INIT_WINDOW="60000",
                            BATON_INIT_THRESHOLD="40000")
    finally:
        double.stop()
    # Init's first request after each Execute turn: its prefix outlived the ten minutes in the cache.
    after_execute = [usage for (role, usage), (before, _) in zip(asked[1:], asked) if role == "init"
                     and before == "execute" and usage.get("input_tokens") is not None]
    assert after_execute, [role for role, _ in asked]
    for usage in after_execute:
        # The API's compaction (Init's compactor) reports its tokens in its iteration, not at the top level.
        usage = next((i for i in usage.get("iterations") or [] if i["type"] == "compaction"), usage)
        read, total = usage["cache_read_input_tokens"], (usage["input_tokens"] + usage["cache_read_input_tokens"]
                                                          + usage["cache_creation_input_tokens"])
        assert read > 0.5 * total, usage
    events = [json.loads(line) for line in
              (tmp_path / "refund_desk" / "state" / "init" / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "cache_prewarm" for e in events)  # written for an hour at the handoff

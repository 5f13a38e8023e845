"""The double prices a request's cache as the prompt-caching page's billing positions do: everything up to the
highest cache hit any breakpoint finds is a read (A), then 1-hour writes up to the last 1-hour breakpoint (B),
5-minute writes up to the last breakpoint (C), plain input after it."""

from workers.fake_api.cache import PromptCache
from workers.fake_api.counting import Piece


def pieces(n: int, marks: dict[int, float], salt: str = "") -> list[Piece]:
    return [Piece(key=f"block {i}{salt if i == n - 1 else ''}", tokens=100, breakpoint_ttl_s=marks.get(i),
                  in_messages=i > 1) for i in range(n)]


def test_a_later_breakpoint_s_hit_covers_what_earlier_breakpoints_missed():
    now = [0.0]
    cache = PromptCache(clock=lambda: now[0])
    # A request writes its whole prefix for an hour at its last breakpoint; its earlier ones for five minutes.
    first = cache.account(pieces(10, {1: 300.0, 5: 300.0, 9: 3600.0}))
    assert (first.read, first.written) == (0, 1000)
    now[0] = 600.0  # the 5-minute entries are gone, the hour-long one is not
    # The next request extends it: its earlier breakpoints find nothing, its last one finds the hour-long entry.
    second = cache.account(pieces(12, {1: 300.0, 5: 300.0, 11: 300.0}, salt="x"))
    assert second.read == 1000 and second.written == 200 and second.plain == 0


def test_one_hour_writes_come_before_five_minute_ones():
    cache = PromptCache(clock=lambda: 0.0)
    use = cache.account(pieces(10, {3: 3600.0, 9: 300.0}))
    assert (use.written_1h, use.written_5m, use.plain) == (400, 600, 0)

"""Which TTL a request's cache breakpoints get: five minutes, or an hour when the idle it expects repays it.

A cache entry lives five minutes from the start of the request that wrote or last read it, or an hour for a
``"ttl": "1h"`` breakpoint, whose write costs 2x input instead of 1.25x (platform docs, "Prompt caching").
An agent that idles past five minutes after a request (Init through Execute's whole turn; a step waiting on a
long tool or on the queue) finds its prefix gone and writes all of it again. So a request marks its
breakpoints for an hour when

    P(the next request starts 5 to 60 minutes after this one) x prefix x (write - read)
        >  (write_1h - write) x tokens this request writes,

the left side what the expected rewrite would cost, the right what the dearer write costs for sure. The
probability is measured from the agent's own gaps (start to start, in its step events), smoothed by a prior
of the role's (Init idles once a turn, after its handoff); the ratios are the model's (``CacheRates``). Every
breakpoint of the request gets the same TTL: the API wants 1-hour entries before 5-minute ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from context.cache_rates import CacheRates

FIVE_MINUTES_S, ONE_HOUR_S = 300.0, 3600.0
PRIOR_WEIGHT = 10.0  # the prior counts as this many gaps, so ten measured ones outweigh it


def long_idle_share(gaps_s: Sequence[float], prior: float) -> float:
    """The chance that the next gap is over five minutes and within the hour, from the measured gaps and a prior."""
    long = sum(1 for gap in gaps_s if FIVE_MINUTES_S < gap <= ONE_HOUR_S)
    return (long + prior * PRIOR_WEIGHT) / (len(gaps_s) + PRIOR_WEIGHT)


def choose_ttl(gaps_s: Sequence[float], prefix_tokens: int, written_tokens: int, rates: CacheRates,
               prior: float) -> str:
    """ "1h" when the expected saving of an hour-long entry repays its dearer write, else "5m"."""
    saving = long_idle_share(gaps_s, prior) * prefix_tokens * (rates.write - rates.read)
    extra = (rates.write_1h - rates.write) * written_tokens
    return "1h" if saving > extra else "5m"

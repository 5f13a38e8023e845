"""What a model's tokens cost, by kind: input, cache writes, cache reads, output (docs/agents.md, "What a run spends").

Prices are US dollars per million tokens from the published model pages
(platform.claude.com/docs/models/<model>/overview, November 2026; 5-minute cache
writes). A scenario overrides or adds prices in scenario.toml::

    [prices.claude-opus-5-5]
    input = 4.0
    output = 20.0
    cache_write = 5.0
    cache_read = 0.2

A model priced by prompt size (Haiku 5.5) has a second tier: every token of a call
whose prompt is over ``long_above`` tokens is billed at ``long``'s rates, output
included. The prompt is what the call read: input, cache writes and cache reads
together, as the pricing page counts it. So a call's cost depends on that call's
own prompt, and a sum of calls is priced call by call (``workers/spend.py``)::

    [prices.claude-haiku-5-5]
    input = 0.10
    output = 0.50
    cache_write = 0.125
    cache_read = 0.01
    long_above = 100_000
    long = {input = 0.50, output = 2.50, cache_write = 0.625, cache_read = 0.05}

A model with no price on file has no cost (``None``), never a cost of zero: a
total that silently left it out would look cheaper than it was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Rates(BaseModel):
    """US dollars per million tokens, by kind."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # A million dollars per million tokens is far above any price: a bound so a typo cannot make spend infinite.
    input: float = Field(ge=0, le=1_000_000)
    output: float = Field(ge=0, le=1_000_000)
    cache_write: float = Field(ge=0, le=1_000_000)
    cache_read: float = Field(ge=0, le=1_000_000)


class Price(Rates):
    """A model's rates; with ``long_above`` and ``long``, a second tier for calls with a longer prompt."""

    long_above: int | None = Field(None, gt=0)  # prompt tokens; a prompt of exactly this many is still short
    long: Rates | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> Price:
        if (self.long_above is None) != (self.long is None):
            raise ValueError("long_above and long go together: the prompt size over which the long rates apply, "
                             "and those rates")
        return self

    def for_prompt(self, prompt_tokens: int) -> Rates:
        """The rates of a call whose prompt (input, cache writes and cache reads) is ``prompt_tokens``."""
        if self.long is not None and self.long_above is not None and prompt_tokens > self.long_above:
            return self.long
        return self


def _standard(input: float, output: float) -> Price:
    # The usual ratios: a 5-minute cache write costs 1.25x input, a read 0.1x.
    return Price(input=input, output=output, cache_write=input * 1.25, cache_read=input * 0.1)


DEFAULT_PRICES: dict[str, Price] = {
    # Opus 5.5 reads its cache at 0.05x input, not the usual 0.1x (its model page).
    "claude-opus-5-5": Price(input=4.0, output=20.0, cache_write=5.0, cache_read=0.20),
    "claude-opus-5": Price(input=5.0, output=25.0, cache_write=6.25, cache_read=0.50),
    # Sonnet 5.5's cache reads were cut to 0.05x input ($0.10) on 2026-10-07 (the Sonnet 5.5 migration guide,
    # https://platform.claude.com/docs/en/models/sonnet-5-5/migration-guide); Sonnet 5 keeps 0.1x.
    "claude-sonnet-5-5": Price(input=2.0, output=10.0, cache_write=2.50, cache_read=0.10),
    "claude-sonnet-5": Price(input=2.0, output=10.0, cache_write=2.50, cache_read=0.20),
    "claude-opus-4-6": _standard(5.0, 25.0),
    "claude-opus-4-5": _standard(5.0, 25.0),
    "claude-sonnet-4-6": _standard(3.0, 15.0),
    "claude-sonnet-4-5": _standard(3.0, 15.0),
    "claude-haiku-4-5": _standard(1.0, 5.0),
    # Two tiers by prompt size: up to 100,000 tokens, and over (every token of such a call, output included).
    # https://platform.claude.com/docs/en/models/haiku-5-5/overview ("Pricing")
    "claude-haiku-5-5": Price(input=0.10, output=0.50, cache_write=0.125, cache_read=0.01, long_above=100_000,
                              long=Rates(input=0.50, output=2.50, cache_write=0.625, cache_read=0.05)),
}

_DATED = re.compile(r"-\d{8}$")  # claude-opus-4-5-20251101 is priced as claude-opus-4-5


def price_for(model_id: str | None, overrides: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model_id``: a scenario's override, else the default table, else None."""
    if not model_id:
        return None
    table = {**DEFAULT_PRICES, **(overrides or {})}
    return table.get(model_id) or table.get(_DATED.sub("", model_id))


class Tokens(BaseModel):
    """Tokens by kind, as the API's ``usage`` reports them."""

    input: int = 0
    cache_write: int = 0
    cache_read: int = 0
    output: int = 0

    @classmethod
    def of(cls, usage: Mapping[str, Any] | BaseModel | None) -> Tokens:
        raw = usage.model_dump() if isinstance(usage, BaseModel) else dict(usage or {})
        return cls(input=raw.get("input_tokens") or 0, cache_write=raw.get("cache_creation_input_tokens") or 0,
                   cache_read=raw.get("cache_read_input_tokens") or 0, output=raw.get("output_tokens") or 0)

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(input=self.input + other.input, cache_write=self.cache_write + other.cache_write,
                      cache_read=self.cache_read + other.cache_read, output=self.output + other.output)

    @property
    def prompt(self) -> int:
        """Every token the call read: what decides a tiered price's tier."""
        return self.input + self.cache_write + self.cache_read

    def cost(self, price: Price | None, calls: int = 1) -> float | None:
        """US dollars of one call (its prompt picks a tiered price's tier), or None without a price. With
        ``calls``, of that many calls summed whose prompts are not known one by one (Inspect's usage of a gate):
        priced at the tier of their mean prompt, an estimate where the price has tiers."""
        if price is None:
            return None
        rates = price.for_prompt(self.prompt // max(calls, 1))
        dollars = (self.input * rates.input + self.cache_write * rates.cache_write
                   + self.cache_read * rates.cache_read + self.output * rates.output)
        return dollars / 1_000_000

    def uncached_cost(self, price: Price | None, calls: int = 1) -> float | None:
        """What the same call would have cost with no prompt cache: every input token at the input price."""
        if price is None:
            return None
        rates = price.for_prompt(self.prompt // max(calls, 1))  # the same prompt, so the same tier
        return (self.prompt * rates.input + self.output * rates.output) / 1_000_000

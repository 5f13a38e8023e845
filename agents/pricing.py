"""What a model's tokens cost, by kind: input, cache writes, cache reads, output (docs/agents.md, "What a run spends").

Prices are US dollars per million tokens from the published model pages
(platform.claude.com/docs/models/<model>/overview, November 2026). ``cache_write`` is
a 5-minute cache write; ``cache_write_1h``, a 1-hour one, is 2x input unless given (the
prompt-caching docs' ratio). A scenario overrides or adds prices in scenario.toml::

    [prices.claude-opus-5-5]
    input = 4.0
    output = 20.0
    cache_write = 5.0
    cache_write_1h = 8.0
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

from context.messages import Usage, UsageIteration

# A million dollars per million tokens is far above any price: a bound so a typo cannot make spend infinite.
_MOST = 1_000_000


class Rates(BaseModel):
    """US dollars per million tokens, by kind."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    input: float = Field(ge=0, le=_MOST)
    output: float = Field(ge=0, le=_MOST)
    cache_write: float = Field(ge=0, le=_MOST)  # a 5-minute cache write
    # A 1-hour cache write. Not given: 2x input, filled in before validation (``_hour_write_from_input``).
    # The None default is only left when ``input`` itself is missing or invalid, and so is refused anyway.
    cache_write_1h: float = Field(None, ge=0, le=2 * _MOST, validate_default=False)  # type: ignore[assignment]
    cache_read: float = Field(ge=0, le=_MOST)

    @model_validator(mode="before")
    @classmethod
    def _hour_write_from_input(cls, data: Any) -> Any:
        # The prompt-caching docs price every model's 1-hour write at 2x its input, so a price that names
        # only the 5-minute write (every one written before the split was read) still prices the 1-hour kind.
        # Only from a valid input: a bad one is reported as itself, not again as a 1-hour price never written.
        if isinstance(data, dict) and data.get("cache_write_1h") is None:
            input = data.get("input")
            if isinstance(input, (int, float)) and not isinstance(input, bool) and 0 <= input <= _MOST:
                return {**data, "cache_write_1h": 2 * input}
        return data


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
    # The usual ratios: a 5-minute cache write costs 1.25x input, a read 0.1x (a 1-hour write, 2x, is Rates').
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
    """Tokens by kind, as the API's ``usage`` reports them: ``cache_write`` the 5-minute cache writes,
    ``cache_write_1h`` the 1-hour ones."""

    input: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0
    cache_read: int = 0
    output: int = 0

    @classmethod
    def of(cls, usage: Mapping[str, Any] | BaseModel | None) -> Tokens:
        """A response's tokens: its top-level counts plus its compaction iterations (``calls``)."""
        first, *compactions = cls.calls(usage)
        return sum(compactions, first)

    @classmethod
    def calls(cls, usage: Mapping[str, Any] | BaseModel | None) -> list[Tokens]:
        """The requests a response billed: its top-level counts, then each compaction iteration, which the API
        bills but leaves out of the top level (its ``message`` iterations are in it already, so are not added).
        A compaction is its own server-side request, so a tiered price picks its tier by its own prompt."""
        raw = usage if isinstance(usage, Usage) else Usage.model_validate(
            usage.model_dump() if isinstance(usage, BaseModel) else dict(usage or {}))
        return [cls._counted(raw), *(cls._counted(part) for part in raw.compactions)]

    @classmethod
    def _counted(cls, counts: UsageIteration | Usage) -> Tokens:
        return cls(input=counts.input_tokens, cache_write=counts.cache_write_5m, cache_write_1h=counts.cache_write_1h,
                   cache_read=counts.cache_read_input_tokens, output=counts.output_tokens)

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(input=self.input + other.input, cache_write=self.cache_write + other.cache_write,
                      cache_write_1h=self.cache_write_1h + other.cache_write_1h,
                      cache_read=self.cache_read + other.cache_read, output=self.output + other.output)

    @property
    def prompt(self) -> int:
        """Every token the call read: what decides a tiered price's tier."""
        return self.input + self.cache_write + self.cache_write_1h + self.cache_read

    def cost(self, price: Price | None, calls: int = 1) -> float | None:
        """US dollars of one call (its prompt picks a tiered price's tier), or None without a price. With
        ``calls``, of that many calls summed whose prompts are not known one by one (Inspect's usage of a gate):
        priced at the tier of their mean prompt, an estimate where the price has tiers."""
        if price is None:
            return None
        rates = price.for_prompt(self.prompt // max(calls, 1))
        dollars = (self.input * rates.input + self.cache_write * rates.cache_write
                   + self.cache_write_1h * rates.cache_write_1h + self.cache_read * rates.cache_read
                   + self.output * rates.output)
        return dollars / 1_000_000

    def uncached_cost(self, price: Price | None, calls: int = 1) -> float | None:
        """What the same call would have cost with no prompt cache: every input token at the input price."""
        if price is None:
            return None
        rates = price.for_prompt(self.prompt // max(calls, 1))  # the same prompt, so the same tier
        return (self.prompt * rates.input + self.output * rates.output) / 1_000_000

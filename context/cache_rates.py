"""What the prompt cache costs relative to base input, per model: the payback rule and the TTL choice read it.

The API's usual ratios are a read at 0.1x, a 5-minute write at 1.25x and a 1-hour write at 2x (platform docs,
"Prompt caching", "Pricing"); Opus 5.5 and Sonnet 5.5 read at 0.05x. An agent's ratios come from its
model's price (``agents.pricing``, ``CacheRates.of``); without one, the usual ratios stand.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CacheRates(BaseModel):
    """Cache reads and writes as multiples of the base input price."""

    model_config = ConfigDict(frozen=True)
    read: float = Field(0.1, ge=0)
    write: float = Field(1.25, ge=0)  # a 5-minute entry
    write_1h: float = Field(2.0, ge=0)

    @classmethod
    def of(cls, input: float, cache_read: float, cache_write: float, cache_write_1h: float | None = None
           ) -> CacheRates:
        """The ratios of a price in dollars per million tokens (a free input price leaves the usual ones)."""
        if input <= 0:
            return cls()
        return cls(read=cache_read / input, write=cache_write / input,
                   write_1h=(cache_write_1h if cache_write_1h is not None else 2 * input) / input)

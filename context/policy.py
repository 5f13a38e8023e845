"""How an agent's context is kept: the limits, the layers' parameters and the strategies by name.

An agent's settings hold one ``Policy`` as their ``context`` section (``agents.config``);
the assembler reads it on every call. See docs/context.md.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from context.strategies import COMPACTORS, COMPRESSORS, check_name

# Upper bounds, far above any real setting, so a mistyped one (1e18) is refused where it is read rather
# than overflowing a count or a list size later.
MAX_TOKENS = 10_000_000  # ten times today's largest window
MAX_CHARS = 100_000_000
MAX_COUNT = 1_000_000


class Policy(BaseModel):
    """How an agent's context is kept: the limits, the layers' parameters and the strategies by name."""

    model_config = ConfigDict(frozen=True)
    window: int = Field(1_000_000, gt=0, le=MAX_TOKENS, description="hard context limit in tokens")
    threshold: int = Field(700_000, gt=0, le=MAX_TOKENS, description="compact when the estimated input passes this")
    keep_last_steps: int = Field(5, ge=1, le=MAX_COUNT, description="N: steps kept verbatim")
    batch: int = Field(5, ge=1, le=MAX_COUNT, description="B: steps compressed at a time (hysteresis)")
    # B, the start size and the payback horizon were chosen by bench/context_replay.py
    # (docs/benchmarks.md): the best worst case over the three recorded data sets.
    start_tokens: int = Field(  # a start beyond any window (1e9) is a way to say "never"
        10_000, ge=0, le=MAX_TOKENS * 100_000, description="layers 3 and 4 wait until the context passes this"
    )
    payback_calls: int = Field(
        30, ge=0, le=MAX_COUNT,
        description="compress a batch only if its saving repays the cache rewrite within this many calls (0: always)",
    )
    max_tokens: int = Field(
        8_192, gt=0, le=MAX_TOKENS, description="output reserved in the window (rule 3), thinking included"
    )
    result_cap_chars: int = Field(
        40_000, gt=0, le=MAX_CHARS, description="verbatim results over this are cut to head + tail"
    )
    kept_cap_chars: int = Field(5_000, gt=0, le=MAX_CHARS, description="cap for results of steps kept by a compaction")
    read_lines: int = Field(
        10, ge=0, le=MAX_COUNT, description="lines of an older Read result kept in its compressed form"
    )
    opening_cap_chars: int = Field(
        10_000, ge=0, le=MAX_CHARS,
        description="after a compaction, the opening of the round it cut is pinned after the summary, "
                    "cut to this many characters (0: not pinned)",
    )
    min_verbatim_steps: int = Field(2, ge=1, le=MAX_COUNT, description="emergency trim never goes below this")
    compressor: str = Field("per_tool", description="how older tool results shrink: a name in COMPRESSORS")
    compactor: str = Field("summary", description="when and how the context is compacted: a name in COMPACTORS")
    todo_recap: bool = Field(True, description="bring the agent's TodoWrite list back into view as a new message")
    recap_every_steps: int = Field(
        8, ge=1, le=MAX_COUNT,
        description="the todo recap is appended once the plan has been out of view for this many steps",
    )
    summary_cap_share: float = Field(
        0.15, ge=0, lt=1, description="a summary over this share of the threshold is condensed (0: never)"
    )

    @field_validator("compressor")
    @classmethod
    def _known_compressor(cls, name: str) -> str:
        return check_name("compressor", name, COMPRESSORS)

    @field_validator("compactor")
    @classmethod
    def _known_compactor(cls, name: str) -> str:
        return check_name("compactor", name, COMPACTORS)

    @model_validator(mode="after")
    def _threshold_below_window(self) -> "Policy":
        if self.threshold >= self.window:
            raise ValueError(f"threshold ({self.threshold}) must be below window ({self.window})")
        if self.max_tokens >= self.window:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be below window ({self.window})")
        return self

    def may_compact_again(self, left: int | None, steps_since: int, tokens: int) -> bool:
        """Whether another compaction is worth a model call, the last one having left ``left`` tokens (None: there
        was none), ``steps_since`` steps ago, with ``tokens`` in the context now.

        When the last compaction could not bring the context under the threshold (the kept steps alone are that
        large), compacting after every step would only thrash: wait until the kept steps have all been replaced,
        unless the window would have no room for two more replies. The emergency trim only shortens tool results,
        and the kept turns of an API compaction, or steps of large writes, can outgrow the window before then
        (and then not even a compaction request fits); compacting earlier covers the oldest kept steps."""
        if left is None or left < self.threshold:
            return True
        if tokens + 2 * self.max_tokens > self.window:
            return True
        return steps_since >= self.keep_last_steps

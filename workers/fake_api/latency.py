"""Injected latency: how long the double waits before it answers a message request.

With a real model a step is mostly waiting on the API, so a benchmark against the double
should wait too. A message reply comes after

    base ± jitter (time to first token, uniform, from a seeded RNG) + output_tokens / speed

where ``speed`` (output tokens per second) is the model's own (``--output-speed
claude-opus-5-5=40``), else the default one (``--output-speed 80``), else none (no output
time). Only ``POST /v1/messages`` waits: ``count_tokens`` and the models endpoints answer at
once, as the real ones are fast. The option text is parsed here, with errors that say
what was wrong and what to write instead (``command`` turns them into CLI errors).
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)\s*$")
LATENCY_HINT = "use e.g. 2s, 1500ms or 2s,0.5s (a base and a ± jitter)"
SPEED_HINT = "use tokens per second, e.g. 80, or per model, e.g. claude-sonnet-5-5=80,claude-opus-5-5=40"


class LatencyError(ValueError):
    """A ``--latency`` or ``--output-speed`` value that does not parse; the message says what to write."""


@dataclass(frozen=True)
class Delay:
    """One request's wait, in seconds: the time to first token and the time to generate the output."""

    first_token_s: float = 0.0
    output_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.first_token_s + self.output_s


@dataclass
class Latency:
    """The delay settings and the seeded RNG for the jitter; the zero default waits for nothing."""

    base_s: float = 0.0
    jitter_s: float = 0.0
    default_speed: float | None = None  # output tokens per second for models without their own
    speeds: dict[str, float] = field(default_factory=dict)  # model id -> output tokens per second
    seed: int = 0  # a fixed default: two runs with the same settings draw the same jitters
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.jitter_s < 0:
            raise LatencyError(f"latency {self.base_s}s ± {self.jitter_s}s: both must be 0 or more")
        if self.jitter_s > self.base_s:
            # Clamping negative draws to 0 would skew the mean away from base_s.
            raise LatencyError(f"--latency: the jitter {self.jitter_s:g}s is larger than the base {self.base_s:g}s, "
                               "so a delay could be negative; make the jitter at most the base")
        speeds = [*self.speeds.values(), *([] if self.default_speed is None else [self.default_speed])]
        if any(not speed > 0 for speed in speeds):
            raise LatencyError(f"--output-speed: a speed must be above 0; {SPEED_HINT}")
        self._rng = random.Random(self.seed)

    @property
    def active(self) -> bool:
        return self.base_s > 0 or self.default_speed is not None or bool(self.speeds)

    def delay(self, model_id: str, output_tokens: int) -> Delay:
        """The wait for one reply of ``output_tokens`` from ``model_id``."""
        first = self.base_s
        if self.jitter_s:
            # Under a lock: the server's threads share the RNG, and one seed must give one sequence of draws
            # (which request gets which draw still follows the order requests arrive in).
            with self._lock:
                first += self._rng.uniform(-self.jitter_s, self.jitter_s)
        speed = self.speeds.get(model_id, self.default_speed)
        return Delay(first_token_s=first, output_s=output_tokens / speed if speed else 0.0)


def parse_duration(text: str, option: str = "--latency", whole: str | None = None) -> float:
    """``2s``, ``0.5s`` or ``1500ms`` in seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise LatencyError(f"{option}: {(whole or text)!r} is not a duration; {LATENCY_HINT}")
    value = float(match.group(1))
    return value / 1000 if match.group(2) == "ms" else value


def parse_latency(text: str) -> tuple[float, float]:
    """``BASE`` or ``BASE,JITTER`` (``--latency 2s`` or ``--latency 1.5s,0.5s``) as (base_s, jitter_s)."""
    parts = text.split(",")
    if len(parts) > 2:
        raise LatencyError(f"--latency: {text!r} has {len(parts)} parts; {LATENCY_HINT}")
    base = parse_duration(parts[0], whole=text)
    jitter = parse_duration(parts[1], whole=text) if len(parts) == 2 else 0.0
    return base, jitter


def parse_output_speed(text: str, known_models: Iterable[str]) -> tuple[float | None, dict[str, float]]:
    """``80`` (every model) and/or ``MODEL=80`` items, comma-separated, as (default speed, speed per model)."""
    known = set(known_models)
    default: float | None = None
    speeds: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        model_id, _, number = item.partition("=") if "=" in item else (None, "", item)
        try:
            speed = float(number)
        except ValueError:
            where = "" if number.strip() == text.strip() else f" in {text!r}"
            raise LatencyError(f"--output-speed: {number.strip()!r}{where} is not a number; {SPEED_HINT}") from None
        if not speed > 0 or speed == float("inf"):
            raise LatencyError(f"--output-speed: {number.strip()!r} must be a finite speed above 0; {SPEED_HINT}")
        if model_id is None:
            if default is not None:
                raise LatencyError(f"--output-speed: {text!r} gives two speeds for all models; give one")
            default = speed
            continue
        model_id = model_id.strip()
        if model_id not in known:
            raise LatencyError(f"--output-speed: {model_id!r} is not a model of the catalogue; "
                               f"use one of: {', '.join(sorted(known))}")
        speeds[model_id] = speed
    return default, speeds

"""The progress line of an iteration's gates in the CLI (``baton run``, ``baton evaluate``): samples done of
the samples in all, per gate, shown when it changes and at most every ``EVERY_S`` seconds (and at each gate's end),
so that a benchmark's hundreds of samples make a line every few seconds, not one each."""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text

from agents.config import ConfigError
from agents.settings_layers import proving_settings
from proving.evaluation.gate_shards import progress_line
from scenarios.run import load_run
from scenarios.store import StoreError
from workers.render import say

EVERY_S = 2.0


class GateLine:
    """``» iteration 1 gates (samples done): floor 20/30, mutation 10/30, ...`` while a run is being proved, from
    the shards' files on disk (an embedded run's or the workers')."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.last: str | None = None
        self.at = 0.0

    def show(self, *_: object) -> None:
        try:
            record = load_run(self.root)
            if record is None or record.phase != "proving":
                return
            line = progress_line(self.root, record.iteration, proving_settings(self.root))
        except (ConfigError, StoreError, ValueError, OSError):
            return  # the run's own errors are told where the run reads them
        if line is None or line == self.last or time.monotonic() - self.at < EVERY_S:
            return
        self.last, self.at = line, time.monotonic()
        say(Text(f"» iteration {record.iteration} {line}"))


class EvaluateLine:
    """``baton evaluate``'s gates, run in its own process (``prove``'s ``on_progress``)."""

    def __init__(self) -> None:
        self.at = 0.0

    def __call__(self, gate: str, done: int, total: int) -> None:
        finished = done >= total
        if not finished and time.monotonic() - self.at < EVERY_S:
            return
        self.at = time.monotonic()
        say(Text(f"» gates: {gate} {done}/{total} samples" + (" (done)" if finished else "")))

"""How fast `context.redaction.redact` runs on clean, secret-laden and pathological text.

    python bench/redaction_speed.py [--out docs/benchmarks.md] [--mb 10] [--repeat 5]

Redaction runs on every message appended to a history, tool results of tens of
MB included, so every rule must be linear. Inputs, each timed `--repeat` times
(the best run counts: the machine is shared, and slower runs measure the
neighbours):

* *look-alikes*: the look-alikes of tests/secret_corpus.py (hashes, base64
  images, API error texts, code, prose about passwords) repeated to `--mb` MB;
  nothing is replaced, so this is the cost on every clean message;
* *mixed*: three copies of those look-alikes for every copy of the corpus's
  secrets, to `--mb` MB: every rule replaces something;
* *pathological*: the strings of tests/test_secret_corpus.py built to make a
  regex backtrack (1 MB each); the slowest is reported.

The corpus figures (secrets caught, look-alikes changed) are printed too.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_DOC, md_table, write_section  # noqa: E402

from context.redaction import REDACTED, redact  # noqa: E402
from tests.secret_corpus import NEGATIVES, POSITIVES, score  # noqa: E402
from tests.test_secret_corpus import PATHOLOGICAL  # noqa: E402


def _repeat_to(text: str, size: int) -> str:
    return text * (size // len(text) + 1)


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(mb: float, repeat: int) -> list[list[str]]:
    size = int(mb * 1_000_000)
    clean = "\n".join(text for _, text in NEGATIVES) + "\n"
    secrets = "\n".join(entry.text for entry in POSITIVES) + "\n"
    inputs = {"look-alikes": _repeat_to(clean, size), "mixed": _repeat_to(clean * 3 + secrets, size)}
    rows = []
    for name, text in inputs.items():
        seconds = best_of(lambda: redact(text), repeat)
        rows.append([name, f"{len(text) / 1e6:.1f}", f"{seconds:.3f}", f"{len(text) / 1e6 / seconds:.1f}"])
    slowest = max(
        ((best_of(lambda: redact(text), repeat), i, len(text)) for i, text in enumerate(PATHOLOGICAL)),
    )
    seconds, index, length = slowest
    rows.append([f"pathological (slowest of {len(PATHOLOGICAL)}: #{index})", f"{length / 1e6:.1f}",
                 f"{seconds:.3f}", f"{length / 1e6 / seconds:.1f}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=10.0, help="size of the look-alike and mixed inputs (MB)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per input; the best counts")
    ap.add_argument("--out", default=None, help=f"also write the redaction-speed section of this file ({DEFAULT_DOC})")
    args = ap.parse_args(argv)
    figures = score(redact, REDACTED)
    table = md_table(["input", "MB", "best s", "MB/s"], measure(args.mb, args.repeat))
    print(f"corpus: {figures.line()}\n{table}")
    if args.out:
        body = "\n".join([
            "## Redaction speed",
            "",
            f"Command: `python bench/redaction_speed.py --out {args.out}` (Python {platform.python_version()}, "
            f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.1f} at the end: the machine is shared; "
            f"best of {args.repeat} runs). `redact` on the corpus look-alikes repeated to {args.mb:g} MB (nothing "
            "to replace), on look-alikes mixed with the corpus secrets (every rule replaces), and on the "
            "pathological strings of tests/test_secret_corpus.py (1 MB each, the slowest shown).",
            "",
            table,
            "",
            f"Corpus (tests/secret_corpus.py): {figures.line()}.",
        ])
        write_section(Path(args.out), "redaction-speed", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

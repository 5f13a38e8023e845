"""What the sandbox costs an evaluation: the refund_desk example's last iteration (10 samples),
evaluated in-process with and without the sandbox, forked from the sample server and
spawned afresh, each way several times in turn (docs/benchmarks.md, "Sandbox cost").

Usage: ``python bench/sandbox_cost.py [--rounds 5] [--data-mb 5] [--out docs/benchmarks.md]``. Runs the
example first with the simulated model, in a temporary folder. ``--data-mb N`` pads the iteration's
``tools/data.json`` to about N MB (a list of small records under a key no checker reads), so what a
sample's data costs to copy in, load, and carry back in its result is measured too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import md_table, write_section  # noqa: E402
from bench.example_run import example, grow, last_iteration  # noqa: E402
from proving import startup  # noqa: E402
from proving.evaluation import fork_server  # noqa: E402
from proving.evaluation.run import run_evaluation  # noqa: E402
from proving.sandbox import cgroup  # noqa: E402

WAYS = {  # name: (BATON_EVAL_SANDBOX, BATON_SAMPLE_SERVER)
    "sandbox, forked": ("bwrap", "1"),
    "sandbox, spawned": ("bwrap", "0"),
    "unconfined, forked": ("none", "1"),
    "unconfined, spawned": ("none", "0"),
}




def one(root: Path, iteration: int, way: str) -> float:
    """Wall seconds of one evaluation, a fresh sample server's start included. (Not CPU: bwrap does not
    wait for its sandbox's processes in a way that hands their CPU time to the worker's rusage.)"""
    os.environ["BATON_EVAL_SANDBOX"], os.environ[fork_server.SERVER_ENV] = WAYS[way]
    startup.fix()  # each way is a start of its own: baton reads its confinement settings once, at start
    started = time.monotonic()
    report = run_evaluation(root, iteration, timeout_s=10, memory_mb=512)
    if fork_server._server is not None:  # noqa: SLF001 - the next way starts its own
        fork_server._server.close()  # noqa: SLF001
        fork_server._server = None  # noqa: SLF001
    assert report["passed"] == report["total"], report["failures"]
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--data-mb", type=float, default=0.0, help="pad tools/data.json to about this many MB")
    ap.add_argument("--out", default=None, help="write the section into this Markdown file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = example(Path(tmp))
        iteration = last_iteration(root)
        out = root / "execution_outputs" / f"iteration_{iteration}"
        samples = len(list((out / "samples").glob("*.json")))
        data_bytes = grow(out / "tools", args.data_mb) if args.data_mb else (out / "tools/data.json").stat().st_size
        measured: dict[str, list[float]] = {way: [] for way in WAYS}
        for _ in range(args.rounds):
            for way in WAYS:  # in turn, so the machine's load falls on every way alike
                measured[way].append(one(root, iteration, way))
    rows = [[way, f"{statistics.median(runs) / samples * 1000:.0f}", f"{min(runs) / samples * 1000:.0f}"]
            for way, runs in measured.items()]
    padded = f" --data-mb {args.data_mb:g}" if args.data_mb else ""
    body = (
        "## Sandbox cost\n\n"
        f"The refund_desk example's last iteration ({samples} samples, tools/data.json {data_bytes:,} bytes) "
        f"evaluated {args.rounds} times each way, "
        f"the ways in turn; per sample, including a fresh sample server's start where one is used. "
        f"cgroups here: {'yes' if cgroup.available() else 'no'}. "
        f"Command: `python bench/sandbox_cost.py --rounds {args.rounds}{padded} --out docs/benchmarks.md`.\n\n"
        + md_table(["way", "wall ms/sample (median)", "wall ms/sample (best)"], rows)
    )
    print(body)
    if args.out:
        write_section(Path(args.out), "sandbox_cost", body)


if __name__ == "__main__":
    main()

"""What the floor and mutation gates cost an iteration (docs/benchmarks.md, "Floor and mutation gates").

The refund_desk example is run (simulated model); then each gate runs alone on a fresh copy of its final
iteration (the export is built inside the gate, as in the first gate of a ``prove()``), once as it is and
once with data.json grown to about 5 MB (filler customers the samples never touch). Each gate is one Inspect
eval of all its runs with Inspect's ``mockllm/model``: no model request, no token. What it costs is the
sandbox: one ``exec`` per tool call and one per judgement, counted from the eval's log.

Usage: ``python bench/gates_cost.py [--data-mb 5] [--out docs/benchmarks.md]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import md_table, write_section  # noqa: E402
from bench.example_run import example, grow, last_iteration  # noqa: E402
from proving.evaluation.gates import ProvingSettings, prove  # noqa: E402


def measure(source: Path, gate: str, megabytes: float, work: Path) -> list[object]:
    root = work / f"{gate}-{megabytes}" / "refund_desk"
    shutil.copytree(source, root)
    iteration = last_iteration(root)
    if megabytes:
        grow(root / "execution_outputs" / f"iteration_{iteration}" / "tools", megabytes)
    size = (root / "execution_outputs" / f"iteration_{iteration}" / "tools" / "data.json").stat().st_size
    started = time.monotonic()
    quality = prove(root, iteration, ProvingSettings(gates=[gate]))
    wall = time.monotonic() - started
    if gate not in quality.ran:
        raise SystemExit(f"{gate} did not run: {quality.skipped}")
    runs = json.loads((root / "execution_outputs" / f"iteration_{iteration}" / "proving_logs" /
                       f"{gate}_runs.json").read_text())["runs"]
    from inspect_ai.log import read_eval_log

    (log_path,) = (root / "execution_outputs" / f"iteration_{iteration}" / "proving_logs").glob("*.eval")
    log = read_eval_log(str(log_path))
    calls = sum(len((s.store or {}).get("baton:calls") or []) for s in log.samples or [])
    figure = quality.figures.floor if gate == "floor" else quality.figures.mutation_score
    return [gate, f"{size / 1e3:,.0f} kB", len(runs), calls, len(runs), 0, f"{wall:.1f} s", figure,
            len(quality.findings)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-mb", type=float, default=5.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="baton-gates-cost-") as tmp:
        work = Path(tmp)
        source = example(work)
        rows = [measure(source, gate, mb, work) for mb in (0.0, args.data_mb) for gate in ("floor", "mutation")]
    table = md_table(["gate", "data.json", "runs", "tool calls (exec)", "judgements (exec)", "model requests",
                      "wall clock", "figure", "findings"], rows)
    print(table)
    if args.out:
        body = (f"`python bench/gates_cost.py --data-mb {args.data_mb:g} --out {args.out}`: each gate alone on the "
                "example's final iteration, export built inside it, one Inspect eval with mockllm/model (no model "
                "request, no token), every tool call and judgement an exec in the export's bwrap sandbox.\n\n"
                + table)
        write_section(args.out, "Floor and mutation gates", body)


if __name__ == "__main__":
    main()

"""What the proving gates cost an iteration (docs/benchmarks.md, "Proving gates").

The refund_desk example is run once (simulated model). Then every gate runs alone on a fresh copy of each of its
iterations, as ``prove()`` runs it after Execute's handoff (the export built inside the gate), and once more on
the last iteration with data.json grown to about 5 MB (filler customers no sample names):

- floor and mutation: one Inspect eval of all their runs with Inspect's ``mockllm/model`` (no model request);
- solver: the blind solver as a user configures it, ``anthropic/claude-haiku-5-5`` with k=3, answered by
  ``baton fake-api --latency 2s`` (the simulated model behind the documented API, two seconds to first token);
- coverage and duplicate: pure functions of the files.

What a gate costs beyond its model is the sandbox: one ``exec`` per tool call and one per judgement, counted
from the eval's log.

Usage: ``python bench/gates_cost.py [--data-mb 5] [--k 3] [--latency 2s] [--out docs/benchmarks.md]``.

By worker processes (bench/gates_workers.py): the gates that run offline without a model (floor, mutation,
coverage, duplicate) on the example's iterations, on each ``--scenario PATH`` (its last iteration; ``PATH@N`` for
another) and on a synthetic scenario of ``--synthetic N`` samples with ``--data-mb`` MB of data, by 1, 2 and 4
worker processes (``--workers``): wall time, CPU-seconds per sample-gate, peak memory of one process, and whether
the quality is the same as one worker's. ``--no-per-gate`` leaves out the per-gate table above (and its solver).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import md_table, write_section  # noqa: E402
from bench.example_run import example, grow, last_iteration  # noqa: E402
from bench.gates_workers import measured, synthetic  # noqa: E402
from proving.evaluation.gates import ProvingSettings, prove  # noqa: E402
from proving.evaluation.quality import GATES, Quality  # noqa: E402

SOLVER = "anthropic/claude-haiku-5-5"
KEY = "sk-ant-bench-not-a-key"  # the double accepts any key of the documented shape


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_double(latency: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    baton = Path(sys.executable).with_name("baton")
    proc = subprocess.Popen([str(baton), "fake-api", "--port", str(port), "--latency", latency],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{url}/stats", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("baton fake-api did not start")


def figure(gate: str, quality: Quality) -> str:
    f = quality.figures
    if gate == "floor":
        return " / ".join(f"{v:g}" for v in (f.floor or {}).values())
    if gate == "mutation":
        return f"{f.mutation_score:g} of {f.mutants}"
    if gate == "solver" and f.solver is not None:
        return f"solvable {f.solver.solvable_share:g}, pass^{f.solver.k} {f.solver.pass_hat_k:g}"
    if gate == "coverage":
        return f"{f.coverage:g}"
    return str(f.duplicates)


def execs(logs: Path) -> tuple[int, int]:
    """(tool calls, judgements) of the gate's one eval: each an exec of the export's box."""
    from inspect_ai.log import read_eval_log

    found = list(logs.glob("*.eval")) if logs.is_dir() else []
    if not found:
        return 0, 0
    log = read_eval_log(str(found[0]))
    return sum(len((s.store or {}).get("baton:calls") or []) for s in log.samples or []), len(log.samples or [])


def measure(source: Path, iteration: int, gate: str, megabytes: float, work: Path, k: int) -> list[Any]:
    root = work / f"{gate}-{iteration}-{megabytes:g}" / "refund_desk"
    shutil.copytree(source, root)
    out = root / "execution_outputs" / f"iteration_{iteration}"
    if megabytes:
        grow(out / "tools", megabytes)
    size = (out / "tools" / "data.json").stat().st_size
    settings = ProvingSettings(gates=[gate], solver_k=k, solver_model=SOLVER)
    started = time.monotonic()
    quality = prove(root, iteration, settings)
    wall = time.monotonic() - started
    if gate not in quality.ran:
        raise SystemExit(f"{gate} did not run: {quality.skipped}")
    calls, judged = execs(out / "proving_logs")
    requests, tokens_in, tokens_out = 0, 0, 0
    record = out / "proving_logs" / "solver.json"
    if record.is_file():
        solver = json.loads(record.read_text())["solver"]
        requests = solver["requests"]
        for usage in solver["tokens"].values():
            tokens_in += usage.get("input_tokens", 0) + usage.get("input_tokens_cache_read", 0)
            tokens_out += usage.get("output_tokens", 0)
    return [iteration, gate, f"{size / 1e3:,.0f} kB", calls, judged, requests, f"{tokens_in:,} / {tokens_out:,}",
            f"{wall:.1f} s", figure(gate, quality), len(quality.findings)]


OFFLINE = ["floor", "mutation", "coverage", "duplicate"]
SAMPLE_GATES = ("floor", "mutation", "solver")  # the gates whose work is per sample


def by_workers(name: str, root: Path, iteration: int, workers: list[int], gates: list[str], shard: int) -> list[Any]:
    """One row per number of worker processes: the gates of ``root``'s ``iteration`` taken from one queue."""
    data = root / "execution_outputs" / f"iteration_{iteration}" / "tools" / "data.json"
    rows, first = [], None
    for count in workers:
        got = measured(root, iteration, count, gates, shard)
        quality = got["quality"]
        first = first or quality
        f = quality["figures"]
        floor = " / ".join(f"{v:g}" for v in (f.get("floor") or {}).values()) or "-"
        mutation = f"{f['mutation_score']:g} of {f['mutants']}" if f.get("mutation_score") is not None else "-"
        sample_gates = got["samples"] * sum(g in SAMPLE_GATES for g in gates)
        rows.append([name, iteration, got["samples"], f"{data.stat().st_size / 1e3:,.0f} kB", got["shards"], count,
                     f"{got['wall_s']:.1f} s", f"{got['cpu_s']:.1f} s",
                     f"{got['cpu_s'] / sample_gates:.3f} s" if sample_gates else "-", f"{got['peak_mb']:.0f} MB",
                     floor, mutation, len(quality["findings"]), "yes" if quality == first else "NO"])
        print(" | ".join(str(c) for c in rows[-1]), flush=True)
    return rows


def workers_table(args: argparse.Namespace, source: Path | None, work: Path) -> str:
    workers = [int(n) for n in args.workers.split(",")]
    gates = args.gates.split(",")
    rows: list[list[Any]] = []
    if source is not None:
        for n in range(1, last_iteration(source) + 1):
            copy = work / f"workers-example-{n}" / "refund_desk"
            shutil.copytree(source, copy)
            rows += by_workers("refund_desk (example)", copy, n, workers, gates, args.shard_samples)
    for given in args.scenario:
        path, _, number = given.partition("@")
        root = Path(path).resolve()
        iteration = int(number) if number else last_iteration(root)
        copy = work / f"workers-{root.name}" / root.name  # measured on a copy: the gates write their logs
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns("state"))
        rows += by_workers(root.name, copy, iteration, workers, gates, args.shard_samples)
    if args.synthetic:
        root = synthetic(work, args.synthetic, args.data_mb)
        rows += by_workers(f"synthetic ({args.synthetic} samples)", root, 1, workers, gates, args.shard_samples)
    return md_table(["scenario", "iteration", "samples", "data.json", "shards", "workers", "wall clock", "CPU",
                     "CPU per sample-gate", "peak memory (one process)", "floor", "mutation", "findings",
                     "same quality as 1 worker"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-mb", type=float, default=5.0)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--latency", default="2s")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--scenario", action="append", default=[], help="a scenario folder (PATH or PATH@ITERATION)")
    parser.add_argument("--synthetic", type=int, default=0, help="a synthetic scenario of N samples (--data-mb MB)")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--gates", default=",".join(OFFLINE), help="the gates of the workers table")
    parser.add_argument("--shard-samples", type=int, default=10)
    parser.add_argument("--no-per-gate", action="store_true", help="only the table by worker processes")
    args = parser.parse_args()
    if args.no_per_gate:
        with tempfile.TemporaryDirectory(prefix="baton-gates-workers-") as tmp:
            os.environ["BATON_PROVING_GATES"] = "coverage,duplicate"
            table = workers_table(args, example(Path(tmp)), Path(tmp))
        print(table)
        if args.out:
            write_section(args.out, "Proving gates by worker processes", workers_text(args, table))
        return
    double, url = start_double(args.latency)
    os.environ.update({"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY})
    try:
        with tempfile.TemporaryDirectory(prefix="baton-gates-cost-") as tmp:
            work = Path(tmp)
            os.environ["BATON_PROVING_GATES"] = "coverage,duplicate"  # the run itself; each gate is timed below
            source = example(work)
            last = last_iteration(source)
            rows = [measure(source, n, gate, 0.0, work, args.k) for n in range(1, last + 1) for gate in GATES]
            rows += [measure(source, last, gate, args.data_mb, work, args.k)
                     for gate in ("floor", "mutation", "solver")]
            scaled = workers_table(args, source, work)
    finally:
        double.terminate()
        double.wait(timeout=10)
    table = md_table(["iteration", "gate", "data.json", "tool calls (exec)", "judgements (exec)", "model requests",
                      "tokens in / out", "wall clock", "figure", "findings"], rows)
    totals = {n: sum(float(r[7].split()[0]) for r in rows[:len(GATES) * last] if r[0] == n) for n in range(1, last + 1)}
    summary = ", ".join(f"iteration {n}: {s:.0f} s" for n, s in totals.items())
    print(table)
    print(f"all five gates, example data: {summary}")
    if args.out:
        body = (f"`python bench/gates_cost.py --data-mb {args.data_mb:g} --k {args.k} --latency {args.latency} "
                f"--out {args.out}`, {os.cpu_count()} CPUs. Each gate alone on a copy of each iteration of the "
                "example, the export built inside it; floor and mutation with Inspect's mockllm/model (no model "
                f"request), the solver as `{SOLVER}` with k={args.k} through `baton fake-api --latency "
                f"{args.latency}` (the simulated model behind the documented API), conversing on the example's "
                "three conversational samples with the scripted user (no model request: it is one more request "
                "of the solver's per conversation and try); the last rows on the last "
                f"iteration with data.json grown to about {args.data_mb:g} MB. Every tool call and judgement is an "
                f"exec in the export's bwrap sandbox. All five gates on the example's data: {summary}. Iteration 1 "
                "is measured after the run, against the final design/business_rules.md (R8 added): its coverage "
                "here counts R8 unexercised, where the loop measured it against its own seven rules.\n\n" + table)
        write_section(args.out, "Proving gates", body)
        write_section(args.out, "Proving gates by worker processes", workers_text(args, scaled))
    print(scaled)


def workers_text(args: argparse.Namespace, table: str) -> str:
    load = os.getloadavg()
    given = "".join(f" --scenario {s}" for s in args.scenario)
    synthetic_flag = f" --synthetic {args.synthetic}" if args.synthetic else ""
    return (f"`python bench/gates_cost.py{' --no-per-gate' if args.no_per_gate else ''}{given}{synthetic_flag} "
            f"--data-mb {args.data_mb:g} --workers {args.workers} --gates {args.gates} --shard-samples "
            f"{args.shard_samples} --out {args.out}`, {os.cpu_count()} CPUs, load average "
            f"{load[0]:.1f} at the end (other processes shared the machine). The gates as the workers run them "
            "(bench/gates_workers.py): the iteration's shards taken from one queue by each number of worker "
            "processes, then merged; CPU counts every process (the workers, their sample servers, each sample's "
            "process and its forks); a sample-gate is one sample of one gate that runs per sample (floor, "
            "mutation); peak memory is the largest one process reached. The synthetic scenario: a refund desk, "
            f"four kinds of request, data.json grown to about {args.data_mb:g} MB with customers no sample names."
            "\n\n" + table)


if __name__ == "__main__":
    main()

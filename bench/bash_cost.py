"""What a Bash command costs in the sandbox: the refund_desk example's folder after a run (its design, handoffs,
iterations, traces and state), one plain ``true`` and one with the last iteration's ``tools/data.json`` padded to
about 5 MB, by this tree's Bash and, with ``--before PATH``, by the Bash of another checkout (the code before a
change), in turn in the same run so the machine's load falls on both alike (docs/benchmarks.md, "Bash cost").

Usage: ``python bench/bash_cost.py [--rounds 7] [--commands 5] [--data-mb 5] [--before /path/to/old/checkout]
[--out docs/benchmarks.md]``. Each tree runs in a process of its own (the tree first on its path), the command
through ``BashTool`` as a step would, with the journal-less writer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO_ROOT, md_table, write_section  # noqa: E402
from bench.sandbox_cost import example, pad_data  # noqa: E402

# Run in a child with the tree to measure first on sys.path: argv = tree, folder, command, commands.
CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from agents.config import ToolSettings
from agents.tools.base import ToolContext
from agents.tools.bash import BashTool
ctx = ToolContext(root=Path(sys.argv[2]), agent="execute", iteration=1,
                  settings=ToolSettings(bash_enabled=True, bash_timeout_s=60))
tool, times = BashTool(), []
for _ in range(int(sys.argv[4])):
    started = time.monotonic()
    result = tool.run({"command": sys.argv[3]}, ctx)
    times.append(time.monotonic() - started)
    assert result.status == "ok" and result.data["exit_code"] == 0, result
print(json.dumps(times))
"""


def measure(tree: Path, folder: Path, command: str, commands: int) -> list[float]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(folder), command, str(commands)],
                          capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout.splitlines()[-1])


def folder_size(root: Path) -> tuple[int, int]:
    """Bytes and files under ``root``."""
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files), len(files)


def _commit(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--commands", type=int, default=5, help="commands per round, each timed")
    ap.add_argument("--data-mb", type=float, default=5.0, help="pad tools/data.json to about this many MB")
    ap.add_argument("--before", type=Path, default=None, help="a checkout of the code to compare with")
    ap.add_argument("--out", default=None, help="write the section into this Markdown file")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    trees = {"this tree": REPO_ROOT} | ({"before": args.before.resolve()} if args.before else {})
    with tempfile.TemporaryDirectory() as tmp:
        plain = example(Path(tmp))
        padded = plain.with_name("refund_desk_padded")
        shutil.copytree(plain, padded, symlinks=True)
        last = max(int(p.name.split("_")[1]) for p in (padded / "execution_outputs").iterdir())
        data_bytes = pad_data(padded / "execution_outputs" / f"iteration_{last}" / "tools", args.data_mb)
        sizes = {"plain": folder_size(plain), "padded": folder_size(padded)}
        cases = {"`true`": (plain, "true"), f"`true`, data.json {data_bytes / 1e6:.1f} MB": (padded, "true")}
        measured: dict[tuple[str, str], list[float]] = {(t, c): [] for t in trees for c in cases}
        for _ in range(args.rounds):
            for case, (folder, command) in cases.items():
                for tree_name, tree in trees.items():  # in turn, so the load falls on every tree alike
                    measured[(tree_name, case)] += measure(tree, folder, command, args.commands)
    load = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    rows = []
    for case in cases:
        for tree_name in trees:
            runs = measured[(tree_name, case)]
            row = [case, tree_name, f"{statistics.median(runs) * 1000:.0f}", f"{min(runs) * 1000:.0f}"]
            if "before" in trees:
                ratio = statistics.median(runs) / statistics.median(measured[("before", case)])
                row.append(f"{ratio:.2f}")
            rows.append(row)
    header = ["command", "code", "wall ms (median)", "wall ms (best)"] + (["x before"] if "before" in trees else [])
    (plain_bytes, plain_files), (padded_bytes, _) = sizes["plain"], sizes["padded"]
    before = " --before PATH" if args.before else ""
    compared = f" The code before: commit {_commit(args.before)}, this tree: commit {_commit(REPO_ROOT)} " \
        "with its changes." if args.before else ""
    body = (
        "## Bash cost\n\n"
        f"One Bash command in the sandbox, timed around `BashTool.run` ({args.rounds} rounds of {args.commands} "
        f"commands per case and code, in turn), on the refund_desk example's folder after a run ({plain_files} files, "
        f"{plain_bytes:,} bytes, state/ included) and on a copy whose last iteration's tools/data.json is padded "
        f"({padded_bytes:,} bytes); {os.cpu_count()} CPUs, {load}. "
        f"Command: `python bench/bash_cost.py --rounds {args.rounds} --commands "
        f"{args.commands} --data-mb {args.data_mb:g}{before} --out docs/benchmarks.md`.{compared}\n\n"
        + md_table(header, rows, "ll" + "r" * (len(header) - 2))
    )
    print(body)
    if args.out:
        write_section(Path(args.out), "bash_cost", body)


if __name__ == "__main__":
    main()

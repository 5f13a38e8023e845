"""The refund_desk example as the benches use it: run once with the simulated model, its last iteration,
and its data.json grown to the size of a published benchmark's (tau-bench's retail data is megabytes).

The filler is customers no sample names, so every sample still passes and every gate's figure is the
example's own; only the cost of carrying the data changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def example(folder: Path) -> Path:
    """``baton run refund_desk`` in ``folder`` (simulated model, demo profile): the scenario's folder."""
    baton = Path(sys.executable).with_name("baton")
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "BATON_BROKER_URL")}
    subprocess.run([str(baton), "run", "refund_desk", "--auto-approve", "--profile", "demo"], cwd=folder,
                   check=True, capture_output=True, env=env)
    return folder / "scenarios" / "refund_desk"


def last_iteration(root: Path) -> int:
    return max(int(p.name.split("_")[1]) for p in (root / "execution_outputs").glob("iteration_*"))


def grow(tools: Path, megabytes: float) -> int:
    """Add filler customers to ``tools``/data.json until it holds about ``megabytes`` MB; its new size."""
    path = tools / "data.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    record = {"name": "Filler 000000", "tier": "standard", "email": "f000000@example.com", "notes": "x" * 200}
    count = int(megabytes * 1_000_000 / (len(json.dumps(record)) + 12))
    data["customers"].update({f"CX{n:06d}": {**record, "name": f"Filler {n}", "email": f"f{n}@example.com"}
                              for n in range(count)})
    path.write_text(json.dumps(data), encoding="utf-8")
    return path.stat().st_size

"""The proving gates by worker processes (docs/benchmarks.md, "Proving gates by worker processes"): an iteration's
gate shards (proving/evaluation/gate_shards.py) taken from one queue by 1, 2 or 4 worker processes, as Celery's
workers take the baton.gate tasks, then merged; wall time, CPU-seconds (every process: the workers, their sample
servers, each sample's process and its forks), peak memory of one process, and the quality, which must be the
same whatever the number of workers.

Each measurement runs in a fresh process of its own (``python bench/gates_workers.py ROOT ITERATION WORKERS
GATES SHARD``), so that its CPU and peak memory are its own; it prints one JSON line. ``synthetic(folder, samples,
megabytes)`` writes a scenario of that many samples and that much data (a refund desk: look an order up, refund,
refuse with a rule, escalate), evaluated by nothing: the gates need its files only.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proving.evaluation import fork_server  # noqa: E402
from proving.evaluation.gate_harness import Accounting  # noqa: E402
from proving.evaluation.gate_shards import Plan, run_shard  # noqa: E402
from proving.evaluation.gates import ProvingSettings  # noqa: E402

TOOLS = '''
def get_order(data, order_id: str):
    """The order, its customer and its state."""
    order = data["orders"].get(order_id)
    if order is None:
        return {"error": "no such order", "order_id": order_id}
    return {"order_id": order_id, **order}


def issue_refund(data, order_id: str, amount: float, reason: str):
    """Refund an order (R1)."""
    order = data["orders"].get(order_id)
    if order is None:
        return {"error": "no such order", "order_id": order_id}
    order["status"] = "refunded"
    data["refunds"].append({"order_id": order_id, "amount": amount, "reason": reason})
    return {"refunded": True, "amount": amount}


def record_refusal(data, order_id: str, rule: str, note: str):
    """Record that a request was refused, with the rule (R2, R3)."""
    data["refusals"].append({"order_id": order_id, "rule": rule, "note": note})
    return {"recorded": True}


def escalate(data, order_id: str, note: str):
    """Hand an order over 500 to a person (R4)."""
    data["escalations"].append({"order_id": order_id, "note": note})
    return {"escalated": True}
'''

CHECKER = '''
def check_refusals_name_a_rule(sample, outcome):
    bad = [r for r in outcome["final_data"]["refusals"] if r.get("rule") not in ("R2", "R3")]
    return {"passed": not bad, "reason": f"refusals without a refusing rule: {bad}"}
'''

RULES = """# Business rules
- R1: refund a delivered order within 30 days of delivery, in full.
- R2: refuse a refund of a final-sale item, and record the refusal with its rule.
- R3: refuse a refund after 30 days, and record the refusal with its rule.
- R4: escalate a refund over 500 to a person.
"""


def synthetic(folder: Path, samples: int, megabytes: float) -> Path:
    """A scenario folder of ``samples`` samples and about ``megabytes`` MB of data.json; its root."""
    root = folder / f"synthetic_{samples}"
    out = root / "execution_outputs" / "iteration_1"
    for sub in ("tools", "checkers", "samples"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    (root / "design").mkdir(parents=True, exist_ok=True)
    (root / "design" / "business_rules.md").write_text(RULES)
    (out / "tools" / "tools.py").write_text(TOOLS)
    (out / "checkers" / "refusals.py").write_text(CHECKER)
    orders, cases = {}, []
    for n in range(samples):
        kind = ("refund", "final_sale", "late", "big")[n % 4]
        order = f"O{100000 + n}"
        amount = 900.0 + n if kind == "big" else 20.0 + n % 300
        orders[order] = {"customer": f"C{n:06d}", "amount": amount, "status": "delivered",
                         "days_since_delivery": 45 if kind == "late" else 10, "final_sale": kind == "final_sale"}
        look = {"tool": "get_order", "args": {"order_id": order}}
        if kind == "refund":
            act = {"tool": "issue_refund", "args": {"order_id": order, "amount": amount, "reason": "R1: in time"}}
            state = {f"orders.{order}.status": "refunded"}
        elif kind == "big":
            act = {"tool": "escalate", "args": {"order_id": order, "note": "over 500"}}
            state = {}
        else:
            rule = "R2" if kind == "final_sale" else "R3"
            act = {"tool": "record_refusal", "args": {"order_id": order, "rule": rule, "note": "refused"}}
            state = {}
        cases.append({"id": f"s{n:04d}", "instruction": f"Customer C{n:06d}: please refund order {order}.",
                      "rules": [{"refund": "R1", "final_sale": "R2", "late": "R3", "big": "R4"}[kind]],
                      "actions": [look, act], "expected_state": state})
    filler = {"tier": "standard", "notes": "x" * 200}
    data: dict[str, Any] = {"orders": orders, "refunds": [], "refusals": [], "escalations": [], "customers": {}}
    size = len(json.dumps(data))
    count = max(0, int((megabytes * 1_000_000 - size) / (len(json.dumps(filler)) + 30)))
    data["customers"] = {f"C{n:06d}": {**filler, "name": f"Customer {n}"} for n in range(max(samples, count))}
    (out / "tools" / "data.json").write_text(json.dumps(data))
    for case in cases:
        (out / "samples" / f"{case['id']}.json").write_text(json.dumps(case))
    (out / "report.json").write_text(json.dumps({"iteration": 1, "total": samples, "note": "synthetic"}))
    return root


def _worker(root: str, iteration: int, settings: str, queue: Any, used: Any) -> None:
    plan = Plan.of(Path(root), iteration, ProvingSettings.model_validate_json(settings))
    while (item := queue.get()) is not None:
        run_shard(plan, *item)
    fork_server._close_at_exit()  # the sample server is waited for here, so its own CPU counts in this process's
    # A confined sample's processes are reaped inside its namespaces, out of this process's accounting: each
    # sample's process says what it and its forks used (gate_harness.Accounting).
    mine, server = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    used.put((mine.ru_utime + mine.ru_stime + server.ru_utime + server.ru_stime + Accounting.cpu_s,
              max(mine.ru_maxrss, server.ru_maxrss, Accounting.peak_kb)))


def measure(root: Path, iteration: int, workers: int, gates: list[str], shard_samples: int) -> dict[str, Any]:
    """In this process: the plan's shards by ``workers`` processes, merged; wall, CPU, peak memory, quality."""
    settings = ProvingSettings(gates=gates, shard_samples=shard_samples)
    plan = Plan.of(root, iteration, settings)
    shutil.rmtree(plan.folder, ignore_errors=True)  # measured from nothing done
    context = multiprocessing.get_context("fork")
    queue, used = context.Queue(), context.Queue()
    for item in plan.work():
        queue.put(item)
    for _ in range(workers):
        queue.put(None)
    started = time.monotonic()
    procs = [context.Process(target=_worker, args=(str(root), iteration, settings.model_dump_json(), queue, used))
             for _ in range(workers)]
    for proc in procs:
        proc.start()
    reports = [used.get() for _ in procs]  # before the joins: a process with a queued item waits to exit
    for proc in procs:
        proc.join()
    quality = plan.merge()
    wall = time.monotonic() - started
    mine = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall_s": wall, "cpu_s": mine.ru_utime + mine.ru_stime + sum(cpu for cpu, _ in reports),
            "peak_mb": max([mine.ru_maxrss, *(peak for _, peak in reports)]) / 1024, "shards": len(plan.work()),
            "samples": len(plan.samples), "quality": quality.model_dump(mode="json", by_alias=True)}


def measured(root: Path, iteration: int, workers: int, gates: list[str], shard_samples: int) -> dict[str, Any]:
    """``measure`` in a fresh process: its figures are its own."""
    done = subprocess.run([sys.executable, __file__, str(root), str(iteration), str(workers), ",".join(gates),
                           str(shard_samples)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measuring {root} with {workers} workers failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    where, number, count, names, shard = sys.argv[1:6]
    print(json.dumps(measure(Path(where), int(number), int(count), names.split(","), int(shard))))

"""What the sandbox costs an exported task's tool call and judgement (docs/benchmarks.md, "Export call cost").

The refund_desk example is run (simulated model) and exported; then one tool call (``get_order``) and one
judgement (sample s02, no call) are made many times each way, the ways in turn:

- ``child only``: the box's steps in this process (copies of tools/ and checkers/, one limited child),
  no sandbox: what the export did before it ran through Inspect's sandbox;
- ``baton_bwrap``: ``exec`` of ``box.py`` in the export's bubblewrap sandbox, as ``inspect eval`` runs it;
- ``unconfined``: the same ``exec`` where no sandbox can be had (``BATON_EXPORT_BWRAP`` names no bwrap).

Usage: ``python bench/export_call_cost.py [--rounds 15] [--out docs/benchmarks.md]``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio  # noqa: E402

from agents.scenario_facts import scenario_facts  # noqa: E402
from bench.common import md_table, write_section  # noqa: E402
from bench.example_run import example, grow, last_iteration  # noqa: E402
from proving.export.build import export_inspect  # noqa: E402

WAYS = ("child only", "baton_bwrap", "unconfined")



def runtime(export: Path) -> tuple[Any, Any]:
    """The export's ``baton_runtime.session`` and ``baton_runtime.sandbox``, imported as task.py does."""
    sys.path.insert(0, str(export))
    return importlib.import_module("baton_runtime.session"), importlib.import_module("baton_runtime.sandbox")


def in_box(sandbox: Any, session: Any, scenario: Any, box: Any, request: dict[str, Any]) -> Any:
    async def once() -> Any:
        done = await box.exec(["python3", "-I", "-B", f"{box.export_root}/baton_runtime/box.py"],
                              input=request, timeout=session.exec_timeout(scenario), concurrency=False)
        return session.ran_from_box(done.returncode, done.stdout, done.stderr)

    return anyio.run(once)


JUDGED = "s02_final_sale_refused"


def expected_run(session: Any, scenario: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The judged sample's expected actions made as calls (child only): the calls and the final data, so that
    each judgement below is of a passing run."""
    data, calls = scenario.initial_data(), []
    for action in scenario.sample(JUDGED)["actions"]:
        result = session.call_tool(scenario, action["tool"], action["args"], data)
        assert result.error is None, result.error
        calls.append({"tool": action["tool"], "args": action["args"], "output": result.output})
        data = result.data
    return calls, data


def one(way: str, session: Any, sandbox: Any, scenario: Any, boxes: dict[str, Any], what: str,
        run: tuple[list[dict[str, Any]], dict[str, Any]]) -> float:
    """Wall seconds of one call (``what`` = "call") or one judgement ("judge")."""
    sample = scenario.sample(JUDGED)
    calls, final = run
    if what == "call":
        request = session.call_request(scenario, "get_order", {"order_id": "O1001"}, scenario.initial_data())
    else:
        request = session.judge_request(scenario, sample, calls, final)
    started = time.monotonic()
    if way == "child only":
        ran = session._launch(scenario, request)  # noqa: SLF001 - the box's steps without a sandbox
    else:
        ran = in_box(sandbox, session, scenario, boxes[way], request)
    elapsed = time.monotonic() - started
    if what == "call":
        assert session.call_result(scenario, "get_order", ran).error is None, ran
    else:
        verdict = session.judgement(scenario, sample, calls, final, ran)
        assert verdict.passed, verdict.explanation
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--data-mb", type=float, default=0.0, help="grow data.json to about this size first")
    ap.add_argument("--out", default=None, help="write the section into this Markdown file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "export"
        root = example(Path(tmp))
        if args.data_mb:
            grow(root / "execution_outputs" / f"iteration_{last_iteration(root)}" / "tools", args.data_mb)
        export_inspect(root, export, scenario_facts(root))
        session, sandbox = runtime(export)
        scenario = session.Scenario.load(export)
        run = expected_run(session, scenario)
        bwrap, why = sandbox.find_bwrap()
        if bwrap is None:
            raise SystemExit(f"this bench needs a usable bwrap: {why}")
        boxes = {"baton_bwrap": sandbox.BatonBwrapSandbox(export, bwrap, ""),
                 "unconfined": sandbox.BatonBwrapSandbox(export, None, "measured without")}
        measured: dict[tuple[str, str], list[float]] = {(w, k): [] for w in WAYS for k in ("call", "judge")}
        for _ in range(args.rounds):
            for what in ("call", "judge"):
                for way in WAYS:  # in turn, so the machine's load falls on every way alike
                    measured[(way, what)].append(one(way, session, sandbox, scenario, boxes, what, run))
    base = {what: statistics.median(measured[("child only", what)]) for what in ("call", "judge")}
    rows = [[way, what, f"{statistics.median(runs) * 1000:.0f}", f"{min(runs) * 1000:.0f}",
             f"{statistics.median(runs) / base[what]:.2f}"] for (way, what), runs in measured.items()]
    body = (
        "## Export call cost\n\n"
        f"One tool call (`get_order`) and one judgement (sample s02: the replay of its expected actions, then "
        f"the checkers) of the refund_desk example's export, {args.rounds} times each way, the ways in turn. "
        "`child only` is the box's steps without a sandbox (what a call cost before it ran through Inspect's "
        "sandbox); `baton_bwrap` the `exec` of box.py in the export's bubblewrap sandbox; `unconfined` the same "
        f"`exec` where no sandbox can be had. {os.cpu_count()} CPUs. Command: "
        f"`python bench/export_call_cost.py --rounds {args.rounds} --out docs/benchmarks.md`.\n\n"
        + md_table(["way", "what", "wall ms (median)", "wall ms (best)", "x child only (median)"], rows)
    )
    print(body)
    if args.out:
        write_section(Path(args.out), "export_call_cost", body)


if __name__ == "__main__":
    main()

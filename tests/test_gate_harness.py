"""The deterministic gates in baton's harness (issue 40, item 2): one confined process per sample, whatever its
runs and calls, scored as the exported task scores; the same verdicts as the export run through Inspect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proving.evaluation import child_runs
from proving.evaluation.gate_harness import Accounting
from proving.evaluation.gates import ProvingSettings, prove

TOOLS = '''
CALLS = []


def get_order(data, order_id: str):
    """Look an order up."""
    order = data["orders"].get(order_id)
    return {"found": order is not None, **(order or {})}


def refund(data, order_id: str, amount: float):
    """Refund an order."""
    order = data["orders"][order_id]
    order["status"] = "refunded"
    data["refunds"].append({"order_id": order_id, "amount": amount})
    return {"refunded": True}


def escalate(data, order_id: str, note: str):
    """Hand an order to a person; it breaks halfway on an order it does not know."""
    data["escalations"].append({"order_id": order_id, "note": note})
    if order_id not in data["orders"]:
        raise KeyError(order_id)
    return {"escalated": True}


def tag(data, order_id: str):
    """Tag an order (as a tuple: JSON makes it a list, and the next call sees a list)."""
    CALLS.append(order_id)
    seen = data["orders"][order_id].get("tags")
    data["orders"][order_id]["tags"] = ("seen", 1) if seen is None or isinstance(seen, list) else ("twice", 2)
    return {"tagged": True}
'''

CHECKER = '''
def check_tags(sample, outcome):
    tags = [o.get("tags") for o in outcome["final_data"]["orders"].values() if "tags" in o]
    return {"passed": all(t is None or t == ["seen", 1] for t in tags), "reason": f"tags {tags}"}
'''

DATA = {"orders": {"O1": {"status": "delivered", "amount": 40.0}, "O2": {"status": "delivered", "amount": 90.0},
                   "O3": {"status": "delivered", "amount": 15.0}}, "refunds": [], "escalations": []}


def act(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


SAMPLES = [
    {"id": "s1", "instruction": "Refund order O1 please.", "rules": ["R1"],
     "actions": [act("get_order", order_id="O1"), act("tag", order_id="O1"),
                 act("refund", order_id="O1", amount=40.0)]},
    {"id": "s2", "instruction": "Order O2 is too big, hand it on.", "rules": ["R2"],
     "actions": [act("get_order", order_id="O2"), act("escalate", order_id="O2", note="over the limit")]},
    {"id": "s3", "instruction": "Where is order O3?", "rules": ["R1"], "actions": [act("get_order", order_id="O3")]},
]


def scenario(root: Path) -> Path:
    out = root / "execution_outputs" / "iteration_1"
    (out / "tools").mkdir(parents=True)
    (out / "tools" / "tools.py").write_text(TOOLS)
    (out / "tools" / "data.json").write_text(json.dumps(DATA))
    (out / "checkers").mkdir()
    (out / "checkers" / "tags.py").write_text(CHECKER)
    (out / "samples").mkdir()
    for sample in SAMPLES:
        (out / "samples" / f"{sample['id']}.json").write_text(json.dumps(sample))
    (root / "design").mkdir()
    (root / "design" / "business_rules.md").write_text("- R1: refund delivered orders.\n- R2: escalate big ones.\n")
    return out


def test_a_floor_and_mutation_run_start_one_process_per_sample_not_one_per_call(tmp_path: Path) -> None:
    out = scenario(tmp_path / "shop")
    before = Accounting.sample_processes, Accounting.runs
    quality = prove(tmp_path / "shop", 1, ProvingSettings(gates=["floor", "mutation"]))
    assert quality.ran == ["floor", "mutation"], quality.skipped
    runs = json.loads((out / "proving_logs" / "floor_runs.json").read_text())["runs"]
    runs += json.loads((out / "proving_logs" / "mutation_runs.json").read_text())["runs"]
    calls = sum(len(r["calls"]) for r in runs)
    assert calls > 2 * len(SAMPLES)  # s1's reckless run alone makes three
    # Two gates, each one process per sample: not one per run, nor one per call.
    assert Accounting.sample_processes - before[0] == 2 * len(SAMPLES)
    assert Accounting.runs - before[1] == len(runs)
    assert not list((out / "proving_logs").glob("*.eval"))  # no Inspect eval, no sandbox exec per call
    # do_nothing passes s3 (its right outcome changes nothing), refuse_all s2 (an escalation's note is free text)
    assert quality.figures.floor == {"do_nothing": round(1 / 3, 4), "refuse_all": round(1 / 3, 4), "reckless": 0.0}
    assert {(f.sample, f.detail.split(" ")[0]) for f in quality.findings if f.gate == "floor"} == {
        ("s3", "do_nothing"), ("s2", "refuse_all")}


def test_a_failed_call_leaves_the_data_as_it_was_and_the_data_is_what_json_gives_back() -> None:
    data = json.loads(json.dumps(DATA))
    before = child_runs.fingerprint(data)
    data["escalations"].append({"order_id": "O9"})  # a call that wrote, then raised
    data["orders"]["O1"]["status"] = "refunded"
    keys = child_runs.changed(before, child_runs.fingerprint(data, before))
    assert keys == [("escalations",), ("orders", "O1")]
    child_runs.restore(data, before, keys)
    assert data == DATA and child_runs.fingerprint(data) == before
    data["orders"]["O2"]["tags"] = ("a", 1)  # a call that succeeded: its entry as the next call would receive it
    after = child_runs.fingerprint(data)
    assert child_runs.normalise(data, child_runs.changed(before, after), after) is None
    assert data["orders"]["O2"]["tags"] == ["a", 1] and after == child_runs.fingerprint(data)
    data["orders"]["O3"]["when"] = {1, 2}  # JSON cannot hold it: an error, nothing changed
    after = child_runs.fingerprint(data)
    assert "not JSON-serialisable" in child_runs.normalise(data, child_runs.changed(before, after), after)
    # The final data is the sample's data with the changes put in; what did not change is shared, not copied.
    change = child_runs.delta(child_runs.fingerprint(DATA), data, after)
    final = child_runs.apply(DATA, change)
    assert final["orders"]["O2"]["tags"] == ["a", 1] and final["refunds"] is DATA["refunds"]
    assert final["orders"]["O1"] is DATA["orders"]["O1"] and DATA["orders"]["O2"].get("tags") is None


def through_inspect(ctx, gate: str, runs: list[dict]) -> dict:
    """``runs`` in one Inspect eval of the export with its deterministic agents (``-T runs=``), as the gates ran
    them before the harness: per run id, its outcome as the task's own scorer judged it."""
    from proving.evaluation.exported import CALLS, LOGS, RunOutcome, task_folder
    from proving.export.tryout import MOCK_MODEL, eval_export
    from scenarios.folder import Folder

    listed = ctx.out_dir / LOGS / f"{gate}_runs.json"
    Folder(ctx.root).write_json(listed, {"runs": runs})
    log = eval_export(task_folder(ctx), MOCK_MODEL, 1, ctx.out_dir / LOGS, {"runs": str(listed.resolve())})
    outcomes = {}
    for sample in log.samples:
        score = next(iter(sample.scores.values()), None) if sample.scores else None
        outcomes[str(sample.id)] = RunOutcome(score is not None and score.value == 1.0,
                                              (score.explanation or "") if score is not None else "no score",
                                              list((sample.store or {}).get(CALLS) or []))
    return outcomes


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_gates")
def test_the_harness_judges_every_run_as_the_exported_task_does_through_inspect(tmp_path: Path) -> None:
    """The same runs through the export with Inspect (as the gates ran them before): the same verdicts, the same
    calls made and failed."""
    pytest.importorskip("inspect_ai")
    from proving.evaluation.floors import floor_runs
    from proving.evaluation.gate_harness import run_agents
    from proving.evaluation.gates import GateContext
    from proving.evaluation.mutants import mutants_of

    scenario(tmp_path / "shop")
    ctx = GateContext.load(tmp_path / "shop", 1, ProvingSettings())
    runs = floor_runs(ctx.samples) + [m.run() for s in ctx.samples for m in mutants_of(s, ctx.samples, 8)]
    runs.append({"id": "s1~twice", "sample": "s1", "agent": "script",  # the second call is given JSON's list
                 "actions": [act("tag", order_id="O1"), act("tag", order_id="O1"), act("refund", order_id="O1",
                                                                                        amount=40.0)]})
    runs.append({"id": "s2~unknown", "sample": "s2", "agent": "script",  # fails halfway: its effects undone
                 "actions": [act("escalate", order_id="O9", note="x"), act("get_order", order_id="O2"),
                             act("escalate", order_id="O2", note="y")]})
    ours, theirs = run_agents(ctx, "parity", runs), through_inspect(ctx, "parity_inspect", runs)
    assert ours.keys() == theirs.keys()
    for run_id in ours:
        mine, export = ours[run_id], theirs[run_id]
        assert mine.passed == export.passed, (run_id, mine.explanation, export.explanation)
        assert [(c["tool"], c["args"], bool(c.get("error"))) for c in mine.calls] == [
            (c["tool"], c["args"], bool(c.get("error"))) for c in export.calls], run_id
        assert [c.get("output") for c in mine.calls] == [c.get("output") for c in export.calls], run_id
    assert ours["s1~twice"].passed and ours["s2~unknown"].passed

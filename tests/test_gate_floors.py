"""The floor gate (issue 31, item 1): do nothing, refuse everything and reckless agents, run as the exported task
runs and scores them (in baton's harness, gate_harness.py), must score 0; a sample one of them passes is a finding."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from proving.evaluation.floors import changes_nothing, floor_runs
from proving.evaluation.gates import ProvingSettings, prove
from proving.export.runtime.agents import changing_tools, reckless_calls, refusal_calls, refusing_tool


def act(tool, **args):
    return {"tool": tool, "args": args}


SAMPLES = [
    {"id": "a", "instruction": "I'm C1, refund order O1 please.", "actions": [
        act("get_order", order_id="O1"), act("issue_refund", order_id="O1", amount=89.0, reason="R1")]},
    {"id": "b", "instruction": "C2 here: return order O2.", "actions": [act("get_order", order_id="O2")]},
    {"id": "c", "instruction": "Order O3 is over the limit (C3).", "actions": [
        act("get_order", order_id="O3"), act("escalate", order_id="O3", note="big, over $500")]},
]
TOOLS = [{"name": n, "parameters": {"type": "object", "properties": props, "required": list(props)}}
         for n, props in [("get_order", {"order_id": {"type": "string"}}),
                          ("issue_refund", {"order_id": {"type": "string"}, "amount": {"type": "number"},
                                            "reason": {"type": "string"}}),
                          ("escalate", {"order_id": {"type": "string"}, "note": {"type": "string"}})]]


def test_the_deterministic_agents_choose_from_the_request_never_from_its_expected_actions():
    assert changing_tools(SAMPLES) == ["issue_refund", "escalate"]
    assert refusing_tool(TOOLS)["name"] == "escalate"
    # refuse_all: the refusing tool, the order the request names, a refusal's words (not another sample's note)
    (call,) = refusal_calls(TOOLS, SAMPLES, SAMPLES[1])
    assert call["tool"] == "escalate" and call["args"]["order_id"] == "O2" and "O3" not in call["args"]["note"]
    assert "over $500" not in call["args"]["note"]
    assert refusal_calls(TOOLS[:2], SAMPLES, SAMPLES[1]) == []  # no tool records a refusal: it only says so
    # the sample's own answer is never in reach: a refusal's rule comes from another sample, not this one's
    recording = [*TOOLS, {"name": "record_refusal", "parameters": {"type": "object", "properties": {
        "order_id": {"type": "string"}, "rule": {"type": "string"}}, "required": ["order_id", "rule"]}}]
    refusals = [{"id": f"r{n}", "instruction": f"Refund O{n} please.",
                 "actions": [act("record_refusal", order_id=f"O{n}", rule=f"R{n}")]} for n in (2, 6)]
    assert [c["args"]["rule"] for s in refusals for c in refusal_calls(recording, refusals, s)] == ["R6", "R2"]
    # reckless: every state-changing tool, another request's arguments with this request's ids
    assert reckless_calls(SAMPLES, SAMPLES[1]) == [
        act("issue_refund", order_id="O2", amount=89.0, reason="R1"), act("escalate", order_id="O2",
                                                                            note="big, over $500")]
    # a tool no other sample uses is not called (there are no arguments to take)
    assert reckless_calls(SAMPLES, SAMPLES[2]) == [act("issue_refund", order_id="O3", amount=89.0, reason="R1")]
    assert reckless_calls(SAMPLES, SAMPLES[0]) == [act("escalate", order_id="O1", note="big, over $500")]
    assert [r["id"] for r in floor_runs(SAMPLES[:1])] == ["a~do_nothing", "a~refuse_all", "a~reckless"]
    assert [changes_nothing(s) for s in SAMPLES] == [False, True, False]


def _edit_sample(root: Path, name: str, **changes) -> None:
    path = root / "execution_outputs" / "iteration_2" / "samples" / name
    sample = json.loads(path.read_text())
    sample.update(changes)
    path.write_text(json.dumps(sample, indent=2))


def findings(quality, gate="floor"):
    return {(f.sample, f.class_, f.detail.split(" ", 1)[0]) for f in quality.findings if f.gate == gate}


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_gates")
def test_floors_on_the_example_catch_exactly_the_samples_whose_right_outcome_changes_nothing(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path)
    quality = prove(root, 2, ProvingSettings(gates=["floor"]))
    assert quality.ran == ["floor"], quality.skipped
    floor = quality.figures.floor
    assert set(floor) == {"do_nothing", "refuse_all", "reckless"} and floor["reckless"] == 0.0
    # Doing nothing passes the samples right when nothing changes (the example's refusals, while no tool records
    # them: s02 and s06 in the example of November 2026), and no other: the scorer sees every other outcome.
    samples = [json.loads(p.read_text()) for p in (root / "execution_outputs/iteration_2/samples").glob("*.json")]
    idle = {s["id"] for s in samples if changes_nothing(s)}
    assert {f[0] for f in findings(quality) if f[2] == "do_nothing"} == idle
    assert floor["do_nothing"] == round(len(idle) / len(samples), 4)
    # the runs in baton's harness (no Inspect eval), logged where baton keeps the iteration's proving logs
    out = root / "execution_outputs" / "iteration_2"
    assert not list((out / "proving_logs").glob("*.eval"))
    logged = json.loads((out / "proving_logs" / "floor_runs.json").read_text())["runs"]
    assert len(logged) == 3 * len(samples) and {r["agent"] for r in logged} == {"do_nothing", "refuse_all", "reckless"}


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_gates")
def test_a_sample_with_no_expected_action_and_no_expected_state_gets_a_floor_finding(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path)
    _edit_sample(root, "s01_day30_refund.json", actions=[], expected_outputs=[], expected_state={})
    quality = prove(root, 2, ProvingSettings(gates=["floor"]))
    caught = findings(quality)
    assert ("s01_day30_refund", "L4", "do_nothing") in caught
    detail = next(f.detail for f in quality.findings if f.sample == "s01_day30_refund")
    assert "nothing changes" in detail


def _without_tools(root: Path, pattern: str) -> list[str]:
    """Rename iteration 2's tools whose names match ``pattern`` out of reach, and remove the samples that used
    them; the names."""
    out = root / "execution_outputs" / "iteration_2"
    tools = out / "tools" / "tools.py"
    gone = re.findall(rf"^def (\w*(?:{pattern})\w*)\(", tools.read_text(), re.MULTILINE)
    assert gone
    source = tools.read_text()
    for name in gone:
        source = source.replace(f"def {name}(", f"def _{name}(")
    tools.write_text(source)
    for path in (out / "samples").glob("*.json"):
        if any(a["tool"] in gone for a in json.loads(path.read_text())["actions"]):
            path.unlink()
    return gone


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_gates")
def test_with_an_escalation_tool_but_none_that_records_a_refusal_the_finding_is_still_the_designs(
        finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path)
    assert "escalate" not in _without_tools(root, "refus|deny|declin|reject")
    _edit_sample(root, "s01_day30_refund.json", actions=[], expected_outputs=[], expected_state={})
    quality = prove(root, 2, ProvingSettings(gates=["floor"]))
    assert ("s01_day30_refund", "L1", "do_nothing") in findings(quality)
    detail = next(f.detail for f in quality.findings if f.sample == "s01_day30_refund")
    assert "can only escalate" in detail


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_gates")
def test_without_a_tool_that_records_a_refusal_the_finding_is_the_designs(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path)
    _without_tools(root, "refus|deny|declin|reject|escalat")  # nothing in the scenario records a refusal any more
    _edit_sample(root, "s01_day30_refund.json", actions=[], expected_outputs=[], expected_state={})
    quality = prove(root, 2, ProvingSettings(gates=["floor"]))
    caught = findings(quality)
    assert ("s01_day30_refund", "L1", "do_nothing") in caught
    assert ("s01_day30_refund", "L1", "refuse_all") in caught  # it can only say it refuses
    assert all(layer == "L1" for sample, layer, _ in caught if sample == "s01_day30_refund")

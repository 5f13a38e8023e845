"""The solver gate (issue 31, items 3 and 4): a blind solver runs each sample k times on the exported task
through Inspect; offline the simulated model plays it (SIMULATED), in-process as ``baton/simulated`` and
through ``baton fake-api`` as ``anthropic/...``. A sample it never solves is an L1 finding with the first
point where its calls left the expected ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proving.evaluation import blind
from proving.evaluation.gates import ProvingSettings, prove
from proving.evaluation.solver import RECORD, first_divergence, inspect_model
from tests.shared_runs import SharedRun

LOOKUP = {"tool": "get_order", "args": {"order_id": "O1001"}}
REFUND = {"tool": "issue_refund", "args": {"order_id": "O1001", "amount": 89.0, "reason": "R1: within 30 days"}}
FREE = {"R1: within 30 days"}


def call(tool: str, **args: object) -> dict[str, object]:
    return {"tool": tool, "args": args}


# ---- the first divergence (fast) -------------------------------------------------------------------------


def test_a_solver_that_stops_without_a_call_diverges_at_the_first_action():
    said = first_divergence([LOOKUP, REFUND], [], FREE)
    assert said == ('first divergence at action 1: expected get_order(order_id="O1001"), '
                    "the solver stopped without calling any tool")


def test_a_solver_that_stops_after_looking_diverges_at_the_missing_change():
    said = first_divergence([LOOKUP, REFUND], [call("get_order", order_id="O1001")], FREE)
    assert said.startswith('first divergence at action 2: expected issue_refund(order_id="O1001", amount=89.0, '
                           "reason=<text>), the solver stopped after get_order")


def test_a_wrong_argument_is_named_and_free_text_is_not_compared():
    wrong = first_divergence([LOOKUP, REFUND], [call("get_order", order_id="O1001"),
                                                call("issue_refund", order_id="O1001", amount=79.0, reason="x")], FREE)
    assert "at action 2" in wrong and "the solver called issue_refund(" in wrong and "amount=79.0" in wrong
    worded_otherwise = first_divergence([LOOKUP, REFUND], [call("get_order", order_id="O1001"),
                                                           call("issue_refund", order_id="O1001", amount=89,
                                                                reason="in the window")], FREE)
    assert worded_otherwise.startswith("no divergence")


def test_lookups_in_another_order_are_no_divergence_but_an_extra_change_is():
    expected = [call("get_customer", customer_id="C2"), LOOKUP, REFUND]
    reordered = [call("get_order", order_id="O1001"), call("get_customer", customer_id="C2"),
                 call("issue_refund", order_id="O1001", amount=89.0, reason="ok")]
    assert first_divergence(expected, reordered, FREE).startswith("no divergence")
    extra = [*reordered, call("escalate", order_id="O1001", note="n")]
    assert first_divergence(expected, extra, FREE).startswith(
        'first divergence after the 3 expected action(s): the solver also called escalate(order_id="O1001"')
    skipped = first_divergence(expected, reordered[:1] + reordered[2:], FREE)
    assert skipped.startswith('first divergence at action 1: expected get_customer(customer_id="C2"), '
                              "the solver never made that call")


def test_a_failed_call_is_said_to_have_failed():
    calls = [call("get_order", order_id="O1001"), {**call("issue_refund", order_id="O1002", amount=89.0, reason="r"),
                                                    "error": "order_not_found"}]
    assert "(which failed)" in first_divergence([LOOKUP, REFUND], calls, FREE)


def test_the_double_is_asked_without_streaming_and_other_models_as_named():
    assert inspect_model("openai/gpt-5", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}) == "openai/gpt-5"
    assert inspect_model("anthropic/claude-haiku-5-5", {}) == "anthropic/claude-haiku-5-5"


def test_a_request_that_is_no_exported_task_is_not_the_blind_solvers():
    assert blind.anthropic_reply("You are the Init agent.", [{"role": "user", "content": "hi"}], []) is None
    policy = "You are the agent in the scenario 'x'. Be kind.\n"  # an export, but no script reads this policy
    assert blind.anthropic_reply(policy, [{"role": "user", "content": "hi"}], [{"name": "get_order"}]) is None


# ---- the gate on the example's run (Inspect) --------------------------------------------------------------


def _copy(finished_run: SharedRun, tmp_path: Path) -> Path:
    return finished_run.copy_to(tmp_path)


def _last(root: Path) -> int:
    return max(int(p.name.removeprefix("iteration_")) for p in (root / "execution_outputs").glob("iteration_*"))


def _edit_sample(root: Path, iteration: int, sample_id: str, change: dict[str, object]) -> None:
    for path in (root / "execution_outputs" / f"iteration_{iteration}" / "samples").glob("*.json"):
        sample = json.loads(path.read_text())
        if sample.get("id") == sample_id:
            path.write_text(json.dumps({**sample, **change}, indent=2))
            return
    raise AssertionError(f"no sample {sample_id}")



@pytest.mark.slow
@pytest.mark.xdist_group("inspect_solver")
def test_the_simulated_blind_solver_solves_the_examples_samples_and_says_it_is_simulated(finished_run, tmp_path):
    root = _copy(finished_run, tmp_path)
    iteration = _last(root)
    quality = prove(root, iteration, ProvingSettings(gates=["solver"], solver_k=2, panel=[blind.MODEL]))
    assert quality.ran == ["solver"], quality.skipped
    solver = quality.figures.solver
    assert solver is not None and solver.simulated and solver.model == blind.MODEL and solver.k == 2
    assert solver.solvable_share == 1.0 and solver.pass_hat_k == 1.0 and len(solver.per_sample) == 10
    assert quality.findings == []
    assert quality.figures.difficulty == {blind.MODEL: 1.0}
    record = json.loads((root / "execution_outputs" / f"iteration_{iteration}" / "proving_logs" / RECORD).read_text())
    assert record["solver"]["simulated"] and record["solver"]["requests"] >= 2 * 10 * 2  # a lookup and an answer
    assert record["solver"]["tokens"][blind.MODEL]["input_tokens"] > 0 and len(record["panel"]) == 1
    assert record["difficulty"] == ("the strongest of the panel, baton/simulated, solves 10 of 10 sample(s) "
                                    "(pass rate 100%); spread across the panel 100%-100%")


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_solver")
def test_a_sample_missing_a_fact_or_contradicting_the_policy_is_never_solved(finished_run, tmp_path):
    root = _copy(finished_run, tmp_path)
    iteration = _last(root)
    # The instruction no longer names the order the task needs.
    _edit_sample(root, iteration, "s01_day30_refund",
                 {"instruction": "Hi, I'm customer C1. My blender arrived 30 days ago and I'd like my money back."})
    # The expected actions refund a final-sale item, which the policy refuses (R2).
    _edit_sample(root, iteration, "s02_final_sale_refused", {
        "actions": [{"tool": "get_order", "args": {"order_id": "O1002"}},
                    {"tool": "issue_refund", "args": {"order_id": "O1002", "amount": 59.0, "reason": "goodwill"}}],
        "expected_state": {"orders.O1002.status": "refunded"}})
    quality = prove(root, iteration, ProvingSettings(gates=["solver"], solver_k=2))
    solver = quality.figures.solver
    assert solver is not None and solver.simulated
    assert solver.per_sample["s01_day30_refund"] == 0.0 and solver.per_sample["s02_final_sale_refused"] == 0.0
    assert solver.solvable_share == 0.8
    found = {f.sample: f for f in quality.findings}
    assert set(found) == {"s01_day30_refund", "s02_final_sale_refused"}
    assert all(f.gate == "solver" and f.class_ == "L1" for f in found.values())
    assert "unsolved in 2 tries by the SIMULATED blind solver" in found["s01_day30_refund"].detail
    assert ('first divergence at action 1: expected get_order(order_id="O1001"), the solver stopped without '
            "calling any tool") in found["s01_day30_refund"].detail
    # It refuses as the policy says (with the tool the policy names for a refusal, or by not acting).
    assert ('first divergence at action 2: expected issue_refund(order_id="O1002", amount=59.0, reason=<text>), '
            "the solver ") in found["s02_final_sale_refused"].detail


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_solver")
def test_through_the_fake_api_the_anthropic_provider_meets_the_same_blind_solver(finished_run, tmp_path,
                                                                                  monkeypatch):
    from proving import startup
    from tests.fake_api_support import KEY, serving, stats
    from workers.fake_api.server import FakeApi

    root = _copy(finished_run, tmp_path)
    iteration = _last(root)
    _edit_sample(root, iteration, "s01_day30_refund", {"instruction": "Hi, my blender arrived 30 days ago."})
    with serving(FakeApi()) as running:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", running.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        # As if baton had started with them: Inspect's process gets the keys baton started with (proving/startup.py).
        with startup.started_with({"ANTHROPIC_BASE_URL": running.url, "ANTHROPIC_API_KEY": KEY}):
            quality = prove(root, iteration, ProvingSettings(gates=["solver"], solver_k=1,
                                                             solver_model="anthropic/claude-haiku-5-5"))
        seen = stats(running.url)
    solver = quality.figures.solver
    assert solver is not None, quality.skipped
    assert solver.simulated and solver.model == "anthropic/claude-haiku-5-5"  # its replies say [simulated]
    assert solver.solvable_share == 0.9 and [f.sample for f in quality.findings] == ["s01_day30_refund"]
    assert seen["models"] == {"claude-haiku-5-5": seen["requests"]["POST /v1/messages"]} and not seen["errors"]
    record = json.loads((root / "execution_outputs" / f"iteration_{iteration}" / "proving_logs" / RECORD).read_text())
    assert record["solver"]["requests"] == seen["requests"]["POST /v1/messages"]
    assert record["solver"]["tokens"]["anthropic/claude-haiku-5-5"]["output_tokens"] > 0


@pytest.mark.slow
@pytest.mark.xdist_group("inspect_solver")
def test_with_no_solver_model_and_no_blind_script_the_gate_says_why(finished_run, tmp_path):
    root = _copy(finished_run, tmp_path)
    rules = root / "design" / "business_rules.md"
    rules.write_text(rules.read_text().replace("within 30 days", "within a month"))  # a policy no script reads
    quality = prove(root, _last(root), ProvingSettings(gates=["solver"]))
    assert quality.figures.solver is None and quality.ran == []
    assert "no solver model is configured" in quality.skipped["solver"]
    assert "scenarios/_simulations/blind/" in quality.skipped["solver"]

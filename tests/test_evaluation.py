"""Evaluation: samples replayed in isolated children, failures classified by layer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.config import ToolSettings
from agents.tools.base import ToolContext
from agents.tools.evaluation import RunEvaluation
from proving.evaluation.compare import lookup, same
from proving.evaluation.run import run_evaluation

TIMEOUT_S = 2.0
MEMORY_MB = 256  # also proves the child interpreter starts under this RLIMIT_AS

TOOLS = '''
import os


def get_order(data, order_id):
    order = data["orders"].get(order_id)
    if order is None:
        return {"found": False}
    return {"found": True, "status": order["status"], "amount": order["amount"]}


def refund(data, order_id):
    order = data["orders"][order_id]
    if order["status"] != "delivered":
        return {"refunded": False, "reason": "only delivered orders are refunded"}
    order["status"] = "refunded"
    return {"refunded": True, "amount": order["amount"]}


def refund_anything(data, order_id):
    data["orders"][order_id]["status"] = "refunded"
    return {"refunded": True}


def count(data):
    return 42


def as_set(data):
    return {"ids": {1, 2}}


def spin(data):
    while True:
        pass


def hog(data):
    chunks = []
    while True:
        chunks.append(bytearray(16 * 1024 * 1024))


def chatter(data):
    for _ in range(20000):
        print("x" * 500)
    return {}


def env(data):
    return {"keys": sorted(os.environ)}


def _helper(data):
    return {}
'''

DATA = {"orders": {"A1": {"status": "delivered", "amount": 30}, "B2": {"status": "shipped", "amount": 12}}}

POLICY = '''
from baton_eval import DesignIssue


def check_refund_policy(sample, outcome):
    """Rule R1: only delivered orders are refunded. Rule R9 is contradictory on purpose."""
    if "R9" in sample.get("rules", []):
        raise DesignIssue("R9 contradicts R1 for shipped orders")
    initial = outcome["initial_data"]["orders"]
    for action, output in zip(sample["actions"], outcome["outputs"]):
        if action["tool"].startswith("refund") and output.get("refunded"):
            if initial[action["args"]["order_id"]]["status"] != "delivered":
                return {"passed": False, "reason": "refunded an order that was not delivered"}
    return {"passed": True, "reason": "R1 respected"}
'''


def sample(
    sid: str, actions: list[tuple[str, dict[str, Any]]], expected: list[Any] | None = None, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": sid,
        "instruction": f"instruction of {sid}",
        "actions": [{"tool": tool, "args": args} for tool, args in actions],
    }
    if expected is not None:
        body["expected_outputs"] = expected
    body.update(extra)
    return body


def build(
    root: Path,
    samples: list[dict[str, Any] | str],
    *,
    tools: str = TOOLS,
    data: Any = DATA,
    checkers: dict[str, str] | None = None,
) -> Path:
    """A scenario folder with iteration 1; a str sample is written verbatim."""
    out = root / "execution_outputs" / "iteration_1"
    (out / "tools").mkdir(parents=True)
    (out / "tools" / "tools.py").write_text(tools)
    if data is not None:
        (out / "tools" / "data.json").write_text(data if isinstance(data, str) else json.dumps(data))
    (out / "checkers").mkdir()
    for name, text in (checkers if checkers is not None else {"policy.py": POLICY}).items():
        (out / "checkers" / name).write_text(text)
    (out / "samples").mkdir()
    for index, body in enumerate(samples):
        name = body["id"] if isinstance(body, dict) else f"raw{index}"
        (out / "samples" / f"{name}.json").write_text(body if isinstance(body, str) else json.dumps(body))
    return out


def evaluate(root: Path, **kwargs: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    report = run_evaluation(root, 1, timeout_s=TIMEOUT_S, memory_mb=MEMORY_MB, **kwargs)
    lines = (root / "execution_outputs" / "iteration_1" / "results.jsonl").read_text().splitlines()
    return report, {r["id"]: r for r in map(json.loads, lines)}


def trace(root: Path, sid: str) -> dict[str, Any]:
    return json.loads((root / "execution_outputs" / "iteration_1" / "traces" / f"{sid}.json").read_text())


PASSING = sample(
    "ok",
    [("refund", {"order_id": "A1"})],
    [{"refunded": True, "amount": 30}],
    expected_state={"orders.A1.status": "refunded"},
)


def test_passing_sample(tmp_path: Path) -> None:
    build(tmp_path, [PASSING])
    report, results = evaluate(tmp_path)
    assert report["passed"] == 1 and report["success_rate"] == 1.0
    assert results["ok"] == {
        **results["ok"],
        "passed": True,
        "layer": None,
        "outputs": [{"refunded": True, "amount": 30}],
    }
    assert trace(tmp_path, "ok")["checkers"][0] == {
        "checker": "policy.check_refund_policy",
        "passed": True,
        "reason": "R1 respected",
    }


def test_the_two_by_two(tmp_path: Path) -> None:
    always_fails = "def check_strict(sample, outcome):\n    return {'passed': False, 'reason': 'too strict'}\n"
    build(tmp_path, [
        # outcome follows the rules but the sample expects a refund: the sample is wrong
        sample("l4", [("refund", {"order_id": "B2"})], [{"refunded": True}]),
        # the tool refunds a shipped order: neither expected nor compliant
        sample("l2", [("refund_anything", {"order_id": "B2"})], [{"refunded": False}]),
    ])
    report, results = evaluate(tmp_path)
    assert results["l4"]["layer"] == "L4"
    assert "output 'refunded': expected true, got false" in results["l4"]["reason"]
    assert results["l2"]["layer"] == "L2"
    assert "expected false, got true" in results["l2"]["reason"] and "not delivered" in results["l2"]["reason"]
    assert report["failures_per_layer"] == {"L1": 0, "L2": 1, "L3": 0, "L4": 1}

    other = tmp_path / "strict"
    build(other, [PASSING], checkers={"policy.py": POLICY, "strict.py": always_fails})
    _, results = evaluate(other)
    assert results["ok"]["layer"] == "L3" and "strict.check_strict failed it: too strict" in results["ok"]["reason"]


def test_expected_state_difference_is_named(tmp_path: Path) -> None:
    build(tmp_path, [sample("st", [("refund", {"order_id": "B2"})], expected_state={"orders.B2.status": "refunded"})])
    _, results = evaluate(tmp_path)
    assert results["st"]["layer"] == "L4"
    assert "expected_state 'orders.B2.status': expected \"refunded\", got \"shipped\"" in results["st"]["reason"]


def test_design_issue_is_l1(tmp_path: Path) -> None:
    build(tmp_path, [sample("ambiguous", [("refund", {"order_id": "A1"})], rules=["R9"])])
    report, results = evaluate(tmp_path)
    assert results["ambiguous"]["layer"] == "L1"
    assert "R9 contradicts R1" in results["ambiguous"]["reason"]
    assert report["failures"] == [{"sample": "ambiguous", "layer": "L1", "reason": results["ambiguous"]["reason"]}]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('{"id": "broken", ', "not valid JSON"),
        (sample("short", [("refund", {"order_id": "A1"})], [{}, {}]), "one per action"),
        ({"id": "noinstr", "actions": []}, "instruction"),
        ({**sample("typo", []), "expected_sate": {}}, "expected_sate"),
        (sample("unknown", [("cancel", {"order_id": "A1"})]), "tool 'cancel'"),
        (sample("badargs", [("refund", {"order": "A1"})]), "refund(data, order_id)"),
        (sample("private", [("_helper", {})]), "tool '_helper'"),
    ],
)
def test_sample_problems_are_l4(tmp_path: Path, body: Any, needle: str) -> None:
    build(tmp_path, [body])
    report, results = evaluate(tmp_path)
    (result,) = results.values()
    assert result["layer"] == "L4" and needle in result["reason"], result["reason"]
    assert report["failures_per_layer"]["L4"] == 1


def test_duplicate_ids_are_l4(tmp_path: Path) -> None:
    out = build(tmp_path, [PASSING])
    (out / "samples" / "zz_copy.json").write_text(json.dumps(PASSING))
    report, _ = evaluate(tmp_path)
    assert report["total"] == 2 and report["passed"] == 1
    assert report["failures"][0]["layer"] == "L4" and "duplicate id 'ok'" in report["failures"][0]["reason"]
    assert trace(tmp_path, "ok")["passed"] is True and trace(tmp_path, "ok__zz_copy")["layer"] == "L4"


@pytest.mark.parametrize(
    ("action", "needle"),
    [
        (("refund", {"order_id": "ZZ"}), "raised KeyError: 'ZZ' at tools/tools.py:"),
        (("count", {}), "returned int 42, not a dict"),
        (("as_set", {}), "not JSON-serialisable"),
    ],
)
def test_tool_failures_are_l2(tmp_path: Path, action: tuple[str, dict[str, Any]], needle: str) -> None:
    build(tmp_path, [sample("s", [action])])
    _, results = evaluate(tmp_path)
    assert results["s"]["layer"] == "L2" and needle in results["s"]["reason"], results["s"]["reason"]


def test_tool_import_error_and_bad_data_are_l2(tmp_path: Path) -> None:
    build(tmp_path / "a", [PASSING], tools="def refund(data, order_id):\n    return {\n")
    _, results = evaluate(tmp_path / "a")
    assert results["ok"]["layer"] == "L2" and "tools/tools.py failed to import: SyntaxError" in results["ok"]["reason"]
    assert "SyntaxError" in trace(tmp_path / "a", "ok")["error"]["traceback"]

    build(tmp_path / "b", [PASSING], data="[1, 2]")
    _, results = evaluate(tmp_path / "b")
    assert results["ok"]["layer"] == "L2" and "must hold a JSON object" in results["ok"]["reason"]

    build(tmp_path / "c", [PASSING], data=None)
    _, results = evaluate(tmp_path / "c")
    assert results["ok"]["layer"] == "L2" and "tools/data.json not found" in results["ok"]["reason"]


@pytest.mark.parametrize(
    ("checkers", "needle"),
    [
        ({"policy.py": "import no_such_module\n"}, "checkers/policy.py failed to import: ModuleNotFoundError"),
        ({"policy.py": "def check_x(sample, outcome):\n    return 1 / 0\n"}, "raised ZeroDivisionError"),
        ({"policy.py": "def check_x(sample, outcome):\n    return 'yes'\n"}, "returned 'yes'"),
        ({}, "no checkers found"),
    ],
)
def test_checker_failures_are_l3(tmp_path: Path, checkers: dict[str, str], needle: str) -> None:
    build(tmp_path, [PASSING], checkers=checkers)
    _, results = evaluate(tmp_path)
    assert results["ok"]["layer"] == "L3" and needle in results["ok"]["reason"], results["ok"]["reason"]


def test_design_issue_wins_over_a_broken_checker(tmp_path: Path) -> None:
    broken = "def check_a(sample, outcome):\n    raise ValueError('bug')\n"
    build(
        tmp_path,
        [sample("amb", [("get_order", {"order_id": "A1"})], rules=["R9"])],
        checkers={"a.py": broken, "policy.py": POLICY},
    )
    _, results = evaluate(tmp_path)
    assert results["amb"]["layer"] == "L1"


def test_a_bare_bool_verdict_is_accepted(tmp_path: Path) -> None:
    build(tmp_path, [PASSING], checkers={"simple.py": "def check_ok(sample, outcome):\n    return True\n"})
    report, _ = evaluate(tmp_path)
    assert report["passed"] == 1


@pytest.mark.slow  # waits for a real timeout
def test_tool_that_loops_forever_is_killed_and_the_next_sample_runs(tmp_path: Path) -> None:
    build(tmp_path, [sample("a_spin", [("spin", {})]), PASSING])
    report, results = evaluate(tmp_path)
    assert results["a_spin"]["layer"] == "L2"
    assert "time limit (2 s) reached in action 0 (tool spin)" in results["a_spin"]["reason"]
    assert trace(tmp_path, "a_spin")["child"]["timed_out"] is True
    assert results["ok"]["passed"] is True and report["passed"] == 1


def test_tool_that_eats_memory_is_l2(tmp_path: Path) -> None:
    build(tmp_path, [sample("a_hog", [("hog", {})]), PASSING])
    _, results = evaluate(tmp_path)
    assert results["a_hog"]["layer"] == "L2"
    assert f"memory limit ({MEMORY_MB} MB) reached in action 0 (tool hog)" in results["a_hog"]["reason"]
    assert results["ok"]["passed"] is True


@pytest.mark.slow  # waits for a real timeout
def test_checker_that_loops_forever_is_l3(tmp_path: Path) -> None:
    build(
        tmp_path, [PASSING], checkers={"loop.py": "def check_loop(sample, outcome):\n    while True:\n        pass\n"}
    )
    _, results = evaluate(tmp_path)
    assert (
        results["ok"]["layer"] == "L3"
        and "time limit (2 s) reached in checker loop.check_loop" in results["ok"]["reason"]
    )


def test_child_does_not_see_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    monkeypatch.setenv("BATON_TEST_REDIS_URL", "redis://secret")
    build(tmp_path, [sample("env", [("env", {})])])
    _, results = evaluate(tmp_path)
    keys = results["env"]["outputs"][0]["keys"]
    assert "PATH" in keys and "ANTHROPIC_API_KEY" not in keys and "BATON_TEST_REDIS_URL" not in keys


def test_child_output_is_capped(tmp_path: Path) -> None:
    build(tmp_path, [sample("loud", [("chatter", {})])])
    evaluate(tmp_path)
    tail = trace(tmp_path, "loud")["child"]["stdout_tail"]
    assert len(tail) < 5000 and tail.startswith("[... ")


def test_report_results_and_traces_agree(tmp_path: Path) -> None:
    out = build(tmp_path, [PASSING, sample("l4", [("refund", {"order_id": "B2"})], [{"refunded": True}]), '{"id": '])
    (out / "traces").mkdir()
    (out / "traces" / "stale.json").write_text("{}")
    report, results = evaluate(tmp_path, model_label="simulated")
    assert report["total"] == len(results) == 3 and report["passed"] + report["failed"] == 3
    assert report["success_rate"] == round(1 / 3, 4) and report["model_label"] == "simulated"
    assert report["limits"] == {"timeout_s": TIMEOUT_S, "memory_mb": MEMORY_MB, "disk_mb": 1024}
    assert sum(report["failures_per_layer"].values()) == report["failed"]
    assert {f["sample"] for f in report["failures"]} == {r["id"] for r in results.values() if not r["passed"]}
    assert json.loads((out / "report.json").read_text()) == report
    assert sorted(p.name for p in (out / "traces").iterdir()) == ["l4.json", "ok.json", "raw2.json"]
    for sid, result in results.items():
        assert set(result) == {"id", "file", "passed", "layer", "reason", "duration_s", "outputs"}
        assert trace(tmp_path, sid)["layer"] == result["layer"]
    assert trace(tmp_path, "ok")["final_data"]["orders"]["A1"]["status"] == "refunded"


def test_subset_rerun_replaces_results(tmp_path: Path) -> None:
    build(tmp_path, [PASSING, sample("l4", [("refund", {"order_id": "B2"})], [{"refunded": True}])])
    evaluate(tmp_path)
    report, results = evaluate(tmp_path, only=["l4"])
    assert list(results) == ["l4"] and report["total"] == 1 and report["only"] == ["l4"]


def test_same_and_lookup() -> None:
    assert same(1, 1.0) and not same(True, 1) and not same({"a": 1}, {"a": 1, "b": 2})
    data = {"orders": [{"id": "A1"}, {"id": "B2"}]}
    assert lookup(data, "orders.1.id") == (True, "B2") and lookup(data, "orders[0].id") == (True, "A1")
    found, why = lookup(data, "orders.5.id")
    assert not found and "'5'" in why


# ---- the RunEvaluation tool -------------------------------------------------------


def ctx(root: Path, iteration: int = 1) -> ToolContext:
    return ToolContext(
        root=root,
        agent="execute",
        iteration=iteration,
        model_label="simulated",
        settings=ToolSettings(eval_timeout_s=TIMEOUT_S, eval_memory_mb=MEMORY_MB),
    )


def test_tool_envelope(tmp_path: Path) -> None:
    build(tmp_path, [PASSING, sample("l4", [("refund", {"order_id": "B2"})], [{"refunded": True}])])
    result = RunEvaluation().run({}, ctx(tmp_path))
    assert result.status == "ok" and not result.ends_turn
    data = result.data
    assert (data["total"], data["passed"], data["failed"], data["success_rate"]) == (2, 1, 1, 0.5)
    assert data["failures_per_layer"]["L4"] == 1 and data["failures"][0]["sample"] == "l4"
    assert data["report_path"] == "execution_outputs/iteration_1/report.json"
    assert data["results_path"] == "execution_outputs/iteration_1/results.jsonl"
    assert json.loads(result.text())["status"] == "ok"
    assert json.loads((tmp_path / data["report_path"]).read_text())["model_label"] == "simulated"

    subset = RunEvaluation().run({"samples": ["ok"], "iteration": 1}, ctx(tmp_path, iteration=2))
    assert subset.status == "ok" and subset.data["total"] == 1 and subset.data["only"] == ["ok"]


@pytest.mark.parametrize(
    ("tool_input", "needle"),
    [
        ({"iteration": 3}, "iteration must be an integer from 1 to 1"),
        ({"samples": []}, "non-empty list"),
        ({"samples": ["nope"]}, "unknown sample ids: nope"),
    ],
)
def test_tool_input_errors(tmp_path: Path, tool_input: dict[str, Any], needle: str) -> None:
    build(tmp_path, [PASSING])
    result = RunEvaluation().run(tool_input, ctx(tmp_path))
    assert result.status == "error" and needle in (result.error or "")


def test_tool_missing_folders(tmp_path: Path) -> None:
    result = RunEvaluation().run({}, ctx(tmp_path))
    assert (
        result.status == "error"
        and "tools/ does not exist" in (result.error or "")
        and "tools/tools.py" in (result.error or "")
    )
    (tmp_path / "execution_outputs" / "iteration_1" / "tools").mkdir(parents=True)
    result = RunEvaluation().run({}, ctx(tmp_path))
    assert result.status == "error" and "no samples in execution_outputs/iteration_1/samples/" in (result.error or "")


def test_the_configured_disk_limit_reaches_the_samples(tmp_path: Path) -> None:
    """eval_disk_mb is a person's setting: RunEvaluation passes it on (it once ran every sample with the default)."""
    build(tmp_path, [PASSING])
    context = ctx(tmp_path)
    context.settings = ToolSettings(eval_timeout_s=TIMEOUT_S, eval_memory_mb=MEMORY_MB, eval_disk_mb=96)
    assert RunEvaluation().run({}, context).status == "ok"
    assert json.loads((tmp_path / "execution_outputs/iteration_1/report.json").read_text())["limits"]["disk_mb"] == 96

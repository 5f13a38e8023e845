"""``baton export`` without Inspect: the tools' schemas, the comparison the scorer uses,
which iteration is exported and what is refused, and the exported runtime's tool calls
and judging, run in limited child processes (docs/export.md)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from agents.scenario_facts import scenario_facts
from proving.evaluation.compare import effect_differences, free_text
from proving.export.build import ExportError, export_inspect
from proving.export.tool_specs import ToolSpecError, tool_specs
from tests.export_support import baton, runtime_of


def samples_of(root: Path, iteration: int) -> dict[str, dict]:
    folder = root / "execution_outputs" / f"iteration_{iteration}" / "samples"
    return {s["id"]: s for s in (json.loads(p.read_text()) for p in sorted(folder.glob("*.json")))}


# ---- the tools' schemas ----------------------------------------------------------------


def test_schemas_come_from_annotations_defaults_docstrings_and_the_samples(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(
        'import json\n'
        'def lookup(data, key: str, limit: int = 5, tags: list[str] | None = None):\n'
        '    """Find records.\n\n    key: the record id\n    """\n'
        'def refund(data, order_id, amount, *, note="") -> dict: ...\n'
        'def _helper(data): ...\n'
        'def untyped(data, whatever): ...\n'
    )
    samples = [{"actions": [{"tool": "refund", "args": {"order_id": "A1", "amount": 5}},
                            {"tool": "refund", "args": {"order_id": "A2", "amount": 5.5}}]}]
    specs = {s.name: s for s in tool_specs(tools, samples, "- refund(order_id, amount): pays the money back")}
    assert list(specs) == ["lookup", "refund", "untyped"]  # source order; _helper and imports are not tools
    lookup = specs["lookup"]
    assert lookup.description == "Find records."
    assert lookup.parameters["required"] == ["key"]
    assert lookup.parameters["properties"]["key"] == {"type": "string", "description": "the record id"}
    assert lookup.parameters["properties"]["limit"]["type"] == "integer"
    assert "type" not in lookup.parameters["properties"]["tags"]  # list[str] | None: an anyOf
    refund = specs["refund"]
    assert refund.description == "pays the money back"  # no docstring: the design's line
    assert refund.parameters["properties"]["order_id"]["type"] == "string"
    assert refund.parameters["properties"]["amount"]["type"] == "number"  # 5 and 5.5: a number
    assert refund.parameters["required"] == ["order_id", "amount"]  # note has a default
    assert "type" not in specs["untyped"].parameters["properties"]["whatever"]  # nothing says: no constraint
    assert all(p["description"] for s in specs.values() for p in s.parameters["properties"].values())


def test_tools_that_cannot_be_read_are_refused_with_the_reason(tmp_path: Path) -> None:
    broken = tmp_path / "tools.py"
    broken.write_text("def refund(data, order_id:\n")
    with pytest.raises(ToolSpecError, match="cannot be parsed"):
        tool_specs(broken, [])
    broken.write_text("def _private(data): ...\n")
    with pytest.raises(ToolSpecError, match="no public function"):
        tool_specs(broken, [])


# ---- the comparison of final states -----------------------------------------------------


def test_free_text_is_what_the_data_does_not_already_hold() -> None:
    initial = {"orders": {"O1": {"status": "delivered"}}, "refunds": []}
    actions = [{"tool": "issue_refund", "args": {"order_id": "O1", "amount": 5, "reason": "R1: in time"}}]
    assert free_text(actions, initial) == {"R1: in time"}


def test_effects_compare_exactly_except_the_agent_s_own_words() -> None:
    reference = {"orders": {"O1": {"status": "refunded"}}, "refunds": [{"order_id": "O1", "reason": "R1: in time"}]}
    worded = {"orders": {"O1": {"status": "refunded"}}, "refunds": [{"order_id": "O1", "reason": "within 30 days"}]}
    assert effect_differences(reference, worded, {"R1: in time"}) == []
    assert effect_differences(reference, worded, set()) != []  # without the free-text rule it would differ
    wrong_order = {"orders": {"O1": {"status": "refunded"}}, "refunds": [{"order_id": "O2", "reason": "x"}]}
    assert effect_differences(reference, wrong_order, {"R1: in time"}) == [
        'refunds.0.order_id: expected "O1", got "O2"']
    nothing = {"orders": {"O1": {"status": "delivered"}}, "refunds": []}
    assert effect_differences(reference, nothing, {"R1: in time"}) == [
        'orders.O1.status: expected "refunded", got "delivered"', "refunds: expected 1 item(s), got 0: []"]


# ---- what is exported, and what is refused -----------------------------------------------


def test_the_latest_passing_iteration_is_exported_whole(example: Path, exported: Path) -> None:
    spec = json.loads((exported / "scenario.json").read_text())
    assert spec["iteration"] == 2 and spec["success_rate"] == 1.0
    assert [s["id"] for s in spec["samples"]] == list(samples_of(example, 2))
    assert [t["name"] for t in spec["tools"]] == ["get_customer", "get_order", "list_orders", "issue_refund",
                                                  "issue_store_credit", "escalate", "record_refusal"]
    rules = (example / "design" / "business_rules.md").read_text().strip()
    assert rules in spec["policy"] and "today: 2026-03-15" in spec["policy"]
    source = example / "execution_outputs" / "iteration_2"
    assert (exported / "tools" / "tools.py").read_text() == (source / "tools" / "tools.py").read_text()
    assert (exported / "checkers" / "check_policy.py").is_file()
    assert '@task(name="refund_desk")' in (exported / "task.py").read_text()
    assert not list(exported.rglob("__pycache__"))


def test_an_iteration_below_target_is_exported_only_when_asked_and_with_a_warning(example: Path,
                                                                                 tmp_path: Path) -> None:
    done = export_inspect(example, tmp_path / "it1", scenario_facts(example), iteration=1)
    assert done.iteration == 1 and "did not pass: 80%" in (done.warning or "")
    with pytest.raises(ExportError, match="no iteration 9; it has iteration 1: 80%, iteration 2: 100%"):
        export_inspect(example, tmp_path / "it9", scenario_facts(example), iteration=9)


def test_no_passing_iteration_is_refused(example: Path, tmp_path: Path) -> None:
    root = tmp_path / "refund_desk"
    shutil.copytree(example, root)
    shutil.rmtree(root / "execution_outputs" / "iteration_2")
    with pytest.raises(ExportError, match=r"no iteration of refund_desk reached its target of 85% "
                                          r"\(iteration 1: 80%\); run it on, or export one anyway with --iteration K"):
        export_inspect(root, tmp_path / "out", scenario_facts(root))
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_an_export_is_never_overwritten(example: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = baton(example.parent, "export", "refund_desk", "--to", "inspect", "--out", str(out))
    assert result.exit_code == 2 and "is not a baton export" in result.output
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]  # no staging folder left behind
    (tmp_path / "file").write_text("")
    result = baton(example.parent, "export", "refund_desk", "--out", str(tmp_path / "file"))
    assert result.exit_code == 2 and "is a file; --out names the folder" in result.output


def test_an_earlier_export_is_replaced(example: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    export_inspect(example, out, scenario_facts(example), iteration=1)
    (out / "tools" / "stale.py").write_text("")
    result = baton(example.parent, "export", "refund_desk", "--to", "inspect", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "exported refund_desk iteration 2 (10 samples" in result.output
    assert json.loads((out / "scenario.json").read_text())["iteration"] == 2
    assert not (out / "tools" / "stale.py").exists()


@pytest.mark.parametrize(("inside", "task"), [(True, "exported/task.py"), (False, "../exported/task.py")],
                         ids=["export-below-cwd", "export-beside-cwd"])
def test_the_next_command_names_the_exported_task_relative_to_the_cwd(
        example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inside: bool, task: str) -> None:
    """Inspect cannot glob an absolute task path (its issue 5267): the hint is typed from where the user is.
    test_export_inspect.py runs it as printed (slow)."""
    cwd = tmp_path / "here"
    cwd.mkdir()
    out = (cwd if inside else tmp_path) / "exported"
    monkeypatch.chdir(cwd)
    result = baton(example.parent, "export", "refund_desk", "--out", str(out))
    assert result.exit_code == 0, result.output
    (hint,) = [line.removeprefix("next: ") for line in result.output.splitlines() if line.startswith("next: ")]
    assert hint == f"inspect eval {task} --model <provider/model>"
    assert (cwd / task).resolve() == (out / "task.py").resolve() and (out / "task.py").is_file()


# ---- the exported runtime: tool calls and judging in limited children --------------------


def test_a_tool_call_acts_on_the_data_it_is_given_and_returns_the_new_data(exported: Path) -> None:
    session = runtime_of(exported)
    scenario = session.Scenario.load(exported)
    data = scenario.initial_data()
    done = session.call_tool(scenario, "issue_refund", {"order_id": "O1001", "amount": 89.0, "reason": "R1"}, data)
    assert done.error is None and done.output["status"] == "refunded"
    assert done.data["orders"]["O1001"]["status"] == "refunded"
    assert data["orders"]["O1001"]["status"] == "delivered"  # the caller's copy is not touched
    again = session.call_tool(scenario, "issue_refund", {"order_id": "O1001", "amount": 89.0, "reason": "R1"},
                              done.data)
    assert again.output == {"error": "already_refunded", "order_id": "O1001"}


def test_bad_calls_come_back_as_errors_the_model_can_read(exported: Path) -> None:
    session = runtime_of(exported)
    scenario = session.Scenario.load(exported)
    data = scenario.initial_data()
    unknown = session.call_tool(scenario, "delete_everything", {}, data)
    assert unknown.error == ("there is no tool 'delete_everything'; the tools are: escalate, get_customer, "
                             "get_order, issue_refund, issue_store_credit, list_orders, record_refusal")
    wrong = session.call_tool(scenario, "get_order", {"id": "O1001"}, data)
    assert wrong.output is None
    assert wrong.error == "wrong arguments for get_order: missing a required argument: 'order_id'"


def test_a_tool_runs_with_limits_and_without_the_parent_s_secrets(exported: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    export = tmp_path / "export"
    shutil.copytree(exported, export)
    with (export / "tools" / "tools.py").open("a") as fh:
        fh.write("\n\ndef spin(data):\n    while True:\n        pass\n"
                 "\n\ndef environment(data):\n    import os\n    return {'keys': sorted(os.environ)}\n")
    spec = json.loads((export / "scenario.json").read_text())
    spec["limits"]["timeout_s"] = 1.0
    (export / "scenario.json").write_text(json.dumps(spec))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    session = runtime_of(export)
    scenario = session.Scenario.load(export)
    spun = session.call_tool(scenario, "spin", {}, scenario.initial_data())
    assert spun.error == "tool spin did not finish within the time limit (1 s)"
    seen = session.call_tool(scenario, "environment", {}, scenario.initial_data())
    assert "ANTHROPIC_API_KEY" not in seen.output["keys"] and "HOME" in seen.output["keys"]


def test_judging_passes_the_expected_actions_and_names_what_a_wrong_one_changed(example: Path,
                                                                              exported: Path) -> None:
    session = runtime_of(exported)
    scenario = session.Scenario.load(exported)
    sample = scenario.sample("s01_day30_refund")
    data, calls = scenario.initial_data(), []
    for action in sample["actions"]:
        args = {**action["args"], **({"reason": "customer is within the window"} if "reason" in action["args"] else {})}
        done = session.call_tool(scenario, action["tool"], args, data)
        calls.append({"tool": action["tool"], "args": args, "output": done.output})
        data = done.data
    verdict = session.judge(scenario, sample, calls, data)
    assert verdict.passed, verdict.explanation

    refused = scenario.sample("s02_final_sale_refused")  # final sale: the rules say refuse
    wrong = session.call_tool(scenario, "issue_refund", {"order_id": "O1002", "amount": 59.0, "reason": "sure"},
                              scenario.initial_data())
    verdict = session.judge(scenario, refused, [{"tool": "issue_refund", "output": wrong.output}], wrong.data)
    assert not verdict.passed
    assert 'orders.O1002.status: expected "delivered", got "refunded"' in verdict.explanation
    assert "expected_state 'orders.O1002.status'" in verdict.explanation
    assert "checker check_policy.check_policy rejects it: R2: order O1002 called for refuse" in verdict.explanation


def test_a_sample_is_judged_in_one_child(exported: Path, tmp_path: Path) -> None:
    """The replay of the expected actions and the checkers share one limited child, which forks the replay:
    a judged sample costs the box one child, not two. Counted through the box's ``run`` (a spawning one here:
    a fork of the test process, which has threads, is not safe)."""
    session = runtime_of(exported)
    box = sys.modules["baton_runtime.box"]
    processes = sys.modules["baton_runtime.processes"]
    started: list[Path] = []

    def spawned(job: Path, where: Path, **limits: object) -> object:
        started.append(job)
        child = exported / "baton_runtime" / "child_main.py"
        return processes.run_limited([sys.executable, "-I", str(child), str(job), str(where)], **limits)

    scenario = session.Scenario.load(exported)
    sample = scenario.sample("s02_final_sale_refused")
    calls, final = done_right(session, scenario, sample)
    header, job = box.split_request(session.judge_request(scenario, sample, calls, final))
    parts = box.launch(exported, header, job, tmp_path, run=spawned)
    ran = session.ran_from_box(0, box.frame(*parts).decode("utf-8"), "")
    assert len(started) == 1
    assert ran.reference is not None and "initial_data" not in ran.reference  # the task has it already
    assert ran.result is not None and "final_data" not in ran.result  # the task sent it
    assert session.judgement(scenario, sample, calls, final, ran).passed


def done_right(session, scenario, sample) -> tuple[list[dict], dict]:
    """The calls and final data of an agent that makes exactly the sample's expected calls."""
    data, calls = scenario.initial_data(), []
    for action in sample["actions"]:
        result = session.call_tool(scenario, action["tool"], action.get("args", {}), data)
        assert result.error is None, result.error
        calls.append({"tool": action["tool"], "args": action.get("args", {}), "output": result.output, "error": None})
        data = result.data
    return calls, data


def test_what_the_replay_leaves_behind_does_not_reach_the_checkers(exported: Path, tmp_path: Path) -> None:
    """The tools, imported for the replay, leave traces in their module, the builtins, the environment, the
    working directory and TMPDIR. Baton's own evaluation (mode sample: one interpreter) shows the checkers
    would see them; the judging child's checkers, which run after the replay it forked, see none."""
    export = tmp_path / "export"
    shutil.copytree(exported, export)
    with (export / "tools" / "tools.py").open("a") as fh:
        fh.write("\n\nimport builtins as _builtins, os as _os\n"
                 "_builtins.left_by_the_tools = True\n"
                 "_os.environ['LEFT_BY_THE_TOOLS'] = '1'\n"
                 "open('left_by_the_tools', 'w').close()\n"
                 "open(_os.path.join(_os.environ['TMPDIR'], 'left_by_the_tools_too'), 'w').close()\n")
    (export / "checkers" / "check_apart.py").write_text(
        "import builtins, os, sys\n\n\n"
        "def check_nothing_from_the_replay(sample, outcome):\n"
        "    traces = {'the tools module': 'tools' in sys.modules,\n"
        "              'the builtins': hasattr(builtins, 'left_by_the_tools'),\n"
        "              'the environment': 'LEFT_BY_THE_TOOLS' in os.environ,\n"
        "              'the working directory': os.path.exists('left_by_the_tools'),\n"
        "              'TMPDIR': os.path.exists(os.path.join(os.environ['TMPDIR'], 'left_by_the_tools_too'))}\n"
        "    seen = [where for where, found in traces.items() if found]\n"
        "    return {'passed': not seen, 'reason': 'the replay left traces in ' + ', '.join(seen)}\n")
    session = runtime_of(export)
    scenario = session.Scenario.load(export)
    sample = scenario.sample("s02_final_sale_refused")
    shared, problem = session._run(scenario, {"mode": "sample", "sample": sample})
    assert problem is None
    (together,) = [c for c in shared["checkers"] if c["checker"] == "check_apart.check_nothing_from_the_replay"]
    assert together["reason"] == ("the replay left traces in the tools module, the builtins, the environment, "
                                  "the working directory, TMPDIR")
    verdict = session.judge(scenario, sample, *done_right(session, scenario, sample))
    assert verdict.passed, verdict.explanation
    assert "check_apart.check_nothing_from_the_replay" in [c["checker"] for c in verdict.checkers]


def test_judging_says_whether_the_replay_or_the_checkers_failed(exported: Path, tmp_path: Path) -> None:
    export = tmp_path / "export"
    shutil.copytree(exported, export)
    tools = export / "tools" / "tools.py"
    original = tools.read_text()
    session = runtime_of(export)
    scenario = session.Scenario.load(export)
    sample = scenario.sample("s01_day30_refund")  # get_order, then issue_refund
    tools.write_text(original + "\n\ndef issue_refund(data, order_id, amount, reason):\n"
                                "    raise RuntimeError('the ledger is offline')\n")
    with pytest.raises(RuntimeError, match=r"^replaying sample s01_day30_refund's expected actions failed \(action 1: "
                                           r"tool issue_refund raised RuntimeError: the ledger is offline at "
                                           r"tools/tools\.py:\d+ in issue_refund\): the export is broken$"):
        session.judge(scenario, sample, [], scenario.initial_data())
    tools.write_text(original + "\n\ndef issue_refund(data, order_id, amount, reason):\n"
                                "    import os, sys\n"
                                "    print('the ledger vanished', file=sys.stderr, flush=True)\n"
                                "    os._exit(3)\n")
    with pytest.raises(RuntimeError, match=rf"^replaying sample s01_day30_refund's expected actions failed \(ended "
                                           rf"without a result \(exit 3, memory limit {scenario.memory_mb} MB\): "
                                           r'"the ledger vanished"\): the export is broken$'):
        session.judge(scenario, sample, [], scenario.initial_data())
    tools.write_text(original)
    with (export / "checkers" / "check_policy.py").open("a") as fh:
        fh.write("\n\nimport os as _os\n_os._exit(4)\n")  # the checkers' process ends as they are imported
    verdict = session.judge(scenario, sample, [], scenario.initial_data())  # no call: the refund is missing
    assert not verdict.passed and verdict.checkers == []
    assert ("the final data differs from the expected actions' effects at orders.O1001.status: "
            'expected "refunded", got "delivered"') in verdict.explanation
    assert (f'the checkers ended without a result (exit 4, memory limit {scenario.memory_mb} MB): "no output"'
            in verdict.explanation)
    (export / "checkers" / "check_policy.py").write_text("def check_policy(sample, outcome):\n"
                                                         "    return bytearray(1 << 40)\n")
    verdict = session.judge(scenario, sample, [], scenario.initial_data())
    assert not verdict.passed
    assert ("the checkers stopped in checker check_policy.check_policy: memory limit reached (MemoryError)"
            in verdict.explanation)

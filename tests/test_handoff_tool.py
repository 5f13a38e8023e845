"""SubmitHandoff: validation against the payload models and the folder, then an atomic write."""

from __future__ import annotations

import json

from agents.config import AgentConfig
from agents.payloads import MAX_PAYLOAD_BYTES
from agents.tools.base import ToolContext, run_tool
from agents.tools.handoff import SubmitHandoff
from agents.tools.registry import tools_for


def _init_payload(**over):
    return {
        "scenario": "s", "iteration": 1, "design_files": ["design/a.md"], "design_summary": "d",
        "business_rules": ["R1: x"], "format_spec": "f", "acceptance_criteria": {"target_success_rate": 0.85}, **over,
    }


def _execute_payload(**over):
    return {
        "iteration": 1, "execution_output_dir": "execution_outputs/iteration_1", "success_rate": 0.5,
        "totals": {"samples": 2, "passed": 1, "failed": 1}, "failures_per_layer": {"L1": 1},
        "layer1_problems_summary": ["s2: R2 vs R3"], "recommendation": "fix R2/R3", **over,
    }


def test_valid_init_payload_is_written_and_ends_the_turn(tmp_path):
    (tmp_path / "design").mkdir()
    (tmp_path / "design/a.md").write_text("# design")
    result = SubmitHandoff("init").run({"payload": _init_payload()}, ToolContext(tmp_path, "init", 1))
    assert result.status == "ok" and result.ends_turn
    written = json.loads((tmp_path / "handoffs/iteration_1/init_to_execute_context.json").read_text())
    assert written["kind"] == "init_to_execute" and written["design_files"] == ["design/a.md"]


def test_invalid_payload_comes_back_as_an_error_naming_fields(tmp_path):
    result = SubmitHandoff("init").run(
        {"payload": _init_payload(iteration=0, design_files=["../x.md"])}, ToolContext(tmp_path, "init", 1)
    )
    assert result.status == "error" and not result.ends_turn
    assert (
        "iteration" in result.error and "design_files[0]" in result.error and "call SubmitHandoff again" in result.error
    )
    assert not (tmp_path / "handoffs").exists()


def test_payload_must_match_the_folder(tmp_path):
    result = SubmitHandoff("init").run({"payload": _init_payload(iteration=2)}, ToolContext(tmp_path, "init", 1))
    assert "this is iteration 1, not 2" in result.error and "design/a.md" in result.error
    out = tmp_path / "execution_outputs/iteration_1"
    out.mkdir(parents=True)
    no_report = SubmitHandoff("execute").run({"payload": _execute_payload()}, ToolContext(tmp_path, "execute", 1))
    assert "run RunEvaluation first" in no_report.error
    (out / "report.json").write_text(json.dumps({"total": 3, "passed": 1}))
    mismatch = SubmitHandoff("execute").run({"payload": _execute_payload()}, ToolContext(tmp_path, "execute", 1))
    assert "totals.samples: claimed 2, report.json says 3" in mismatch.error
    (out / "report.json").write_text(json.dumps({"total": 2, "passed": 1}))
    accepted = SubmitHandoff("execute").run({"payload": _execute_payload()}, ToolContext(tmp_path, "execute", 1))
    assert accepted.status == "ok" and accepted.data["path"] == "handoffs/iteration_1/execute_to_init_context.json"


def test_secrets_in_a_payload_are_redacted_on_disk(tmp_path):
    (tmp_path / "design").mkdir()
    (tmp_path / "design/a.md").write_text("# design")
    leaky = _init_payload(design_summary="use api_key=sk-ant-api03-" + "z" * 40)
    SubmitHandoff("init").run({"payload": leaky}, ToolContext(tmp_path, "init", 1))
    assert "sk-ant-api03" not in (tmp_path / "handoffs/iteration_1/init_to_execute_context.json").read_text()


def test_every_tool_has_a_schema_the_api_accepts():
    for role in ("init", "execute"):
        tools = tools_for(AgentConfig(role=role, bash_enabled=True))
        assert ("RunEvaluation" in tools) == (role == "execute") and "Bash" in tools
        for tool in tools.values():
            assert tool.description.strip() and tool.input_schema["type"] == "object"
            assert "$ref" not in json.dumps(tool.input_schema)  # self-contained
            json.dumps(tool.input_schema)
    assert "Bash" not in tools_for(AgentConfig(role="init"))


def test_unknown_tool_and_path_escape_are_error_results(tmp_path):
    tools = tools_for(AgentConfig(role="init"))
    ctx = ToolContext(tmp_path, "init", 1)
    assert "unknown tool 'Nope'" in run_tool(tools, "Nope", {}, ctx).error
    assert run_tool(tools, "Read", {"path": "../../etc/passwd"}, ctx).status == "error"


def _report(root, **figures):
    out = root / "execution_outputs/iteration_1"
    out.mkdir(parents=True, exist_ok=True)
    report = {"iteration": 1, "total": 10, "passed": 8, "failed": 2, "success_rate": 0.8,
              "failures_per_layer": {"L1": 1, "L2": 0, "L3": 1, "L4": 0}, **figures}
    (out / "report.json").write_text(json.dumps(report))


def _claim(**over):
    figures = {"totals": {"samples": 10, "passed": 8, "failed": 2}, "success_rate": 0.8,
               "failures_per_layer": {"L1": 1, "L3": 1}}
    return _execute_payload(**{**figures, **over})


def test_a_claimed_success_rate_is_refused_naming_each_figure(tmp_path):
    _report(tmp_path)
    ctx = ToolContext(tmp_path, "execute", 1)
    result = SubmitHandoff("execute").run({"payload": _claim(success_rate=1.0)}, ctx)
    assert result.status == "error" and not result.ends_turn
    assert "success_rate: claimed 1.0, report.json says 0.8" in result.error
    assert not (tmp_path / "handoffs").exists()  # nothing written
    everything = _claim(success_rate=1.0, totals={"samples": 10, "passed": 10, "failed": 0},
                        failures_per_layer={"L1": 0})
    error = SubmitHandoff("execute").run({"payload": everything}, ctx).error
    for figure in ("success_rate: claimed 1.0", "totals.passed: claimed 10, report.json says 8",
                   "totals.failed: claimed 0, report.json says 2",
                   "failures_per_layer.L1: claimed 0, report.json says 1",
                   "failures_per_layer.L3: claimed 0, report.json says 1"):
        assert figure in error, figure
    assert SubmitHandoff("execute").run({"payload": _claim()}, ctx).status == "ok"


def test_the_rate_is_the_reports_to_its_last_digit(tmp_path):
    _report(tmp_path, total=3, passed=2, failed=1, success_rate=0.6667, failures_per_layer={"L1": 1})
    ctx = ToolContext(tmp_path, "execute", 1)
    two_of_three = {"totals": {"samples": 3, "passed": 2, "failed": 1}, "failures_per_layer": {"L1": 1}}
    assert SubmitHandoff("execute").run({"payload": _execute_payload(success_rate=0.67, **two_of_three)},
                                        ctx).status == "error"
    assert SubmitHandoff("execute").run({"payload": _execute_payload(success_rate=2 / 3, **two_of_three)},
                                        ctx).status == "ok"


def test_the_report_must_be_this_iterations(tmp_path):
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake/report.json").write_text(json.dumps({"total": 2, "passed": 1}))
    result = SubmitHandoff("execute").run({"payload": _execute_payload(execution_output_dir="fake")},
                                          ToolContext(tmp_path, "execute", 1))
    assert "execution_outputs/iteration_1" in result.error and not (tmp_path / "handoffs").exists()


def test_an_oversized_payload_is_refused_and_nothing_written(tmp_path):
    _report(tmp_path)
    huge = _claim(recommendation="x" * (MAX_PAYLOAD_BYTES + 1))
    result = SubmitHandoff("execute").run({"payload": huge}, ToolContext(tmp_path, "execute", 1))
    assert result.status == "error" and f"{MAX_PAYLOAD_BYTES:,}" in result.error
    assert "nothing was written" in result.error
    assert not (tmp_path / "handoffs").exists()

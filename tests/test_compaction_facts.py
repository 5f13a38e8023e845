"""What a fallback summary is built from: Init redesigning sees Execute's last report, and the target."""

from __future__ import annotations

import json

from agents.compaction_task import _facts
from agents.disk import AgentDisk, open_turn
from tests.agent_run import copy_example


def test_init_redesigning_sees_the_previous_iterations_report_and_the_target(tmp_path):
    root = copy_example(tmp_path)
    report = {"total": 10, "passed": 8, "failures_per_layer": {"L1": 2, "L2": 0, "L3": 0, "L4": 0}}
    (root / "execution_outputs" / "iteration_1").mkdir(parents=True)
    (root / "execution_outputs" / "iteration_1" / "report.json").write_text(json.dumps(report))
    open_turn(root, "init", 2, "Iteration: 2\nScenario: refund_desk\n\nRedesign.", key="iteration-2")
    open_turn(root, "execute", 2, "Iteration: 2\nScenario: refund_desk\n\nBuild.", key="iteration-2")

    init = _facts(AgentDisk.load(root, "init"))
    assert init.last_report == report and init.execution_output_dir == "execution_outputs/iteration_1"
    assert init.target_success_rate == 0.85
    execute = _facts(AgentDisk.load(root, "execute"))  # Execute's own iteration has no report yet
    assert execute.last_report is None

"""A real process killed with SIGKILL inside a step, then resumed by another process."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agents.disk import AgentDisk
from tests.agent_run import agents, assert_log_consistent, copy_example, turn_surviving_crashes

REPO = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from agents.openings import init_opening
    from agents.disk import open_turn
    from agents.step import run_turn
    from tests.agent_run import agents

    root, point, at_step = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])

    def fault(where, step):
        if where == point and step == at_step:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally, no flush

    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    run_turn(root, agents(root)["init"], fault=fault)
""")


@pytest.mark.parametrize("point", ["after_model_call", "after_tool:0", "before_persist_results"])
@pytest.mark.slow  # kills real processes
def test_sigkill_mid_step_then_resume(tmp_path, point):
    root = copy_example(tmp_path)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), point, "3"], cwd=REPO, capture_output=True, timeout=300
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    killed_at = len(AgentDisk.load(root, "init").steps)
    assert killed_at in (2, 3)

    out = turn_surviving_crashes(root, agents(root)["init"], None)
    assert out.status == "handoff"
    disk = assert_log_consistent(root, "init")
    assert (root / "handoffs/iteration_1/init_to_execute_context.json").is_file()
    # Each step's request was answered once and kept once.
    requests = [r.request for r in disk.steps]
    assert len(requests) == len(set(requests))

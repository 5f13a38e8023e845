"""Recorded trajectories replayed through assembly at every step, with the thresholds scaled
down so compaction happens, yield only valid requests: synthetic runs of the same format always
(tests/synthetic_trajectories.py), every recorded run where ../shared/trajectories is present."""

from pathlib import Path

import pytest

from context.assembly import Assembler, StaticPrefix
from context.compaction import CircuitBreaker, compact
from context.history import History
from context.policy import Policy
from context.protocol import repair, validate
from context.summary_schemas import ExecuteSummary
from tests.logs import (
    NO_SHARED_TRAJECTORIES,
    TRAJECTORIES,
    load_trajectories,
    trajectory_messages,
)
from tests.synthetic_trajectories import write_synthetic

# Scaled far down (the runs hold 3k-170k tokens) so that even tau-bench runs compact.
SCALED = {
    "claude-code": Policy(window=40_000, threshold=20_000, keep_last_steps=5, batch=5, max_tokens=4_000),
    # one recorded gemini answer holds 54k tokens, more than a real max_tokens allows:
    # the window must hold that message, the threshold stays low so compaction happens
    "mini-swe-agent": Policy(window=100_000, threshold=8_000, keep_last_steps=5, batch=2, max_tokens=2_000),
    "tau-bench-airline": Policy(window=8_000, threshold=2_500, keep_last_steps=3, batch=1, max_tokens=1_000),
}


def replay(name: str, folder: Path) -> tuple[int, int]:
    """Every request of every run of ``name`` assembled and validated; returns (requests, compactions)."""
    compactions = requests = 0
    for run in load_trajectories(name, folder):
        history = History()
        assembler = Assembler(history, SCALED[name], agent="execute", static=StaticPrefix(system=run["system"]))
        event, breaker = None, CircuitBreaker()
        for msg in trajectory_messages(run):
            if msg.role == "assistant" and history.view and not history.pending_tool_ids:
                request = assembler.assemble(event)
                if assembler.should_compact(request, event):
                    event = compact(
                        schema=ExecuteSummary,
                        assembler=assembler,
                        previous=event,
                        prompt="Summarise.",
                        call=None,
                        breaker=breaker,
                    )
                    compactions += 1
                    request = assembler.assemble(event)
                validate(request.messages)
                assert request.estimated_input + assembler.policy.max_tokens <= assembler.policy.window
                requests += 1
            history.append(msg)
        validate(repair(history.view))
    return requests, compactions


@pytest.mark.parametrize("name", sorted(SCALED))
def test_every_step_of_synthetic_runs_assembles_valid_requests(name, tmp_path):
    requests, compactions = replay(name, write_synthetic(tmp_path, shapes=(name,)))
    assert requests > 20 and compactions > 0


@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason=NO_SHARED_TRAJECTORIES)
@pytest.mark.parametrize("name", sorted(SCALED))
@pytest.mark.slow  # every recorded run
def test_every_step_of_every_run_assembles_valid_requests(name):
    requests, compactions = replay(name, TRAJECTORIES)
    assert requests > 100 and compactions > 0

"""A late or skipped compaction never ends the run in an overflow (issue 38).

Under load a compaction's wall-clock budget (``summary_timeout_s``) can pass before the summary call is made, and
the model can be unavailable: baton falls back to its own summary. Whatever the compaction did, the step after it
either waits for it or sends a request shrunk to fit the window (older results compressed, thinking left out, the
newest steps compressed too), and says so once; the "still over the threshold" warning is said once too. Before,
a step whose context overflowed asked for a compaction whose own first assembly raised ``ContextOverflow``, which
escaped the task ("unexpected ContextOverflow", exit 2).
"""

from __future__ import annotations

from collections import Counter

import pytest

from agents.agent import Agent
from agents.disk import AgentDisk, open_turn
from agents.models import ModelRequest, ModelResponse, ModelUnavailable
from agents.openings import init_opening
from agents.settings_layers import resolve_config
from agents.simulated import SimulatedModel
from agents.step import run_turn
from context.assembly import Assembler
from context.compaction import CircuitBreaker, compact
from context.history import History
from context.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, user
from context.policy import Policy
from context.summary_schemas import InitSummary
from tests.agent_run import started_example

# The window is tight for what Init always sends (prompt, tools, summary, pinned opening: about 9,400 tokens), and
# the threshold is as high as it may be (threshold + max_tokens <= window): one step can take the context from under
# the threshold to over the window, as a step of large writes did in the runs under load.
TIGHT = {"BATON_INIT_WINDOW": "12000", "BATON_INIT_THRESHOLD": "9950"}
LATE = {"BATON_SUMMARY_TIMEOUT_S": "0.001"}  # the compaction's deadline has passed before its first call


class SummariesUnavailable(SimulatedModel):
    """The simulated model, except that every summary call finds the model unavailable."""

    def create(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":
            raise ModelUnavailable("overloaded: the summary call could not be served")
        return super().create(request)


def init_turn(tmp_path, env: dict[str, str], model: SimulatedModel | None = None):
    root = started_example(tmp_path)
    agent = Agent(resolve_config("init", scenario_toml=root / "scenario.toml", env=env, profile="demo"),
                  model or SimulatedModel())
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    return run_turn(root, agent), AgentDisk.load(root, "init")


@pytest.mark.parametrize("why", ["deadline passed", "model unavailable"])
def test_a_late_compaction_in_a_tight_window_ends_the_turn_with_its_handoff(tmp_path, why):
    late = why == "deadline passed"
    outcome, disk = init_turn(tmp_path, {**TIGHT, **(LATE if late else {})}, None if late else SummariesUnavailable())
    assert outcome.status == "handoff", outcome.reason
    compactions = [e for e in disk.events if e.kind == "compaction"]
    assert compactions and all(e.fallback for e in compactions)  # every one late, every one baton's own summary
    warnings = Counter(e.code for e in disk.events if e.kind == "warning")
    assert max(warnings.values(), default=0) <= 1, warnings  # each condition said once


def test_the_demo_window_with_every_compaction_late_still_reaches_the_handoff_and_says_things_once(tmp_path):
    outcome, disk = init_turn(tmp_path, LATE)
    assert outcome.status == "handoff", outcome.reason
    warnings = Counter(e.code for e in disk.events if e.kind == "warning")
    assert max(warnings.values(), default=0) <= 1, warnings


def test_a_compaction_asked_for_by_an_overflowing_step_is_made_not_raised():
    # The context is already over the window (a late compaction): the summary request cannot be sent, and the
    # compaction is baton's own summary, built without one; the request after it fits.
    policy = Policy(window=6_000, threshold=3_500, max_tokens=1_000, keep_last_steps=2, start_tokens=0,
                    payback_calls=0, batch=1)
    history = History(redact=False)
    history.append(user("Design the scenario."))
    for i in range(1, 5):
        call = ToolUseBlock(id=f"toolu_{i}", name="Write", input={"path": f"design/f{i}.md", "content": "w " * 2_500})
        history.append(Message(role="assistant", content=[TextBlock(text=f"writing part {i}"), call]))
        history.append(user(ToolResultBlock(tool_use_id=f"toolu_{i}", content="written")))
    asm = Assembler(history, policy, agent="init")
    event = compact(schema=InitSummary, assembler=asm, previous=None, prompt="Summarise.", call=None,
                    breaker=CircuitBreaker())
    after = asm.assemble(event)
    assert event.fallback and after.estimated_input + policy.max_tokens <= policy.window
    assert after.squeezed  # the newest steps' writes were compressed to fit, and the request says so

"""End to end: the durable step against ``baton fake-api`` (real SDK, real HTTP on 127.0.0.1), whose
model faults produce the stops a real Claude can (docs/fake-api.md, docs/agents.md "Stop reasons")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.agent import Agent
from agents.anthropic_model import AnthropicModel
from agents.compaction_task import run_compaction
from agents.disk import AgentDisk, open_turn
from agents.events import OutputCutEvent, StepEvent
from agents.openings import init_opening
from agents.step import run_step
from tests.agent_run import agents, assert_log_consistent, copy_example
from tests.fake_api_support import KEY, queue_fault, stats
from workers.fake_api.server import FakeApi, Running, start

MODEL = "claude-opus-5-5"  # a model the double's catalogue lists


@pytest.fixture
def server() -> Iterator[Running]:
    running = start(FakeApi())
    yield running
    running.stop()


def init_on(server: Running, tmp_path: Path, summary_timeout_s: float | None = None) -> tuple[Path, Agent]:
    root = copy_example(tmp_path)
    config = agents(root)["init"].config
    settings = {"name": MODEL} | ({"summary_timeout_s": summary_timeout_s} if summary_timeout_s else {})
    config = config.model_copy(update={"model": config.model.model_copy(update=settings)})
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    return root, Agent(config, AnthropicModel(api_key=KEY, base_url=server.url, sleep=lambda s: None))


def test_a_cut_tool_call_is_asked_for_again_and_never_run(server, tmp_path):
    root, agent = init_on(server, tmp_path)
    queue_fault(server.url, fault="max_tokens_cut")
    assert run_step(root, agent).status == "continue"
    assert stats(server.url)["faults"] == {"max_tokens_cut": 1}
    disk = assert_log_consistent(root, "init")
    assert [r.kind for r in disk.records] == ["opening", "assistant", "results"]
    (cut,) = [e for e in disk.events if isinstance(e, OutputCutEvent)]
    assert (cut.max_tokens, cut.retry_max_tokens) == (2048, 4096)
    (step,) = [e for e in disk.events if isinstance(e, StepEvent)]
    assert step.stop_reason == "tool_use" and step.counted_input  # the first call was counted by the API


def test_cut_twice_the_agent_is_told_and_nothing_runs(server, tmp_path):
    root, agent = init_on(server, tmp_path)
    queue_fault(server.url, fault="max_tokens_cut", count=2)
    assert run_step(root, agent).status == "continue"
    disk = assert_log_consistent(root, "init")
    assert [r.kind for r in disk.records] == ["opening", "assistant", "note"]
    assert disk.messages()[1].tool_uses == [] and "smaller tool calls" in disk.messages()[2].text
    assert not list(disk.layout.root.glob("state/init/tool_results/*"))


def test_a_refusal_fails_the_step(server, tmp_path):
    root, agent = init_on(server, tmp_path)
    queue_fault(server.url, fault="refusal")
    out = run_step(root, agent)
    assert (out.status, out.stop_reason) == ("failed", "refusal") and "refused" in out.reason
    assert [r.kind for r in AgentDisk.load(root, "init").records] == ["opening"]


def test_the_window_running_out_compacts_then_the_step_goes_on(server, tmp_path):
    root, agent = init_on(server, tmp_path)
    assert run_step(root, agent).status == "continue"
    queue_fault(server.url, fault="context_window_exceeded")
    assert run_step(root, agent).status == "compaction_needed"
    assert run_compaction(root, agent, force=True).status == "compacted"
    assert run_step(root, agent).status == "continue"


@pytest.mark.slow  # waits for a real deadline
def test_a_summary_that_hangs_falls_back_within_its_budget(server, tmp_path):
    # A budget of 2 s leaves room for one attempt (agents.anthropic_model.MIN_ATTEMPT_S is 1 s): with 1 s, as
    # before, the summary was never asked for, and the test passed without meeting the hang.
    root, agent = init_on(server, tmp_path, summary_timeout_s=2.0)
    assert run_step(root, agent).status == "continue"
    queue_fault(server.url, fault="hang", hang_s=10.0, match="compact_summary")
    started = time.monotonic()
    outcome = run_compaction(root, agent, force=True)
    assert time.monotonic() - started < 6.0  # near its 2 s budget, far short of the 10 s hang
    assert outcome.status == "compacted" and outcome.fallback
    assert stats(server.url)["faults"] == {"hang": 1}  # the summary was asked for, and hung

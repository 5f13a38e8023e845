"""The durable step: fencing, crash recovery, compaction hand-off, model errors."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from agents.compaction_task import run_compaction
from agents.disk import AgentDisk, open_turn
from agents.models import ModelError, ModelRequest, ModelResponse, PromptTooLong
from agents.openings import init_opening
from agents.simulated import SimulatedModel
from agents.step import MAX_NUDGES, run_step, run_turn
from context.messages import TextBlock
from tests.agent_run import (
    Crash,
    agents,
    assert_log_consistent,
    copy_example,
    crash_once_per_step,
    run_iteration,
)

POINTS = ["after_model_call", "after_persist_response", "after_tool:0", "after_tool:1", "before_persist_results"]


def _persisted_requests(root: Path) -> list[str]:
    return [r.request for role in ("init", "execute") for r in AgentDisk.load(root, role).steps]


def _outputs(root: Path) -> dict[str, str]:
    """Everything the agents produced, minus timestamps and timings."""
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if (
            path.is_file()
            and not rel.startswith("state/")
            and "traces/" not in rel
            and not rel.endswith(("report.json", "results.jsonl"))
        ):
            files[rel] = path.read_text()
    report = json.loads((root / "execution_outputs/iteration_1/report.json").read_text())
    files["report"] = json.dumps(
        {k: report[k] for k in ("total", "passed", "failures_per_layer", "failures")}, sort_keys=True
    )
    return files


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    root = copy_example(tmp_path_factory.mktemp("clean"))
    model = SimulatedModel()
    run_iteration(root, agents(root, model), 1)
    return root, model


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.slow  # a crash at every point of real steps
def test_crash_at_every_step_point_completes_without_asking_twice(tmp_path, clean_run, point):
    clean_root, clean_model = clean_run
    root = copy_example(tmp_path)
    model = SimulatedModel()
    fault = crash_once_per_step(point)
    run_iteration(root, agents(root, model), 1, fault=fault)

    assert fault.crashed, f"no step reached {point}"
    for role in ("init", "execute"):
        assert_log_consistent(root, role)
    # Same work as a run without crashes, file for file.
    assert _outputs(root) == _outputs(clean_root)
    assert [len(AgentDisk.load(root, r).steps) for r in ("init", "execute")] == [
        len(AgentDisk.load(clean_root, r).steps) for r in ("init", "execute")]
    # A persisted response is never requested again. Only a crash between the call and
    # persisting its answer repeats that one request (nothing of it was kept).
    repeated = {fp: n for fp, n in Counter(model.requests).items() if n > 1}
    persisted = set(_persisted_requests(root))
    if point == "after_model_call":
        assert len(repeated) == len(fault.crashed) and all(n == 2 for n in repeated.values())
        assert set(repeated) <= persisted
    else:
        assert repeated == {}
    assert len(model.requests) == len(clean_model.requests) + len(repeated)


def test_tool_finished_before_a_crash_is_not_run_again(tmp_path, monkeypatch):
    import agents.step_tools as step_tools

    runs: Counter[str] = Counter()
    original = step_tools.run_tool

    def counting(tools, name, tool_input, ctx):
        runs[name] += 1
        return original(tools, name, tool_input, ctx)

    monkeypatch.setattr(step_tools, "run_tool", counting)
    root = copy_example(tmp_path)
    team = agents(root)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    fault = crash_once_per_step("after_tool:0")
    for _ in range(8):
        try:
            run_step(root, team["init"], fault=fault)
        except Crash:
            pass
    disk = assert_log_consistent(root, "init")
    assert fault.crashed
    calls = Counter(u.name for m in disk.messages() for u in m.tool_uses)
    assert runs == calls  # every call in the log ran exactly once, crashes or not


def test_stale_and_duplicate_steps_do_nothing(tmp_path):
    root = copy_example(tmp_path)
    model = SimulatedModel()
    team = agents(root, model)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    assert run_step(root, team["init"], step=1).status == "continue"
    before = (root / "state/init/log.jsonl").read_bytes(), len(model.requests)
    dup = run_step(root, team["init"], step=1)
    ahead = run_step(root, team["init"], step=5)
    assert (dup.status, ahead.status) == ("skipped", "skipped")
    assert "already done" in dup.reason and "not due yet" in ahead.reason
    assert ((root / "state/init/log.jsonl").read_bytes(), len(model.requests)) == before
    assert run_step(root, team["init"], step=2).status == "continue"


def test_opening_is_idempotent_and_idle_without_turn(tmp_path):
    root = copy_example(tmp_path)
    team = agents(root)
    assert run_step(root, team["init"]).status == "idle"
    assert open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1") is True
    assert open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1") is False
    assert len(AgentDisk.load(root, "init").records) == 1


class _Scripted:
    """A model that fails in given ways, then defers to the simulated model."""

    label = "scripted"

    def __init__(self, errors: list[Exception], text_only: bool = False):
        self.errors, self.text_only, self.sim, self.calls = list(errors), text_only, SimulatedModel(), []

    def create(self, request: ModelRequest) -> ModelResponse:
        self.calls.append(request.purpose)
        if request.purpose == "step" and self.errors:
            raise self.errors.pop(0)
        if self.text_only and request.purpose == "step":
            return ModelResponse(content=[TextBlock(text="I think I am done.")], stop_reason="end_turn")
        return self.sim.create(request)


def test_prompt_too_long_becomes_one_compaction_and_one_retry(tmp_path):
    root = copy_example(tmp_path)
    model = _Scripted([PromptTooLong("prompt is too long: 210000 tokens > 200000 maximum")])
    team = agents(root, model)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    first = run_step(root, team["init"])
    assert first.status == "compaction_needed" and "too long" in first.reason
    assert run_compaction(root, team["init"], force=True).status == "compacted"
    assert run_step(root, team["init"]).status == "continue"
    assert model.calls == ["step", "summary", "step"]


def test_prompt_too_long_twice_fails_the_step(tmp_path):
    root = copy_example(tmp_path)
    model = _Scripted([PromptTooLong("prompt is too long"), PromptTooLong("prompt is too long")])
    team = agents(root, model)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    assert run_step(root, team["init"]).status == "compaction_needed"
    run_compaction(root, team["init"], force=True)
    second = run_step(root, team["init"])
    assert second.status == "failed" and "still too long" in second.reason
    assert AgentDisk.load(root, "init").steps == []  # nothing half-written


def test_model_error_fails_with_reason_and_persists_nothing(tmp_path):
    root = copy_example(tmp_path)
    team = agents(root, _Scripted([ModelError("401 authentication_error: invalid x-api-key")]))
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    out = run_step(root, team["init"])
    assert out.status == "failed" and "authentication_error" in out.reason
    disk = AgentDisk.load(root, "init")
    assert disk.steps == [] and disk.events[-1].kind == "error"
    assert run_step(root, agents(root)["init"]).status == "continue"  # a later retry goes on


def test_reply_without_tools_is_reminded_then_fails(tmp_path):
    root = copy_example(tmp_path)
    team = agents(root, _Scripted([], text_only=True))
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    statuses = [run_step(root, team["init"]).status for _ in range(MAX_NUDGES + 1)]
    assert statuses == ["continue"] * MAX_NUDGES + ["failed"]
    disk = assert_log_consistent(root, "init")
    assert sum(r.kind == "note" for r in disk.records) == MAX_NUDGES


def test_turn_stops_at_max_steps(tmp_path):
    root = copy_example(tmp_path)
    team = agents(root)
    from agents.agent import Agent

    small = Agent(team["init"].config.model_copy(update={"max_steps_per_turn": 3}), team["init"].model)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    out = run_turn(root, small)
    assert out.status == "failed" and "max_steps_per_turn" in out.reason

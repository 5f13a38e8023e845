"""What a crash, a duplicate or a stray task leaves behind (issue 11, defects 3, 4 and 8)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agents.compaction_task import run_compaction
from agents.disk import AgentDisk, open_turn
from agents.events import CompactionRecord, StepEvent, read_events
from agents.models import ModelRequest, ModelResponse
from agents.openings import init_opening
from agents.simulated import SimulatedModel
from agents.step import run_step
from scenarios.store import Layout
from tests.agent_run import agents, copy_example, crash_once_per_step, turn_surviving_crashes
from tests.shared_runs import shared_run
from workers.tasks import BadTaskArguments, checked


class CountingModel(SimulatedModel):
    """The simulated model, counting its summary calls."""

    def __init__(self) -> None:
        super().__init__()
        self.summaries = 0

    def create(self, request: ModelRequest) -> ModelResponse:
        self.summaries += request.purpose == "summary"
        return super().create(request)


def _init_turn(root: Path) -> None:
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")


def test_a_crash_between_the_log_append_and_the_step_event_loses_no_event(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    _init_turn(root)
    fault = crash_once_per_step("after_append_response")
    assert turn_surviving_crashes(root, agents(root)["init"], fault).status == "handoff"
    assert len(fault.crashed) > 3  # every step crashed once right after its response was logged

    steps = [r.step for r in AgentDisk.load(root, "init").steps]
    written, problems = read_events(Layout(root).events("init"))  # the file itself, not what load derives
    assert not problems
    assert [e.step for e in written if isinstance(e, StepEvent)] == steps  # each once, in order


def test_load_derives_the_event_a_crash_left_owed(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    _init_turn(root)
    with pytest.raises(Exception, match="after_append_response"):
        run_step(root, agents(root)["init"], fault=crash_once_per_step("after_append_response"))
    written, _ = read_events(Layout(root).events("init"))
    assert not any(isinstance(e, StepEvent) for e in written)
    disk = AgentDisk.load(root, "init")
    assert [e.step for e in disk.events if isinstance(e, StepEvent)] == [1]  # what status and spend count
    assert disk.owed and isinstance(disk.owed[0], StepEvent) and disk.owed[0].usage


def _compacting_turn(root: Path, model: CountingModel, *, strays: bool) -> int:
    """Init's first turn, compacting when a step asks. With ``strays``, as duplicate delivery has it: a
    compaction task after every step, and every compaction delivered twice. Returns the compactions."""
    agent = agents(root, model)["init"]
    _init_turn(root)
    for _ in range(500):
        outcome = run_step(root, agent)
        if strays:
            last = AgentDisk.load(root, "init").last_step()
            run_compaction(root, agent, last.step if last else 0)
        if outcome.status == "compaction_needed":
            run_compaction(root, agent, outcome.step - 1)
            if strays:
                again = run_compaction(root, agent, outcome.step - 1)
                assert again.status == "skipped" and again.skip == "already_compacted", again
        elif outcome.status != "continue":
            break
    assert outcome.status == "handoff", outcome
    if strays:
        assert run_compaction(root, agent, last.step).skip == "not_due"  # after the turn ended
    return sum(isinstance(e, CompactionRecord) for e in AgentDisk.load(root, "init").events)


def test_compactions_nobody_asked_for_make_no_summary_call(tmp_path: Path) -> None:
    plain, disturbed = CountingModel(), CountingModel()
    asked = _compacting_turn(copy_example(tmp_path / "plain"), plain, strays=False)
    assert asked >= 1 and plain.summaries == asked
    assert _compacting_turn(copy_example(tmp_path / "strays"), disturbed, strays=True) == asked
    assert disturbed.summaries == asked


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("step", "refund_desk", "bogus", 3), "agent: Input should be 'init' or 'execute'"),
        (("step", "refund_desk", "init", "x"), "number: Input should be a valid integer"),
        (("step", "refund_desk", "init", 2.5), "number: Input should be a valid integer"),
        (("step", "refund_desk", "init", -1), "number: Input should be greater than or equal to 0"),
        (("step", "../etc", "init", 1), "invalid scenario name '../etc'"),
        (("compaction", "refund_desk", "init", None), "a compaction task needs an agent"),
    ],
)
def test_bad_task_arguments_are_named(args: tuple, said: str) -> None:
    with pytest.raises(BadTaskArguments) as caught:
        checked(*args)
    message = str(caught.value)
    assert said in message and "It takes (scenario, " in message and "baton resume NAME" in message


def test_a_task_with_bad_arguments_fails_with_that_message() -> None:
    from workers.tasks import step_task

    result = step_task.apply(args=["refund_desk", "bogus", "x"])
    assert result.failed() and isinstance(result.result, BadTaskArguments)
    assert "agent: Input should be 'init' or 'execute'" in str(result.result)


def test_status_and_spend_count_a_step_whose_event_a_crash_left_owed(tmp_path: Path) -> None:
    from workers.readmodel import read_agent
    from workers.spend import read_spend

    root = copy_example(tmp_path)
    _init_turn(root)
    with pytest.raises(Exception, match="after_append_response"):
        run_step(root, agents(root)["init"], fault=crash_once_per_step("after_append_response"))
    assert read_agent(root, "init").steps == 1
    assert read_spend(root).model_dump()["agents"]["init"]["steps"]["tokens"]["input"] > 0


def _messages(root: Path, role: str) -> list[str]:
    """The agent's log as the model reads it, times aside (modification times, durations, timestamps)."""
    return [_timeless(json.dumps(r.message)) for r in AgentDisk.load(root, role).records]


def _timeless(text: str) -> str:
    return re.sub(r'(mtime|duration_s|generated_at)[\\"]*: [^,}\n]*', r"\1", text)


def _undisturbed_iteration(folder: Path) -> tuple[Path, int, str]:
    from tests.agent_run import run_iteration

    plain = copy_example(folder)
    run_iteration(plain, agents(plain), 1)
    return plain, 0, ""


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Iteration 1 of the example with no crash: what every crashed run is compared with (made once per session
    and read only)."""
    return shared_run(tmp_path_factory, "undisturbed-iteration-1", _undisturbed_iteration).root


@pytest.mark.slow  # whole simulated iterations, crashed at every step
@pytest.mark.parametrize("point", ["before_archive:0", "after_tool:0"])
def test_a_tool_call_cut_short_by_a_crash_runs_again_on_what_it_first_saw(tmp_path: Path, point: str,
                                                                         undisturbed: Path) -> None:
    """Every step's first tool call crashes once after it changed files but before (or right after) its
    result was archived: the run says and writes exactly what an undisturbed run does (Write still says
    "created", Edit still finds its text, the evaluation counts its runs the same)."""
    from tests.agent_run import run_iteration

    plain, crashed = undisturbed, copy_example(tmp_path / "crashed")
    fault = crash_once_per_step(point)
    run_iteration(crashed, agents(crashed), 1, fault)
    assert len(fault.crashed) > 10
    for role in ("init", "execute"):
        assert _messages(crashed, role) == _messages(plain, role), role
    for folder in ("design", "tools", "handoffs", "execution_outputs"):
        for path in sorted((plain / folder).rglob("*")):
            twin = crashed / path.relative_to(plain)
            if path.is_file():
                assert _timeless(twin.read_text()) == _timeless(path.read_text()), path.relative_to(plain)
    assert not list(crashed.glob("state/*/journal/*"))  # every undo log was dropped


def test_what_the_estimator_learned_survives_a_crash_before_agent_json(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    _init_turn(root)
    with pytest.raises(Exception, match="after_append_response"):
        run_step(root, agents(root)["init"], fault=crash_once_per_step("after_append_response"))
    assert AgentDisk.load(root, "init").state.estimator_step == 0  # agent.json never heard of step 1
    disk = AgentDisk.claim(root, "init")  # what the next step does first
    assert disk.state.estimator_step == 1 and disk.state.estimator == disk.steps[-1].estimator
    assert disk.state.estimator["last_total"]  # it learned the first call's real total
    assert AgentDisk.load(root, "init").state.estimator == disk.state.estimator  # and it is saved

"""Every stop reason of the Messages API has its branch in the durable step (docs/agents.md, "The durable step").

A scripted model answers the step calls with chosen responses (then the simulated model
takes over); the same stops also come through the real SDK over an HTTP-level mock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import anthropic.types
import httpx2
import pytest

from agents.agent import Agent
from agents.anthropic_model import AnthropicModel
from agents.compaction_task import run_compaction
from agents.disk import AgentDisk, open_turn
from agents.events import ErrorEvent, OutputCutEvent, PromptTooLongEvent, StepEvent
from agents.models import ModelRequest, ModelResponse, StopReason
from agents.openings import init_opening
from agents.simulated import SimulatedModel
from agents.step import CUT_MARKER, MAX_RESUMES, NUDGE, run_step
from context.messages import TextBlock, ToolUseBlock, Usage
from tests.agent_run import Crash, agents, assert_log_consistent, copy_example, crash_once_per_step
from workers.readmodel import read_agent

KEY = "sk-ant-api03-" + "s" * 60
READ = ToolUseBlock(id="toolu_read_1", name="Read", input={"path": "brief.md"})
# What a cut reply's unfinished call may look like: its input stops where the output limit came.
CUT_WRITE = ToolUseBlock(id="toolu_write_1", name="Write", input={"path": "design/big.md", "content": "# Big\n"})
REFUSAL_DETAILS = {"type": "refusal", "category": "cyber", "explanation": "The request could enable malware."}


def reply(*blocks: Any, stop: str | None, **fields: Any) -> ModelResponse:
    content = [TextBlock(text=b) if isinstance(b, str) else b for b in blocks]
    return ModelResponse(content=content, stop_reason=stop, usage=Usage(input_tokens=5_000, output_tokens=100),
                         **fields)


class Scripted:
    """Answers step calls with the given replies in order, then plays the simulated model."""

    label = "scripted"

    def __init__(self, *replies: ModelResponse):
        self.replies, self.requests, self.sim = list(replies), [], SimulatedModel()

    def create(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if request.purpose == "step" and self.replies:
            return self.replies.pop(0)
        return self.sim.create(request)

    def step_requests(self) -> list[ModelRequest]:
        return [r for r in self.requests if r.purpose == "step"]


def opened(tmp_path: Path, model: Any, max_output_tokens: int | None = None) -> tuple[Path, Agent]:
    """Init of a fresh copy of the example, its turn opened, on ``model``."""
    root = copy_example(tmp_path)
    config = agents(root)["init"].config
    if max_output_tokens is not None:
        config = config.model_copy(update={"model": config.model.model_copy(
            update={"max_output_tokens": max_output_tokens})})
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    return root, Agent(config, model)


def kinds(root: Path) -> list[str]:
    return [r.kind for r in AgentDisk.load(root, "init").records]


def events(root: Path, kind: type) -> list[Any]:
    return [e for e in AgentDisk.load(root, "init").events if isinstance(e, kind)]


# -- one branch per stop reason -------------------------------------------------

CASES: dict[str, tuple[list[ModelResponse], str, list[str]]] = {
    # stop reason: (the step's replies, the step's status, the log records after it)
    "tool_use": ([reply("Reading the brief.", READ, stop="tool_use")], "continue", ["opening", "assistant", "results"]),
    "end_turn": ([reply("I think I am done.", stop="end_turn")], "continue", ["opening", "assistant", "note"]),
    "stop_sequence": ([reply("Done.", stop="stop_sequence")], "continue", ["opening", "assistant", "note"]),
    "pause_turn": ([reply("Let me think.", stop="pause_turn"), reply("Reading it.", READ, stop="tool_use")],
                   "continue", ["opening", "assistant", "results"]),
    "max_tokens": ([reply("Writing it.", CUT_WRITE, stop="max_tokens")] * 2, "continue",
                   ["opening", "assistant", "note"]),
    "refusal": ([reply(stop="refusal", stop_details=REFUSAL_DETAILS)], "failed", ["opening"]),
    "model_context_window_exceeded": ([reply("Writing", stop="model_context_window_exceeded")],
                                      "compaction_needed", ["opening"]),
}


def test_the_cases_cover_the_sdks_stop_reasons():
    assert set(CASES) == set(get_args(anthropic.types.StopReason)) == set(get_args(StopReason))


@pytest.mark.parametrize("stop", sorted(CASES))
def test_each_stop_reason_has_its_branch(tmp_path, stop):
    replies, status, records = CASES[stop]
    root, agent = opened(tmp_path, Scripted(*replies))
    out = run_step(root, agent)
    assert (out.status, out.stop_reason) == (status, replies[-1].stop_reason)  # a paused turn ends as resumed
    assert kinds(root) == records
    assert not (root / "design/big.md").exists()  # a cut call never runs
    assert_log_consistent(root, "init")


# -- max_tokens ----------------------------------------------------------------


def test_a_cut_tool_call_is_dropped_and_asked_for_once_more_with_twice_the_room(tmp_path):
    model = Scripted(reply("Writing the design.", CUT_WRITE, stop="max_tokens"),
                     reply("Reading first.", READ, stop="tool_use"))
    root, agent = opened(tmp_path, model)
    out = run_step(root, agent)
    assert out.status == "continue"
    first, retry = model.step_requests()
    assert (first.max_tokens, retry.max_tokens) == (2048, 4096) and first.messages == retry.messages
    disk = assert_log_consistent(root, "init")
    assert [r.kind for r in disk.records] == ["opening", "assistant", "results"]
    # Only the retried reply is in the log, with the fingerprint of the request that produced it.
    assert disk.steps[0].request == retry.fingerprint() != first.fingerprint()
    assert [u.name for u in disk.messages()[1].tool_uses] == ["Read"]
    assert CUT_WRITE.id not in (root / "state/init/log.jsonl").read_text()  # nothing of the cut reply on disk
    (cut,) = events(root, OutputCutEvent)
    assert (cut.step, cut.max_tokens, cut.retry_max_tokens, cut.tools) == (1, 2048, 4096, ["Write"])
    assert "# Big" not in (root / "state/init/events.jsonl").read_text()
    assert not (root / "design/big.md").exists()


def test_cut_twice_the_reply_is_kept_without_its_calls_and_the_agent_is_told(tmp_path):
    cut = reply("Writing the design.", READ, CUT_WRITE, stop="max_tokens")
    model = Scripted(cut, cut)
    root, agent = opened(tmp_path, model)
    assert run_step(root, agent).status == "continue"
    assert [r.max_tokens for r in model.step_requests()] == [2048, 4096]
    disk = assert_log_consistent(root, "init")
    assert [r.kind for r in disk.records] == ["opening", "assistant", "note"]
    kept, note = disk.messages()[1:]
    assert kept.tool_uses == [] and kept.text == f"Writing the design.\n{CUT_MARKER}"
    assert "4096 tokens" in note.text and "Read, Write" in note.text and "smaller tool calls" in note.text
    assert [(c.max_tokens, c.retry_max_tokens) for c in events(root, OutputCutEvent)] == [(2048, 4096), (4096, None)]
    (step,) = events(root, StepEvent)
    assert (step.stop_reason, step.tools) == ("max_tokens", [])
    assert not (root / "design/big.md").exists()
    # The agent goes on from the note (the simulated model takes over).
    assert run_step(root, agent).status == "continue"
    assert model.step_requests()[-1].messages[-1]["content"][-1]["text"] == note.text


def test_the_retry_stays_within_the_models_output_limit(tmp_path):
    model = Scripted(*[reply("Writing.", CUT_WRITE, stop="max_tokens")] * 2)
    root, agent = opened(tmp_path, model, max_output_tokens=3_000)
    run_step(root, agent)
    assert [r.max_tokens for r in model.step_requests()] == [2048, 3000]


def test_no_room_to_grow_means_no_retry(tmp_path):
    model = Scripted(reply("Writing.", CUT_WRITE, stop="max_tokens"))
    root, agent = opened(tmp_path, model, max_output_tokens=2048)
    assert run_step(root, agent).status == "continue"
    assert len(model.step_requests()) == 1
    assert kinds(root) == ["opening", "assistant", "note"]
    assert [c.retry_max_tokens for c in events(root, OutputCutEvent)] == [None]


def test_a_cut_text_reply_is_kept_and_continued_without_a_retry(tmp_path):
    model = Scripted(reply("The design has three parts. First, the refund wind", stop="max_tokens"))
    root, agent = opened(tmp_path, model)
    assert run_step(root, agent).status == "continue"
    assert len(model.step_requests()) == 1  # text runs nothing: keep it rather than pay for it twice
    disk = assert_log_consistent(root, "init")
    kept, note = disk.messages()[1:]
    assert kept.text == "The design has three parts. First, the refund wind"
    assert "cut off at the output limit (2048 tokens)" in note.text and "Continue from where it stopped" in note.text
    (cut,) = events(root, OutputCutEvent)
    assert (cut.tools, cut.retry_max_tokens) == ([], None)


@pytest.mark.parametrize("point", ["after_cut", "after_model_call"])
def test_a_crash_around_the_retry_never_asks_the_cut_request_again_nor_runs_the_cut_call(tmp_path, point):
    cut, done = reply("Writing.", CUT_WRITE, stop="max_tokens"), reply("Reading first.", READ, stop="tool_use")
    model = Scripted(*([cut, done] if point == "after_cut" else [cut, cut, done]))
    root, agent = opened(tmp_path, model)
    fault = crash_once_per_step(point)
    with pytest.raises(Crash):
        run_step(root, agent, fault=fault)
    assert run_step(root, agent, fault=fault).status == "continue"
    sizes = [r.max_tokens for r in model.step_requests()]
    # after_cut: the cut is on disk, the restart asks the larger request at once. after_model_call
    # (the cut reply arrived, nothing recorded): the cut request once more, as for any unrecorded answer.
    assert sizes == ([2048, 4096] if point == "after_cut" else [2048, 2048, 4096])
    disk = assert_log_consistent(root, "init")
    assert disk.steps[0].request == model.step_requests()[-1].fingerprint()
    assert not (root / "design/big.md").exists()


def test_a_note_a_crash_lost_is_written_before_the_next_call(tmp_path):
    model = Scripted(reply("I think I am done.", stop="end_turn"))
    root, agent = opened(tmp_path, model)
    with pytest.raises(Crash):
        run_step(root, agent, fault=crash_once_per_step("after_persist_response"))
    assert kinds(root) == ["opening", "assistant"]
    assert run_step(root, agent).status == "continue"
    assert kinds(root)[:3] == ["opening", "assistant", "note"]
    assert model.step_requests()[-1].messages[-1]["content"][-1]["text"] == NUDGE  # never ends with its own reply


# -- refusal, window exceeded, pause_turn, others ---------------------------------


def test_a_refusal_fails_the_step_says_why_and_keeps_nothing(tmp_path):
    model = Scripted(reply("I can't help with", stop="refusal", stop_details=REFUSAL_DETAILS))
    root, agent = opened(tmp_path, model)
    out = run_step(root, agent)
    assert (out.status, out.stop_reason) == ("failed", "refusal")
    assert "refused" in out.reason and "category cyber" in out.reason and "could enable malware" in out.reason
    (error,) = events(root, ErrorEvent)
    assert (error.stop_reason, error.stop_details) == ("refusal", REFUSAL_DETAILS)
    assert error.usage["output_tokens"] == 100  # what the reply that was not kept cost
    assert kinds(root) == ["opening"]  # no reply, no reminder
    assert AgentDisk.load(root, "init").state.nudges == 0
    assert any("refused" in line for line in read_agent(root, "init").errors)  # what `baton status` lists
    # A human resumes: the same request goes out again, nothing of the refused reply in it.
    assert run_step(root, agent).status == "continue"
    first, again = model.step_requests()
    assert first.fingerprint() == again.fingerprint()


def test_a_refusal_without_details_still_names_the_refusal(tmp_path):
    root, agent = opened(tmp_path, Scripted(reply(stop="refusal")))
    out = run_step(root, agent)
    assert out.status == "failed" and "stop_reason refusal" in out.reason
    assert "stop_details" not in json.loads((root / "state/init/events.jsonl").read_text().splitlines()[-1])


def test_the_window_running_out_compacts_and_retries_once(tmp_path):
    exceeded = reply("Writing", stop="model_context_window_exceeded")
    model = Scripted(exceeded)
    root, agent = opened(tmp_path, model)
    first = run_step(root, agent)
    assert first.status == "compaction_needed" and "model_context_window_exceeded" in first.reason
    assert [(e.step, e.usage["output_tokens"]) for e in events(root, PromptTooLongEvent)] == [(1, 100)]
    assert run_compaction(root, agent, force=True).status == "compacted"
    assert run_step(root, agent).status == "continue"
    assert [r.purpose for r in model.requests] == ["step", "summary", "step"]

    root, agent = opened(tmp_path / "twice", Scripted(exceeded, exceeded))
    run_step(root, agent)
    run_compaction(root, agent, force=True)
    second = run_step(root, agent)
    assert second.status == "failed" and "still too long" in second.reason
    assert AgentDisk.load(root, "init").steps == []


def test_a_paused_turn_is_sent_back_and_kept_as_one_reply(tmp_path):
    model = Scripted(reply("Let me look", stop="pause_turn"), reply(" at the brief.", READ, stop="tool_use"))
    root, agent = opened(tmp_path, model)
    out = run_step(root, agent)
    assert (out.status, out.stop_reason) == ("continue", "tool_use")
    first, resumed = model.step_requests()
    assert resumed.messages == [*first.messages, {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look"}]}]
    disk = assert_log_consistent(root, "init")
    (step,) = disk.steps
    assert step.request == first.fingerprint()
    assert [b["type"] for b in step.message["content"]] == ["text", "text", "tool_use"]
    assert events(root, StepEvent)[0].usage["output_tokens"] == 200  # both calls' output


def test_a_turn_paused_too_often_is_taken_as_it_stands(tmp_path):
    model = Scripted(*[reply(f"part {i}", stop="pause_turn") for i in range(MAX_RESUMES + 1)])
    root, agent = opened(tmp_path, model)
    assert run_step(root, agent).status == "continue"
    assert len(model.step_requests()) == MAX_RESUMES + 1
    assert kinds(root) == ["opening", "assistant", "note"]  # no tool call: reminded


@pytest.mark.parametrize("stop", ["end_turn", "some_future_reason", None])
def test_other_stops_are_taken_by_their_content(tmp_path, stop):
    root, agent = opened(tmp_path, Scripted(reply("Reading.", READ, stop=stop)))
    assert run_step(root, agent).status == "continue"
    assert kinds(root) == ["opening", "assistant", "results"]


# -- through the real SDK over HTTP ----------------------------------------------


class Api:
    """The Messages endpoint: each call takes the next body; token counts answer 5,000."""

    def __init__(self, *bodies: dict[str, Any]):
        self.bodies, self.requests = list(bodies), []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/v1/messages/count_tokens":
            return httpx2.Response(200, json={"input_tokens": 5_000})
        self.requests.append(json.loads(request.content))
        return httpx2.Response(200, json=self.bodies.pop(0), headers={"request-id": "req_1"})


def message(content: list[dict[str, Any]], stop: str, **fields: Any) -> dict[str, Any]:
    return {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-opus-4-5-20251101",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 5_000, "output_tokens": 2048}, **fields}


def through_http(tmp_path: Path, api: Api) -> tuple[Path, Agent]:
    http = httpx2.Client(transport=httpx2.MockTransport(api))
    return opened(tmp_path, AnthropicModel(api_key=KEY, http_client=http, sleep=lambda s: None))


def test_a_cut_tool_call_through_the_sdk(tmp_path):
    # The API's cut tool_use carries the part of its input that was written (here none of "content").
    cut = message([{"type": "text", "text": "Writing."},
                   {"type": "tool_use", "id": "toolu_01", "name": "Write", "input": {"path": "design/big.md"}}],
                  "max_tokens")
    done = message([{"type": "tool_use", "id": "toolu_02", "name": "Read", "input": {"path": "brief.md"}}], "tool_use")
    api = Api(cut, done)
    root, agent = through_http(tmp_path, api)
    assert run_step(root, agent).status == "continue"
    assert [body["max_tokens"] for body in api.requests] == [2048, 4096]
    assert not (root / "design/big.md").exists()
    assert "toolu_01" not in (root / "state/init/log.jsonl").read_text()


def test_a_refusal_through_the_sdk_keeps_its_stop_details(tmp_path):
    api = Api(message([], "refusal", stop_details=REFUSAL_DETAILS))
    root, agent = through_http(tmp_path, api)
    out = run_step(root, agent)
    assert out.status == "failed" and "category cyber" in out.reason
    assert events(root, ErrorEvent)[0].stop_details == REFUSAL_DETAILS


def test_a_paused_turn_through_the_sdk_is_sent_back_as_it_came(tmp_path):
    paused = message([{"type": "text", "text": "Searching."}], "pause_turn")
    done = message([{"type": "tool_use", "id": "toolu_02", "name": "Read", "input": {"path": "brief.md"}}], "tool_use")
    api = Api(paused, done)
    root, agent = through_http(tmp_path, api)
    assert run_step(root, agent).status == "continue"
    assert api.requests[1]["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "Searching."}]}


def test_the_window_running_out_through_the_sdk_asks_for_a_compaction(tmp_path):
    api = Api(message([{"type": "text", "text": "Writ"}], "model_context_window_exceeded"))
    root, agent = through_http(tmp_path, api)
    assert run_step(root, agent).status == "compaction_needed"
    assert AgentDisk.load(root, "init").state.force_compaction

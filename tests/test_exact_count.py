"""Exact token counts near the compaction threshold (and for an agent's first call).

``AnthropicModel.count_tokens`` asks the free count endpoint; the step asks it when the
estimate is within ``EXACT_COUNT_MARGIN`` of the threshold, decides on the count, and
teaches the estimator with it. The simulated model has no such method: offline nothing
changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from agents.agent import Agent
from agents.anthropic_model import AnthropicModel
from agents.disk import AgentDisk, open_turn
from agents.events import StepEvent
from agents.models import BadResponse, ModelError, ModelRequest, ModelResponse, ModelUnavailable
from agents.openings import init_opening
from agents.simulated import SimulatedModel
from agents.step import EXACT_COUNT_MARGIN, run_step
from context.estimator import TokenEstimator
from tests.agent_run import agents, copy_example

KEY = "sk-ant-api03-" + "c" * 60
COUNT_PATH = "/v1/messages/count_tokens"
READ_BODY = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-opus-4-5",
             "content": [{"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"path": "brief.md"}}],
             "stop_reason": "tool_use", "usage": {"input_tokens": 5_000, "output_tokens": 40}}


class Api:
    """Messages calls answer READ_BODY; count calls answer ``counts`` in turn (an int, or a Response)."""

    def __init__(self, *counts: int | httpx2.Response):
        self.counts, self.count_bodies, self.message_bodies = list(counts), [], []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path == COUNT_PATH:
            self.count_bodies.append(json.loads(request.content))
            count = self.counts.pop(0)
            if isinstance(count, httpx2.Response):
                return count
            return httpx2.Response(200, json={"input_tokens": count}, headers={"request-id": "req_c"})
        self.message_bodies.append(json.loads(request.content))
        return httpx2.Response(200, json=READ_BODY, headers={"request-id": "req_m"})


def model_on(api: Api) -> AnthropicModel:
    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"a count is never retried (slept {seconds})")

    return AnthropicModel(api_key=KEY, http_client=httpx2.Client(transport=httpx2.MockTransport(api)), sleep=no_sleep)


def request(**fields: Any) -> ModelRequest:
    return ModelRequest(**{"model": "claude-opus-4-5", "max_tokens": 8000, "messages": [
        {"role": "user", "content": "Design a refund scenario."}], "system": "Be brief.",
        "tools": [{"name": "LS", "description": "List.", "input_schema": {"type": "object"}}], **fields})


# -- AnthropicModel.count_tokens ----------------------------------------------------


def test_count_tokens_sends_the_request_without_max_tokens():
    api = Api(4_321)
    assert model_on(api).count_tokens(request()) == 4_321
    (body,) = api.count_bodies
    assert body["model"] == "claude-opus-4-5" and body["system"] == "Be brief." and body["tools"][0]["name"] == "LS"
    assert body["messages"] == request().messages and "max_tokens" not in body


def test_count_tokens_with_betas_uses_the_beta_endpoint():
    api = Api(10)
    client = model_on(api)
    seen: list[httpx2.Request] = []
    client._client._client.event_hooks["request"].append(seen.append)  # the SDK's httpx2 client
    client.count_tokens(request(betas=["context-1m-2025-08-07"]))
    assert "context-1m-2025-08-07" in seen[0].headers["anthropic-beta"].split(",")


@pytest.mark.parametrize("reply, error", [
    (httpx2.Response(529, json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
     ModelUnavailable),
    (httpx2.Response(400, json={"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}),
     ModelError),
    (httpx2.Response(200, json={"tokens": 3}), BadResponse),
])
def test_a_failed_count_raises_at_once(reply, error):
    with pytest.raises(error) as err:
        model_on(Api(reply)).count_tokens(request())
    assert KEY not in str(err.value) and err.value.__context__ is None


# -- the step ------------------------------------------------------------------------


class Counting:
    """The simulated model, plus an exact count: ``answer(estimate)`` gives the count for a request."""

    label = "counting"

    def __init__(self) -> None:
        self.sim, self.counted, self.answer = SimulatedModel(), [], 4_000

    def create(self, request: ModelRequest) -> ModelResponse:
        return self.sim.create(request)

    def count_tokens(self, request: ModelRequest) -> int:
        self.counted.append(request.fingerprint())
        return self.answer


def with_threshold(agent: Agent, threshold: int) -> Agent:
    config = agent.config
    context = config.context.model_copy(update={"threshold": threshold, "window": 200_000})
    return Agent(config.model_copy(update={"context": context}), agent.model)


def estimate(root: Path, agent: Agent) -> int:
    """What the step will estimate for its next request."""
    disk = AgentDisk.load(root, "init")
    return agent.assembler(disk, disk.history()).assemble(disk.compaction()).estimated_input


@pytest.fixture
def worked(tmp_path) -> tuple[Path, Agent, Counting]:
    """Init after six steps (more than it keeps verbatim, so a compaction could cover something)."""
    root = copy_example(tmp_path)
    model = Counting()
    agent = with_threshold(Agent(agents(root)["init"].config, model), 150_000)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    for _ in range(6):
        assert run_step(root, agent).status == "continue"
    assert len(model.counted) == 1  # the first call only: far from the threshold after that
    return root, agent, model


def test_the_first_call_is_counted_and_teaches_the_estimator(worked):
    root, _, _ = worked
    first = [e for e in AgentDisk.load(root, "init").events if isinstance(e, StepEvent)][0]
    assert first.counted_input == 4_000
    lines = [json.loads(line) for line in (root / "state/init/events.jsonl").read_text().splitlines()]
    steps = [line for line in lines if line["kind"] == "step"]
    assert steps[0]["counted_input"] == 4_000 and all("counted_input" not in line for line in steps[1:])


def test_an_estimate_just_under_the_threshold_is_checked_and_the_count_decides(worked):
    root, agent, model = worked
    est = estimate(root, agent)
    near = with_threshold(agent, est + 1)  # the estimate says: not yet
    model.answer = est + 500  # the API says: over
    out = run_step(root, near)
    assert out.status == "compaction_needed" and out.tokens_in_context == est + 500
    assert str(est + 500) in out.reason and len(model.counted) == 2
    learned = TokenEstimator.from_dict(AgentDisk.load(root, "init").state.estimator)
    assert learned.last_total == est + 500  # the count went to the estimator like a usage does


def test_an_estimate_just_over_the_threshold_is_checked_too(worked):
    root, agent, model = worked
    est = estimate(root, agent)
    near = with_threshold(agent, est - 1)  # the estimate says: compact
    model.answer = est - 400  # the API says: it fits
    out = run_step(root, near)
    assert out.status == "continue" and out.tokens_in_context == est - 400
    step = [e for e in AgentDisk.load(root, "init").events if isinstance(e, StepEvent)][-1]
    assert (step.estimated_input, step.counted_input) == (est, est - 400)


def test_far_from_the_threshold_nothing_is_counted(worked):
    root, agent, model = worked
    est = estimate(root, agent)
    far = with_threshold(agent, int(est / (1 - EXACT_COUNT_MARGIN)) + 50)
    assert run_step(root, far).status == "continue"
    sent = [e for e in AgentDisk.load(root, "init").events if isinstance(e, StepEvent)][-1]
    # Its own request was not counted (the next step's, nearer the threshold, may be: the step decides for it).
    assert sent.counted_input is None and sent.request not in model.counted


def test_a_request_counted_by_the_step_before_is_not_counted_again(worked):
    root, agent, model = worked
    est = estimate(root, agent)
    near = with_threshold(agent, int(est / (1 - EXACT_COUNT_MARGIN)) + 50)  # this step far, the next one near
    model.answer = est + 200  # under the threshold: the next step runs
    assert run_step(root, near).status == "continue"
    assert len(model.counted) == 2  # the first call, and the next step's request while this step decided for it
    assert run_step(root, near).status == "continue"
    sent = [e for e in AgentDisk.load(root, "init").events if isinstance(e, StepEvent)][-1]
    assert model.counted[1] == sent.request and model.counted.count(sent.request) == 1  # counted once, and used
    assert sent.counted_input == est + 200


def test_the_simulated_model_is_never_asked_and_its_events_are_unchanged(tmp_path):
    root = copy_example(tmp_path)
    agent = agents(root)["init"]
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    run_step(root, agent)
    line = json.loads((root / "state/init/events.jsonl").read_text().splitlines()[0])
    assert line["kind"] == "step" and "counted_input" not in line


def test_through_the_sdk_the_count_decides_and_a_failed_count_leaves_the_estimate(tmp_path):
    root = copy_example(tmp_path)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    overloaded = httpx2.Response(529, json={"type": "error", "error": {"type": "overloaded_error",
                                                                       "message": "Overloaded"}})
    api = Api(overloaded, 7_777)
    agent = Agent(agents(root)["init"].config, model_on(api))
    assert run_step(root, agent).status == "continue"  # the count failed: the estimate decided
    assert len(api.count_bodies) == 1 and len(api.message_bodies) == 1
    steps = [e for e in AgentDisk.load(root, "init").events if isinstance(e, StepEvent)]
    assert steps[0].counted_input is None

    root2 = copy_example(tmp_path / "second")
    open_turn(root2, "init", 1, init_opening(root2.name, 1), key="iteration-1")
    api2 = Api(7_777)
    agent2 = Agent(agents(root2)["init"].config, model_on(api2))
    assert run_step(root2, agent2).status == "continue"
    (body,) = api2.count_bodies
    assert body["messages"] == api2.message_bodies[0]["messages"] and "max_tokens" not in body
    steps = [e for e in AgentDisk.load(root2, "init").events if isinstance(e, StepEvent)]
    assert steps[0].counted_input == 7_777

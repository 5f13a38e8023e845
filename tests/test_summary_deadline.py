"""A summary has 120 s in all (``summary_timeout_s``), retries included, then the fallback summary.

AnthropicModel stops retrying when another attempt could not finish before the request's
``deadline_s`` (each attempt's HTTP timeout is the time left); ``_summary_call`` spreads
the one budget over the compactor's calls. Tested on an injected clock, and over HTTP
against a local server that never answers in time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import pytest

from agents.agent import Agent
from agents.anthropic_model import MIN_ATTEMPT_S, AnthropicModel
from agents.compaction_task import _summary_call, run_compaction
from agents.disk import AgentDisk, open_turn
from agents.models import ModelRequest, ModelResponse, ModelUnavailable
from agents.openings import init_opening
from agents.simulated import SimulatedModel
from agents.step import run_step
from context.compaction import SummaryRequest
from context.messages import Message, TextBlock
from tests.agent_run import agents, copy_example

KEY = "sk-ant-api03-" + "d" * 60
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
SUMMARY = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-opus-4-5",
           "stop_reason": "end_turn", "content": [{"type": "text", "text": "<compact_summary>{}</compact_summary>"}],
           "usage": {"input_tokens": 10, "output_tokens": 10}}


class Clock:
    """Fake monotonic time: sleeping and slow HTTP attempts move it on."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class SlowApi:
    """Each attempt takes ``takes`` seconds of the fake clock, or times out at the attempt's read timeout."""

    def __init__(self, clock: Clock, takes: float, reply: dict[str, Any] = OVERLOADED, status: int = 529):
        self.clock, self.takes, self.reply, self.status = clock, takes, reply, status
        self.timeouts: list[float] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        timeout = request.extensions["timeout"]["read"]
        self.timeouts.append(timeout)
        if self.takes >= timeout:
            self.clock.now += timeout
            raise httpx2.ReadTimeout("timed out", request=request)
        self.clock.now += self.takes
        return httpx2.Response(self.status, json=self.reply, headers={"request-id": "req_1"})


class Fixed:
    """Jitter draws at 0.75, so delays are exact."""

    def uniform(self, a: float, b: float) -> float:
        return 0.75


def summary_request(deadline_s: float | None) -> ModelRequest:
    return ModelRequest(model="claude-opus-4-5", max_tokens=4000, purpose="summary", deadline_s=deadline_s,
                        messages=[{"role": "user", "content": "Summarise."}])


def model_on(api: Any, clock: Clock, **kwargs: Any) -> AnthropicModel:
    http = httpx2.Client(transport=httpx2.MockTransport(api))
    return AnthropicModel(api_key=KEY, http_client=http, sleep=clock.sleep, clock=clock, rng=Fixed(), **kwargs)


# -- AnthropicModel under a deadline (fake clock) ----------------------------------


def test_retries_stop_at_the_deadline_and_each_attempt_gets_the_time_left():
    clock = Clock()
    api = SlowApi(clock, takes=30.0)
    with pytest.raises(ModelUnavailable, match="120s deadline of this summary call") as err:
        model_on(api, clock).create(summary_request(120.0))
    # 30 s each plus backoff 0.75, 1.5, 3: the fourth attempt gets what is left and times out at the deadline.
    assert api.timeouts == pytest.approx([120.0, 89.25, 57.75, 24.75])
    assert clock.now == pytest.approx(120.0) and err.value.attempts == 4
    assert KEY not in str(err.value)


def test_no_attempt_starts_that_could_not_finish_in_time():
    clock = Clock()
    api = SlowApi(clock, takes=0.5)  # fast failures: the backoff is what runs into the deadline
    with pytest.raises(ModelUnavailable, match="leaves no time for another attempt"):
        model_on(api, clock, base_delay_s=4.0).create(summary_request(10.0))
    # 0.5 + 3 (backoff) + 0.5 = 4; the next backoff (6) + MIN_ATTEMPT_S would end past 10.
    assert len(api.timeouts) == 2 and clock.now == pytest.approx(4.0)


def test_a_deadline_too_short_for_any_attempt_sends_nothing():
    clock = Clock()
    api = SlowApi(clock, takes=0.1)
    with pytest.raises(ModelUnavailable, match="after 0 attempt.*not called") as err:
        model_on(api, clock).create(summary_request(MIN_ATTEMPT_S / 2))
    assert api.timeouts == [] and err.value.attempts == 0


def test_within_the_deadline_an_answer_is_an_answer():
    clock = Clock()
    api = SlowApi(clock, takes=5.0, reply=SUMMARY, status=200)
    response = model_on(api, clock).create(summary_request(120.0))
    assert response.stop_reason == "end_turn" and api.timeouts == [120.0]


def test_the_step_keeps_its_own_retry_policy():
    clock = Clock()
    api = SlowApi(clock, takes=30.0)
    step = summary_request(None).model_copy(update={"purpose": "step"})
    with pytest.raises(ModelUnavailable, match="after 6 attempt"):
        model_on(api, clock).create(step)
    assert len(api.timeouts) == 6 and set(api.timeouts) == {600.0}  # no deadline: every attempt in full


def test_the_deadline_is_not_part_of_the_fingerprint():
    assert summary_request(120.0).fingerprint() == summary_request(3.0).fingerprint()


# -- one budget for the whole compaction (_summary_call) ---------------------------


class Slow:
    """A model whose every answer takes ``takes`` seconds of the fake clock."""

    label = "slow"

    def __init__(self, clock: Clock, takes: float):
        self.clock, self.takes, self.requests = clock, takes, []

    def create(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        self.clock.now += self.takes
        return ModelResponse(content=[TextBlock(text="not a summary")], stop_reason="end_turn")


def test_the_compactors_calls_share_one_budget(tmp_path):
    clock = Clock()
    model = Slow(clock, takes=100.0)
    config = agents(copy_example(tmp_path))["init"].config
    agent = Agent(config, model)
    call = _summary_call(agent, agent.static(), clock=clock)
    ask = SummaryRequest((Message(role="user", content=[TextBlock(text="The brief.")]),), "Summarise.", ())
    call(ask, 120.0)  # the compactor's first try: 100 s spent
    call(ask, 120.0)  # its retry with the parse error gets what is left
    assert [r.deadline_s for r in model.requests] == pytest.approx([120.0, 20.0])
    with pytest.raises(ModelUnavailable, match="deadline has passed"):
        call(ask, 120.0)
    assert len(model.requests) == 2


# -- over HTTP: a server that hangs ------------------------------------------------


@pytest.fixture
def hanging_server() -> Iterator[str]:
    """A Messages endpoint that holds every request (until the test ends)."""
    release = threading.Event()

    class Hang(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the http.server name)
            release.wait(10)
            self.send_response(529)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hang)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    release.set()
    server.shutdown()
    server.server_close()


@pytest.mark.slow  # waits for a real deadline
def test_a_hanging_server_gets_no_more_than_the_deadline(hanging_server):
    model = AnthropicModel(api_key=KEY, base_url=hanging_server, base_delay_s=0.01)
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="timeout.*deadline") as err:
        model.create(summary_request(1.5))
    assert 1.4 <= time.monotonic() - started < 2.5
    assert err.value.attempts == 1  # what was left after it could not hold another attempt


@pytest.mark.slow  # waits for a real deadline
def test_a_compaction_against_a_hanging_server_falls_back_in_time(tmp_path, hanging_server):
    root = copy_example(tmp_path)
    base = agents(root)["init"].config
    config = base.model_copy(update={"model": base.model.model_copy(update={"summary_timeout_s": 1.5})})
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    sim = Agent(config, SimulatedModel())
    for _ in range(2):
        assert run_step(root, sim).status == "continue"
    hanging = Agent(config, AnthropicModel(api_key=KEY, base_url=hanging_server, base_delay_s=0.01))
    started = time.monotonic()
    outcome = run_compaction(root, hanging, force=True)
    assert time.monotonic() - started < 3.0
    assert outcome.status == "compacted" and outcome.fallback
    event = AgentDisk.load(root, "init").compaction()
    assert "ModelUnavailable" in event.error and "deadline" in event.error

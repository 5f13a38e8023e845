"""The server's retry headers, through the real SDK over HTTP to ``baton fake-api`` (its ``api_error`` fault).

``x-should-retry`` wins over the status either way, as in the SDK; a ``retry-after`` over the 60 s backoff cap is
waited in full when the call has room for it (its deadline, else 15 minutes), and given up at once otherwise.
The waits go to an injected sleep that moves an injected clock: nothing here really waits.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from agents.anthropic_model import MAX_RETRY_AFTER_S, AnthropicModel
from agents.models import ModelRequest, ModelUnavailable
from tests.fake_api_support import KEY, http, init_request, queue_fault, serving, stats
from workers.fake_api.server import FakeApi, Running


class Clock:
    """A monotonic clock that only the injected sleep moves."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def double() -> Iterator[Running]:
    with serving(FakeApi()) as running:
        yield running


def _model(double: Running, clock: Clock) -> AnthropicModel:
    return AnthropicModel(api_key=KEY, base_url=double.url, sleep=clock.sleep, clock=clock, rng=random.Random(7))


def _messages(double: Running) -> int:
    return stats(double.url)["requests"].get("POST /v1/messages", 0)


def _summary(deadline_s: float) -> ModelRequest:
    return init_request().model_copy(update={"deadline_s": deadline_s, "purpose": "summary"})


def test_x_should_retry_true_retries_an_error_that_is_otherwise_final(double):
    queue_fault(double.url, fault="api_error", status=400, should_retry=True)
    clock = Clock()
    response = _model(double, clock).create(init_request())
    assert response.content and _messages(double) == 2 and len(clock.sleeps) == 1
    assert stats(double.url)["errors"] == {"400 invalid_request_error": 1}


def test_x_should_retry_false_makes_an_overload_final_at_once(double):
    queue_fault(double.url, fault="api_error", status=529, should_retry=False, count=3)
    clock = Clock()
    with pytest.raises(ModelUnavailable, match=r"HTTP 529 overloaded_error.*said not to retry \(x-should-retry: "
                                               r"false\)") as final:
        _model(double, clock).create(init_request())
    assert _messages(double) == 1 and clock.sleeps == [] and final.value.attempts == 1


def test_without_the_header_an_overload_is_still_retried(double):
    queue_fault(double.url, fault="api_error", status=529)
    clock = Clock()
    assert _model(double, clock).create(init_request()).content
    assert _messages(double) == 2 and len(clock.sleeps) == 1 and clock.sleeps[0] <= 1.0  # the first backoff


def test_a_retry_after_over_the_backoff_cap_is_waited_in_full(double):
    queue_fault(double.url, fault="api_error", status=429, retry_after_s=600)
    clock = Clock()
    assert _model(double, clock).create(init_request()).content
    assert clock.sleeps == [600.0] and _messages(double) == 2


def test_a_retry_after_beyond_the_longest_wait_gives_up_at_once_saying_how_long(double):
    queue_fault(double.url, fault="api_error", status=429, retry_after_s=1200)
    clock = Clock()
    with pytest.raises(ModelUnavailable, match=r"asked to wait 1200s before retrying \(retry-after\), and a call "
                                               r"without a deadline waits at most 900s"):
        _model(double, clock).create(init_request())
    assert clock.sleeps == [] and _messages(double) == 1
    assert MAX_RETRY_AFTER_S == 900


def test_a_deadline_that_leaves_room_waits_the_whole_retry_after(double):
    queue_fault(double.url, fault="api_error", status=529, retry_after_s=120)
    clock = Clock()
    assert _model(double, clock).create(_summary(300)).content
    assert clock.sleeps == [120.0]


def test_a_deadline_too_short_for_the_retry_after_gives_up_at_once(double):
    queue_fault(double.url, fault="api_error", status=529, retry_after_s=400)
    clock = Clock()
    with pytest.raises(ModelUnavailable, match=r"asked to wait 400s before retrying \(retry-after\), and the 300s "
                                               r"deadline of this summary call leaves 299s"):
        _model(double, clock).create(_summary(300))
    assert clock.sleeps == [] and _messages(double) == 1


def test_error_headers_belong_to_the_api_error_fault_only(double):
    status, body = http(f"{double.url}/faults", "POST", {"fault": "refusal", "retry_after_s": 5})
    assert status == 400 and "retry_after_s: only for the api_error fault" in body["error"]["message"]

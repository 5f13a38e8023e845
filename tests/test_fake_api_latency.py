"""``baton fake-api`` latency (docs/fake-api.md, "Latency"): the option parsing, the delay a message reply
waits (base ± jitter + output_tokens / speed), that waiting holds up no other request, that count_tokens
and the models endpoints do not wait, and that /stats reports the delay.

No test asserts an upper bound on one request's time (a shared machine is noisy): a real wait is checked
with a lower bound only, the delay's size through a recorded ``sleep`` and the double's own stats, and
concurrency with a generous bound (two 1 s waits in well under 2 s)."""

from __future__ import annotations

import threading
import time
from typing import Any

import anthropic
import pytest

from tests.fake_api_support import API_HEADERS, http, init_body, sdk_client, serving, stats
from workers.errors import CliError
from workers.fake_api.catalogue import Catalogue
from workers.fake_api.command import latency_settings
from workers.fake_api.latency import Latency, LatencyError, parse_latency, parse_output_speed
from workers.fake_api.server import FakeApi

MODELS = Catalogue().by_id


def client(url: str) -> anthropic.Anthropic:
    return sdk_client(url, timeout=30)


def ask(url: str, model: str = "claude-opus-5-5") -> Any:
    return client(url).messages.create(**init_body(model))


# ---- parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("2s", (2.0, 0.0)),
    ("1.5s,0.5s", (1.5, 0.5)),
    ("1500ms", (1.5, 0.0)),
    ("2s,250ms", (2.0, 0.25)),
    (" 0.3s , .1s ", (0.3, 0.1)),
    ("0s", (0.0, 0.0)),
])
def test_latency_parses_a_base_and_a_jitter(text, expected):
    assert parse_latency(text) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "says"), [
    ("2x", "--latency: '2x' is not a duration; use e.g. 2s, 1500ms or 2s,0.5s"),
    ("2", "'2' is not a duration"),  # no unit: seconds or milliseconds would be a guess
    ("-1s", "'-1s' is not a duration"),
    ("2s,fast", "'2s,fast' is not a duration"),
    ("1s,1s,1s", "has 3 parts"),
    ("", "'' is not a duration"),
])
def test_a_bad_latency_says_what_to_write(text, says):
    with pytest.raises(LatencyError, match="use e.g. 2s, 1500ms or 2s,0.5s") as caught:
        parse_latency(text)
    assert says in str(caught.value)


def test_a_jitter_larger_than_the_base_is_refused_rather_than_clamped():
    with pytest.raises(CliError, match="jitter 2s is larger than the base 1s") as caught:
        latency_settings("1s,2s", None, 0, Catalogue())
    assert "docs/fake-api.md" in caught.value.hint


@pytest.mark.parametrize(("text", "default", "speeds"), [
    ("80", 80.0, {}),
    ("claude-sonnet-5-5=80,claude-opus-5-5=40", None, {"claude-sonnet-5-5": 80.0, "claude-opus-5-5": 40.0}),
    ("60, claude-opus-5-5=40", 60.0, {"claude-opus-5-5": 40.0}),  # a default and an exception
    ("12.5", 12.5, {}),
])
def test_output_speed_parses_a_default_and_per_model_speeds(text, default, speeds):
    assert parse_output_speed(text, MODELS) == (default, speeds)


@pytest.mark.parametrize(("text", "says"), [
    ("fast", "'fast' is not a number"),
    ("0", "'0' must be a finite speed above 0"),
    ("-5", "'-5' must be a finite speed above 0"),
    ("inf", "'inf' must be a finite speed above 0"),
    ("nan", "'nan' must be a finite speed above 0"),
    ("80,90", "two speeds for all models"),
    ("claude-opus-5-5=x", "'x' in 'claude-opus-5-5=x' is not a number"),
    ("claude-opus-9=40", "'claude-opus-9' is not a model of the catalogue; use one of: claude-haiku-5-5"),
])
def test_a_bad_output_speed_says_what_was_wrong(text, says):
    with pytest.raises(CliError) as caught:
        latency_settings(None, text, 0, Catalogue())
    assert says in str(caught.value) and str(caught.value).startswith("--output-speed:")


def test_the_jitter_stays_within_its_bounds_and_one_seed_draws_one_sequence():
    def draws(seed: int) -> list[float]:
        latency = Latency(base_s=1.0, jitter_s=0.5, seed=seed)
        return [latency.delay("claude-opus-5-5", 0).first_token_s for _ in range(200)]

    first = draws(7)
    assert all(0.5 <= d <= 1.5 for d in first)
    assert min(first) < 0.75 and max(first) > 1.25  # it does vary, over the whole ± range
    assert draws(7) == first and draws(8) != first


# ---- the wait --------------------------------------------------------------------------------------


def test_a_message_reply_waits_at_least_the_latency():
    with serving(FakeApi(latency=Latency(base_s=0.3))) as running:
        started = time.monotonic()
        reply = ask(running.url)
        waited = time.monotonic() - started
        ask(running.url)  # after the first: never two held back at once
        delay = stats(running.url)["delay"]
    assert reply.stop_reason == "tool_use"
    assert waited >= 0.3  # a lower bound only: how much longer depends on the machine
    assert delay["requests"] == 2 and delay["first_token_s"] == pytest.approx(0.6) and delay["output_s"] == 0
    assert delay["most_at_once"] == 1


def test_output_speed_adds_output_tokens_over_the_models_speed():
    sleeps: list[float] = []
    latency = Latency(base_s=0.1, default_speed=200.0, speeds={"claude-opus-5-5": 50.0})
    with serving(FakeApi(latency=latency, sleep=sleeps.append)) as running:
        opus = ask(running.url, "claude-opus-5-5")
        sonnet = ask(running.url, "claude-sonnet-5-5")  # no speed of its own: the default one
    assert opus.usage.output_tokens > 0
    assert sleeps == pytest.approx([0.1 + opus.usage.output_tokens / 50, 0.1 + sonnet.usage.output_tokens / 200])


def test_without_a_speed_the_output_adds_nothing():
    sleeps: list[float] = []
    with serving(FakeApi(latency=Latency(base_s=0.25), sleep=sleeps.append)) as running:
        ask(running.url)
    assert sleeps == [0.25]


def test_count_tokens_models_and_errors_are_not_delayed():
    sleeps: list[float] = []
    with serving(FakeApi(latency=Latency(base_s=5.0, default_speed=1.0), sleep=sleeps.append)) as running:
        body = init_body()
        counted = client(running.url).messages.count_tokens(model=body["model"], system=body["system"],
                                                            tools=body["tools"], messages=body["messages"])
        listed = list(client(running.url).models.list())
        client(running.url).models.retrieve("claude-opus-5-5")
        status, _ = http(f"{running.url}/v1/messages", "POST", {**init_body(), "temperature": 0.5}, API_HEADERS)
        delay = stats(running.url)["delay"]
    assert counted.input_tokens > 0 and listed and status == 400
    assert sleeps == [] and delay["requests"] == 0 and delay["total_s"] == 0


def test_no_latency_means_no_wait_at_all():
    sleeps: list[float] = []
    with serving(FakeApi(sleep=sleeps.append)) as running:
        ask(running.url)
        delay = stats(running.url)["delay"]
    assert sleeps == [] and delay["requests"] == 0


# ---- stats -----------------------------------------------------------------------------------------


def test_stats_report_the_delay_in_all_per_request_and_per_model():
    sleeps: list[float] = []
    latency = Latency(base_s=1.0, jitter_s=0.5, speeds={"claude-opus-5-5": 40.0}, seed=3)
    with serving(FakeApi(latency=latency, sleep=sleeps.append)) as running:
        opus = ask(running.url, "claude-opus-5-5")
        ask(running.url, "claude-sonnet-5-5")
        delay = stats(running.url)["delay"]
    assert delay["requests"] == 2
    assert delay["recent_s"] == pytest.approx(sleeps)  # per request, in the order served
    assert delay["total_s"] == pytest.approx(sum(sleeps)) and delay["max_s"] == pytest.approx(max(sleeps))
    assert delay["mean_s"] == pytest.approx(sum(sleeps) / 2)
    assert delay["output_s"] == pytest.approx(opus.usage.output_tokens / 40)
    assert delay["first_token_s"] + delay["output_s"] == pytest.approx(delay["total_s"])
    assert 1.0 <= delay["first_token_s"] <= 3.0  # two draws of 1 s ± 0.5 s
    assert delay["by_model"] == pytest.approx({"claude-opus-5-5": sleeps[0], "claude-sonnet-5-5": sleeps[1]})


# ---- concurrency -----------------------------------------------------------------------------------


def _concurrently(url: str, n: int) -> list[float]:
    """Each request's seconds, for ``n`` message requests sent at once from ``n`` threads."""
    each: list[float] = []
    errors: list[BaseException] = []
    go = threading.Barrier(n)

    def one() -> None:
        go.wait()
        started = time.monotonic()
        try:
            ask(url)
        except BaseException as err:  # reported by the test below, not lost in the thread
            errors.append(err)
        each.append(time.monotonic() - started)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return each


@pytest.mark.slow
def test_a_waiting_request_does_not_hold_up_another():
    with serving(FakeApi(latency=Latency(base_s=1.0))) as running:
        each = _concurrently(running.url, 2)
        delay = stats(running.url)["delay"]
    assert len(each) == 2 and all(t >= 1.0 for t in each)  # both waited their full second...
    # ... at the same time, by the double's own count (a wall-clock bound failed on a loaded machine):
    # a server that answered one after the other would never hold two replies back at once.
    assert delay["most_at_once"] == 2, delay
    assert delay["requests"] == 2 and delay["total_s"] == pytest.approx(2.0)  # waiting summed, not wall time


def test_the_command_line_takes_the_latency_flags_and_refuses_bad_ones():
    from typer.testing import CliRunner

    from workers.cli import cli

    result = CliRunner().invoke(cli, ["fake-api", "--port", "18766", "--latency", "2x"])
    assert result.exit_code == 2 and "'2x' is not a duration" in result.output
    result = CliRunner().invoke(cli, ["fake-api", "--port", "18766", "--output-speed", "nope=80"])
    assert result.exit_code == 2 and "--output-speed" in result.output

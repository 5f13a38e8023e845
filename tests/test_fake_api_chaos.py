"""Transport faults from AgentBreak, a chaos proxy, between baton's ``AnthropicModel`` and ``baton fake-api``.

Both run as real processes on 127.0.0.1: the double started by its command with a catalogue
file, AgentBreak in proxy mode with the double as its upstream. AgentBreak picks a fault
by the request's model, so the catalogue lists one model per fault (``chaos-429``, ...),
and its periodic schedule (every 2nd request, the first included) fails each first attempt.
What AgentBreak cannot do is pinned down at the end (docs/fake-api.md).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.anthropic_model import AnthropicModel
from agents.models import BadResponse
from tests.fake_api_support import KEY, free_port, http, init_request, stats
from workers.fake_api.catalogue import DEFAULT_MODELS

pytest.importorskip("agentbreak")

FIRST_OF_TWO = {"mode": "periodic", "every": 2, "length": 1}  # attempts 1, 3, 5... fail; 2, 4... pass
SCENARIOS = {
    "chaos-429": ({"kind": "http_error", "status_code": 429}, FIRST_OF_TWO),
    "chaos-529": ({"kind": "http_error", "status_code": 529}, FIRST_OF_TWO),
    "chaos-500": ({"kind": "http_error", "status_code": 500}, FIRST_OF_TWO),
    "chaos-slow": ({"kind": "latency", "min_ms": 150, "max_ms": 200}, {"mode": "always"}),
    # past the 1.5 s timeout of the test below by far; its retry has 1.5 s, room on a loaded machine
    "chaos-slower": ({"kind": "latency", "min_ms": 3000, "max_ms": 3200}, FIRST_OF_TWO),
    "chaos-bad-json": ({"kind": "invalid_json"}, {"mode": "always"}),
    "chaos-empty": ({"kind": "empty_response"}, {"mode": "always"}),
}
# Every test goes through two real services started for the module (the double and the AgentBreak proxy, each its
# own process): slow by the project's definition, and kept on one worker so that they start once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("agentbreak")]


@dataclass
class Chaos:
    double: str  # the fake API, straight
    proxy: str  # AgentBreak in front of it


def _launch(name: str, command: list[str], cwd: Path, ready: str) -> subprocess.Popen:
    log = cwd / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, "ANTHROPIC_API_KEY": ""})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if http(ready)[0] == 200:
                return process
        except OSError:
            pass
        if process.poll() is not None:
            break
        time.sleep(0.05)
    _stop(process)
    raise AssertionError(f"{name} did not start: {log.read_text(errors='replace')[-2000:]}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)  # its own session: the group is this process and its children
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def chaos(tmp_path_factory) -> Iterator[Chaos]:
    folder = tmp_path_factory.mktemp("chaos")
    base = DEFAULT_MODELS[2].api()  # claude-opus-5-5's limits
    entries = [base] + [{**base, "id": name, "display_name": name, "line": None} for name in SCENARIOS]
    (folder / "catalogue.json").write_text(json.dumps(entries))
    double_port, proxy_port = free_port(), free_port()
    baton = str(Path(sys.executable).parent / "baton")
    command = [baton, "fake-api", "--port", str(double_port), "--catalogue", str(folder / "catalogue.json")]
    double = _launch("fake-api", command, folder, f"http://127.0.0.1:{double_port}/stats")
    (folder / "application.yaml").write_text(json.dumps({
        "llm": {"enabled": True, "mode": "proxy", "upstream_url": f"http://127.0.0.1:{double_port}"},
        "mcp": {"enabled": False},
        "serve": {"host": "127.0.0.1", "port": proxy_port},
    }))  # JSON is YAML
    (folder / "scenarios.yaml").write_text(json.dumps({"version": 1, "scenarios": [
        {"name": name, "summary": name, "target": "llm_chat", "match": {"model": name}, "fault": fault,
         "schedule": schedule} for name, (fault, schedule) in SCENARIOS.items()]}))
    try:
        proxy = _launch("agentbreak", [sys.executable, "-m", "agentbreak", "serve", "--config", "application.yaml",
                         "--scenarios", "scenarios.yaml"], folder, f"http://127.0.0.1:{proxy_port}/healthz")
    except AssertionError:
        _stop(double)
        raise
    chaos = Chaos(f"http://127.0.0.1:{double_port}", f"http://127.0.0.1:{proxy_port}")
    try:
        # One answer through the proxy first (the default model, which no fault matches): a cold proxy's first
        # answer can outlast the tests' short timeouts on a loaded machine, as when xdist starts this fixture
        # for a single test.
        AnthropicModel(api_key=KEY, base_url=chaos.proxy, max_retries=2, base_delay_s=0.01).create(init_request())
        yield chaos
    finally:
        _stop(proxy)
        _stop(double)


@pytest.fixture
def sleeps(chaos) -> list[float]:
    assert http(f"{chaos.proxy}/_agentbreak/reset", "POST", {})[0] == 200  # schedules start again
    return []


def _through(chaos: Chaos, sleeps: list[float]) -> AnthropicModel:
    return AnthropicModel(api_key=KEY, base_url=chaos.proxy, max_retries=2, base_delay_s=0.01, sleep=sleeps.append)


def _answered(chaos: Chaos, model: str) -> int:
    return stats(chaos.double)["models"].get(model, 0)


@pytest.mark.parametrize("model, status", [("chaos-429", 429), ("chaos-529", 529), ("chaos-500", 500)])
def test_an_error_status_is_retried_and_the_retry_gets_the_doubles_answer(chaos, sleeps, caplog, model, status):
    caplog.set_level(logging.WARNING, logger="agents.anthropic_model")
    before = _answered(chaos, model)
    response = _through(chaos, sleeps).create(init_request(model=model))
    assert response.stop_reason == "tool_use" and response.content[0].text.startswith("[simulated]")
    assert len(sleeps) == 1 and 0.005 <= sleeps[0] <= 0.01  # backoff with jitter: AgentBreak sends no retry-after
    assert f"HTTP {status}" in caplog.text and KEY not in caplog.text
    assert _answered(chaos, model) == before + 1  # the failed attempt never reached the double


def test_latency_is_waited_through(chaos, sleeps):
    started = time.monotonic()
    response = _through(chaos, sleeps).create(init_request(model="chaos-slow"))
    assert response.stop_reason == "tool_use" and time.monotonic() - started >= 0.15 and sleeps == []


def test_latency_past_the_timeout_is_retried(chaos, sleeps, caplog):
    caplog.set_level(logging.WARNING, logger="agents.anthropic_model")
    response = _through(chaos, sleeps).create(init_request(model="chaos-slower", timeout_s=1.5))
    assert response.stop_reason == "tool_use" and len(sleeps) == 1 and "timeout" in caplog.text


@pytest.mark.parametrize("model, words", [("chaos-bad-json", "not valid JSON"), ("chaos-empty", "not valid JSON")])
def test_a_malformed_body_is_a_bad_response_not_a_retry(chaos, sleeps, model, words):
    with pytest.raises(BadResponse, match=words):
        _through(chaos, sleeps).create(init_request(model=model))
    assert sleeps == []


def test_what_agentbreak_does_not_proxy(chaos):
    """Only POST /v1/messages goes through AgentBreak: the Models API and count_tokens do not,
    so a client pointed at the proxy must reach the double directly for them."""
    headers = {"authorization": f"Bearer {KEY}", "anthropic-version": "2026-10-21"}
    assert http(f"{chaos.proxy}/v1/models", headers=headers)[0] in (404, 405)
    assert http(f"{chaos.proxy}/v1/messages/count_tokens", "POST", {}, headers)[0] in (404, 405)
    assert http(f"{chaos.double}/v1/models", headers=headers)[0] == 200

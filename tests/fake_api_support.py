"""Helpers for the fake-API tests: a realistic first request of baton's Init agent, raw HTTP, the double's stats."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic

from agents.agent import Agent
from agents.models import ModelRequest
from agents.openings import init_opening
from agents.settings_layers import resolve_config
from agents.simulated import SimulatedModel
from scenarios.run import copy_scenario
from workers.fake_api.server import FakeApi, Running, start

KEY = "sk-ant-api03-" + "f" * 60  # what a real key looks like: it must never come back
EPHEMERAL = {"type": "ephemeral"}
API_HEADERS = {"x-api-key": KEY, "anthropic-version": "2026-10-21"}  # what a /v1/ route needs, for raw calls


EXAMPLE = Path(__file__).resolve().parents[1] / "scenarios" / "refund_desk"
# A broker or a profile in the developer's shell must not turn a run through the double into another kind of run.
UNSET = ("BATON_BROKER_URL", "CELERY_BROKER_URL", "BATON_PROFILE", "BATON_SCENARIOS_DIR", "ANTHROPIC_AUTH_TOKEN")


def baton_through(folder: Path, base_url: str, *args: str, columns: str = "200", timeout: float = 300,
                  **settings: str) -> subprocess.CompletedProcess[str]:
    """``baton --scenarios-dir FOLDER ARGS`` as a process, its API the double at ``base_url``, with ``settings``
    (environment variables such as BATON_INIT_COMPACTOR) set."""
    env = {name: value for name, value in os.environ.items() if name not in UNSET}
    env.update(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=base_url, COLUMNS=columns, **settings)
    baton = str(Path(sys.executable).parent / "baton")
    return subprocess.run([baton, "--scenarios-dir", str(folder), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def run_example_through(folder: Path, base_url: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """The example copied into ``folder`` and run to its end (demo profile, embedded) through the double."""
    copy_scenario(EXAMPLE, folder / "refund_desk")
    done = baton_through(folder, base_url, "run", "refund_desk", "--auto-approve", "--profile", "demo", "--embedded",
                         **settings)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def sdk_client(url: str, **options: Any) -> anthropic.Anthropic:
    """The real SDK's client for the double at ``url``: the test key, no retries (a test sees each answer)."""
    return anthropic.Anthropic(api_key=KEY, base_url=url, max_retries=0, **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_body(model: str = "claude-opus-5-5", max_tokens: int = 2048) -> dict[str, Any]:
    """The Messages API body of Init's first step on refund_desk: system and tools marked for the cache."""
    static = Agent(resolve_config("init", env={}, profile="demo"), SimulatedModel()).static()
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": [{"type": "text", "text": static.system, "cache_control": EPHEMERAL}],
        "tools": static.tools,
        "messages": [{"role": "user", "content": [{"type": "text", "text": init_opening("refund_desk", 1)}]}],
    }


def init_request(model: str = "claude-opus-5-5", max_tokens: int = 2048, timeout_s: float | None = None
                 ) -> ModelRequest:
    body = init_body(model, max_tokens)
    return ModelRequest(model=model, max_tokens=max_tokens, messages=body["messages"], system=body["system"],
                        tools=body["tools"], timeout_s=timeout_s)


def http(url: str, method: str = "GET", body: Any = None, headers: dict[str, str] | None = None
         ) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of one plain HTTP call, error statuses included."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={
        "content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def stats(base_url: str) -> dict[str, Any]:
    status, body = http(f"{base_url}/stats")
    assert status == 200, body
    return body


def queue_fault(base_url: str, **order: Any) -> dict[str, Any]:
    status, body = http(f"{base_url}/faults", "POST", order)
    assert status == 200, body
    return body


@contextmanager
def serving(api: FakeApi) -> Iterator[Running]:
    """The double ``api`` on a free port of 127.0.0.1 for the ``with`` block."""
    running = start(api)
    try:
        yield running
    finally:
        running.stop()


def thinking_figures(seen: dict[str, Any], root: Any) -> dict[str, float]:
    """What a run through the double did with preserved thinking (issue 22's "done when"), checked:
    no request refused by the prefix check, no block the API had to drop, every block baton sent back
    valid, redacted blocks sent back, and thinking sent back in most requests; both agents compacted.
    Returns the figures, for the test to report."""
    thinking = seen["thinking"]
    assert thinking["refused"] == 0 and thinking["dropped"] == 0, thinking
    assert thinking["sent_back"] == thinking["valid"] > 0 and thinking["redacted_sent_back"] > 0, thinking
    steps, extends = 0, 0
    with_thinking = 0
    for role in ("init", "execute"):
        events = [json.loads(line) for line in (root / "state" / role / "events.jsonl").read_text().splitlines()]
        assert any(e["kind"] == "compaction" for e in events), role
        assert not any(e["kind"] == "warning" and e.get("code") == "thinking_dropped" for e in events), role
        calls = [e for e in events if e["kind"] == "step"][1:]  # the first call has nothing to send back
        steps += len(calls)
        extends += sum(1 for e in calls if e.get("prefix_extends"))
        with_thinking += sum(1 for e in calls if e["thinking_sent"] > 0)
        # Every break of the prefix is one the engine chose (a batch compressed, a compaction).
        assert all(e.get("prefix_extends") or e.get("view_changed") for e in calls), role
    summary = seen["by_purpose"]["summary"]
    summary_input = summary["cache_read"] + summary["cache_write"] + summary["input"]
    figures = {"requests_with_valid_thinking": with_thinking / steps,
               "requests_extending_the_previous": extends / steps,
               "summary_input_from_cache": summary["cache_read"] / summary_input}
    assert figures["requests_with_valid_thinking"] > 0.5, figures
    return figures


@contextmanager
def fake_api_process(folder: Path) -> Iterator[str]:
    """``baton fake-api`` as a process of its own (its log in ``folder``), for as long as the block runs; its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (folder / "fake-api.log").open("w")
    process = subprocess.Popen([str(Path(sys.executable).parent / "baton"), "fake-api", "--port", str(port)],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if http(f"{url}/stats")[0] == 200:
                    break
            except OSError:
                pass  # not listening yet
            time.sleep(0.05)
        else:
            raise AssertionError(f"baton fake-api did not start: {(folder / 'fake-api.log').read_text()[-2000:]}")
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # its own session: this process and its children
            process.wait(timeout=10)
        log.close()

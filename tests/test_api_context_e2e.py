"""Issue 32's done-when, through the double: the example reaches done with the API's own context tools for both
roles (``compactor = "api"``, then ``compressor = "api"``), with no prefix-check 400, no thinking block dropped by the
API, the thinking in kept turns sent back valid after every compaction (the double's ``/stats``), and ``baton status``
naming the strategy that ran."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_api_support import baton_through, run_example_through, stats
from workers.fake_api.server import FakeApi, Running, start

pytestmark = pytest.mark.slow  # whole runs through the real SDK and the API double


@pytest.fixture
def double() -> Iterator[Running]:
    running = start(FakeApi())
    yield running
    running.stop()


def run_example(tmp_path: Path, double: Running, **settings: str) -> tuple[dict, dict[str, list[dict]], str]:
    run_example_through(tmp_path, double.url, **settings)
    record = json.loads((tmp_path / "refund_desk" / "run.json").read_text())
    assert (record["phase"], record["status"]) == ("done", "succeeded")
    events = {role: [json.loads(line) for line in
                     (tmp_path / "refund_desk" / "state" / role / "events.jsonl").read_text().splitlines()]
              for role in ("init", "execute")}
    status = baton_through(tmp_path, double.url, "status", "refund_desk", columns="120", timeout=60, **settings)
    assert status.returncode == 0, status.stderr
    return stats(double.url), events, status.stdout


def no_thinking_refused_or_dropped(seen: dict) -> None:
    assert seen["errors"] == {}, seen["errors"]
    thinking = seen["thinking"]
    assert thinking["refused"] == 0 and thinking["dropped"] == 0, thinking
    assert thinking["sent_back"] == thinking["valid"] > 0, thinking


def test_the_api_writes_every_compaction_and_the_kept_thinking_stays_valid(tmp_path, double):
    seen, events, status = run_example(tmp_path, double, BATON_INIT_COMPACTOR="api", BATON_EXECUTE_COMPACTOR="api")
    no_thinking_refused_or_dropped(seen)
    compaction = seen["compaction"]
    assert compaction["requests"] == compaction["blocks"] > 0 and compaction["empty"] == 0, compaction
    # After every compaction block, the thinking of the kept turns went back and the API found it valid.
    assert compaction["thinking_sent"] == compaction["thinking_valid"] > 0, compaction
    for role, log in events.items():
        compactions = [e for e in log if e["kind"] == "compaction"]
        assert compactions and all(e["strategy"] == "api" and e.get("block") for e in compactions), role
        assert all(e["usage"]["iterations"][0]["type"] == "compaction" for e in compactions), role  # its cost
        assert not any(e["kind"] == "warning" and e.get("code") == "thinking_dropped" for e in log), role
        assert f"{role} context: compactor api: {len(compactions)} compaction(s) by the API" in status


def test_the_server_edits_the_context_while_the_client_sends_its_history_unchanged(tmp_path, double):
    seen, events, status = run_example(tmp_path, double, BATON_INIT_COMPRESSOR="api", BATON_EXECUTE_COMPRESSOR="api")
    no_thinking_refused_or_dropped(seen)
    assert seen["context_editing"]["requests"] > 0, seen["context_editing"]
    for role, log in events.items():
        steps = [e for e in log if e["kind"] == "step"]
        assert all(e.get("cleared_input") is not None for e in steps), role  # every request asked for it
        # Append-only: every break of the prefix is a compaction's (or an emergency trim's), none a compressed batch.
        assert all(e.get("prefix_extends") or e.get("view_changed") for e in steps[1:]), role
        line = next(line for line in status.splitlines() if line.startswith(f"{role} context:"))
        assert "compressor api: context editing asked on" in line, line

"""End to end through the double: ``ANTHROPIC_API_KEY=... ANTHROPIC_BASE_URL=http://127.0.0.1:P baton run
refund_desk --auto-approve --profile demo`` reaches done with every call on the real SDK path: the lines
resolved through ``GET /v1/models`` and pinned, ``count_tokens``, and each step and summary a Messages call."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.fake_api_support import KEY, baton_through, run_example_through, stats, thinking_figures
from workers.fake_api.server import FakeApi, Running, start

pytestmark = pytest.mark.slow  # whole runs through the real SDK and the API double


@pytest.fixture
def double() -> Iterator[Running]:
    running = start(FakeApi())
    yield running
    running.stop()


def test_a_run_reaches_done_through_the_double(tmp_path, double):
    done = run_example_through(tmp_path, double.url)

    record = json.loads((tmp_path / "refund_desk" / "run.json").read_text())
    assert (record["phase"], record["status"]) == ("done", "succeeded")
    assert {role: pin["id"] for role, pin in record["models"].items()} == {
        "init": "claude-opus-5-5", "execute": "claude-sonnet-5-5"}

    seen = stats(double.url)
    assert seen["requests"]["GET /v1/models"] >= 1 and seen["requests"]["POST /v1/messages"] > 20
    assert seen["errors"] == {} and seen["faults"] == {}
    # baton's reminders (the plan's recap) went out as mid-conversation system messages, which both 5.5 models
    # take; thinking_figures below checks that none broke the thinking prefix (no 400, no unplanned break).
    assert seen["system_messages"] > 0
    assert seen["tokens"]["cache_read"] > seen["tokens"]["cache_write"] > 0  # the prefix is reused step after step
    # Every agent compacted, and the summaries read what they summarise from the steps' cache.
    for role in ("init", "execute"):
        events = (tmp_path / "refund_desk" / "state" / role / "events.jsonl").read_text().splitlines()
        compactions = [e for e in map(json.loads, events) if e["kind"] == "compaction"]
        assert compactions and not any(c["fallback"] for c in compactions), role
        steps = [e for e in map(json.loads, events) if e["kind"] == "step"]
        assert all(e["cost_usd"] > 0 and e["usage"]["output_tokens"] > 0 for e in steps), role  # priced per call
    summaries = seen["by_purpose"]["summary"]
    assert summaries["requests"] >= 2
    assert summaries["cache_read"] > summaries["cache_write"] + summaries["input"], summaries
    # Thinking bound to its prefix (issue 22): signed by the double, sent back only while valid.
    figures = thinking_figures(seen, tmp_path / "refund_desk")
    assert figures["summary_input_from_cache"] > 0.7, figures
    print("thinking through the double, embedded:", figures, "system messages:", seen["system_messages"])
    log = (tmp_path / "refund_desk" / "state" / "init" / "log.jsonl").read_text()
    assert "[simulated]" in log  # the double's answers still say who wrote them
    everything = done.stdout + done.stderr + "".join(
        p.read_text(errors="replace") for p in (tmp_path / "refund_desk").rglob("*") if p.is_file())
    assert KEY not in everything


def test_a_copy_of_the_example_reaches_done_through_the_double(tmp_path, double):
    """The README's rehearsal on `baton new fa --from refund_desk`: the copy plays as it does embedded."""
    created = baton_through(tmp_path, double.url, "new", "fa", "--from", "refund_desk", timeout=120)
    assert created.returncode == 0, created.stdout + created.stderr
    done = baton_through(tmp_path, double.url, "run", "fa", "--auto-approve", "--profile", "demo", "--embedded")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / "fa" / "run.json").read_text())
    assert (record["phase"], record["status"]) == ("done", "succeeded")
    assert [r["success_rate"] for r in record["results"]] == [0.8, 1.0]  # as the example plays
    assert stats(double.url)["errors"] == {}

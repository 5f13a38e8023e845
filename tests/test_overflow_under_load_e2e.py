"""Issue 38's done-when, whole runs: the README's main job survives what made it die of ContextOverflow.

- Behind an independent preserved-thinking check (``tests/resigning_proxy.py``: every thinking block re-signed with
  a signature six times longer than the double's, every fifth turned into ``redacted_thinking``), the example with
  the API's compaction and context editing for both agents reaches done; before, Init died in its design with
  "unexpected ContextOverflow" in 2 of 2 runs.
- Under load a compaction's wall-clock budget passes before its summary call (simulated here by a budget of a
  millisecond): the quick start's demo run still reaches done, every compaction baton's own summary, and each
  lasting condition is said once, not at every step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from scenarios.run import copy_scenario
from tests.fake_api_support import EXAMPLE, UNSET, run_example_through, serving, stats
from tests.resigning_proxy import resigning
from workers.fake_api.server import FakeApi

pytestmark = pytest.mark.slow  # whole runs through subprocesses (and the API double)

API_CONTEXT = {"BATON_INIT_COMPACTOR": "api", "BATON_EXECUTE_COMPACTOR": "api",
               "BATON_INIT_COMPRESSOR": "api", "BATON_EXECUTE_COMPRESSOR": "api"}


def events(root: Path, role: str) -> list[dict]:
    return [json.loads(line) for line in (root / "state" / role / "events.jsonl").read_text().splitlines()]


def said_once(root: Path) -> None:
    for role in ("init", "execute"):
        codes = Counter(e.get("code") for e in events(root, role) if e["kind"] == "warning")
        assert max(codes.values(), default=0) <= 1, (role, codes)


def test_the_example_reaches_done_behind_a_proxy_with_long_signatures_and_redacted_blocks(tmp_path):
    with serving(FakeApi()) as double, resigning(double.url, factor=6, redact_every=5) as (url, proxy):
        done = run_example_through(tmp_path, url, **API_CONTEXT)
        seen = stats(double.url)
    assert "unexpected" not in done.stderr, done.stderr[-2000:]
    record = json.loads((tmp_path / "refund_desk" / "run.json").read_text())
    assert (record["phase"], record["status"]) == ("done", "succeeded")
    # The proxy did its part: long signatures, redacted blocks, and baton sent them back unchanged.
    assert proxy.redacted > 0 and proxy.mapped_back > 0 and proxy.longest >= 1_000, vars(proxy)
    thinking = seen["thinking"]
    assert thinking["refused"] == 0 and thinking["dropped"] == 0, thinking  # nothing edited or misplaced
    said_once(tmp_path / "refund_desk")


def test_the_demo_reaches_done_when_every_compaction_is_late(tmp_path):
    copy_scenario(EXAMPLE, tmp_path / "refund_desk")
    env = {name: value for name, value in os.environ.items()
           if name not in (*UNSET, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
    env.update(BATON_SUMMARY_TIMEOUT_S="0.001", COLUMNS="200")  # the deadline passes before the summary call
    baton = str(Path(sys.executable).parent / "baton")
    done = subprocess.run([baton, "--scenarios-dir", str(tmp_path), "run", "refund_desk", "--auto-approve",
                           "--profile", "demo", "--embedded"], env=env, capture_output=True, text=True, timeout=1_500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "refund_desk"
    record = json.loads((root / "run.json").read_text())
    assert (record["phase"], record["status"]) == ("done", "succeeded")
    compactions = [e for role in ("init", "execute") for e in events(root, role) if e["kind"] == "compaction"]
    assert compactions and all(e["fallback"] for e in compactions)  # every one late
    assert done.stdout.count("still ~") <= 2, done.stdout  # once per agent, not after every compaction
    said_once(root)

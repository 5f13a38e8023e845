"""bench/context_replay.py's A/B/C table (bench/replay_api_policies.py) on a small made-up run: the API's compaction
keeps the kept turns' thinking valid where baton's own summary does not, context editing leaves the client's
history append-only, and the server clears only what repays the cache it invalidates."""

from __future__ import annotations

import importlib

import pytest

from context.assembly import Assembler, StaticPrefix
from context.history import History
from context.messages import ToolResultBlock, ToolUseBlock, assistant, parse_message, user
from context.policy import Policy
from tests.bench_scripts import load_bench

WORDS = "refund order customer policy window sale damaged amount total status config path error retry".split()


def _result_text(step: int, lines: int) -> str:
    return "\n".join(f"{step:>3}.{n:<4} " + " ".join(WORDS[(step * 7 + n * 3 + k) % len(WORDS)] for k in range(10))
                     for n in range(lines))


def _run(steps: int = 24, lines: int = 40) -> dict:
    """One task, then `steps` Bash steps whose results are `lines` lines each, then a final answer."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "Fix the refund rule in src/refunds.py."}]}]
    for i in range(steps):
        tool_id = f"toolu_{i:03d}"
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"Step {i}: reading part {i}."},
            {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": f"cat src/part_{i}.txt"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id, "content": _result_text(i, lines)}]})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "Done."}]})
    return {"id": "tiny", "system": "You fix bugs.", "messages": messages}


@pytest.fixture(scope="module")
def replay():
    module = load_bench("context_replay")
    module.THRESHOLD = 6_000  # this module's own copy: the made-up run compacts a few times
    return module


@pytest.fixture(scope="module")
def api(replay):
    return importlib.import_module("replay_api_policies")  # as context_replay imported it (bench/ is on the path)


def _drive(replay, traj: dict, start: int):
    """Replay `traj` under the table's policies as replay_run does, keeping each call's record per policy:
    (compacted before it, thinking blocks sent back, of them valid, the client's request body, what the model
    reads)."""
    static = StaticPrefix(system=traj["system"])
    history = History(redact=False)
    policies = replay.api_policies(replay, "tiny", history, static, (5, start))
    trackers = {k: p.tracker() if hasattr(p, "tracker") else replay.PrefixTracker() for k, p in policies.items()}
    calls: dict[str, list] = {k: [] for k in policies}
    for m in (parse_message(x) for x in traj["messages"]):
        if m.role == "assistant" and history.view and history.view[-1].role == "user":
            for key, pol in policies.items():
                tracker, before = trackers[key], (trackers[key].stats.sends, trackers[key].stats.valid_sends)
                req, _, extra = pol.request()
                body, planned = replay.wire(pol, req, static)
                tracker.request(body, planned=planned)
                calls[key].append((bool(extra), tracker.stats.sends - before[0],
                                   tracker.stats.valid_sends - before[1], body, req))
            for tracker in trackers.values():
                tracker.reply(m.api)
        history.append(m)
    return policies, trackers, calls


def test_the_api_compaction_keeps_the_kept_turns_thinking_valid_where_batons_summary_does_not(replay, api):
    # No compression (a start size beyond the run): only the compaction changes what precedes the kept turns.
    policies, trackers, calls = _drive(replay, _run(), start=10**9)
    after_a = [(sent, valid) for compacted, sent, valid, _, _ in calls[api.A] if compacted]
    after_b = [(sent, valid) for compacted, sent, valid, _, _ in calls[api.B] if compacted]
    assert after_a and after_b, "the run must compact under both policies"
    assert policies[api.B].api_compactions == len(after_b) and policies[api.B].fallbacks == 0
    # Right after each compaction: the kept steps' replies are sent back; A's are all invalid, B's all valid.
    assert all(sent >= replay.KEEP_STEPS and valid == 0 for sent, valid in after_a)
    # Only the first: at a later one the engine moves the pinned opening off a message among the kept turns.
    first_sent, first_valid = after_b[0]
    assert first_sent >= replay.KEEP_STEPS and first_valid == first_sent
    assert trackers[api.B].stats.valid_sends > trackers[api.A].stats.valid_sends
    b_body = next(body for compacted, _, _, body, _ in calls[api.B] if compacted)
    assert b_body["messages"][0]["content"][0]["type"] == "compaction"  # the block first, the kept turns after it


def test_context_editing_sends_an_append_only_history_while_the_server_clears(replay, api):
    canonical = importlib.import_module("request_prefix").canonical_message  # cache_control aside
    policies, trackers, calls = _drive(replay, _run(steps=30, lines=60), start=2_000)
    c = policies[api.C]
    assert c.server.clearings > 0, "the server must have cleared something for the check to mean anything"
    records = calls[api.C]
    for (_, _, _, body, _), (compacted, _, _, following, _) in zip(records, records[1:]):
        if compacted:
            continue  # the block replaced what it summarised: the one planned change
        old, new = body["messages"], following["messages"]
        assert len(new) > len(old)
        assert [canonical(m) for m in new[: len(old)]] == [canonical(m) for m in old]  # nothing sent ever changes
    stats = trackers[api.C].stats
    assert stats.breaks_unplanned == 0 and stats.sends == stats.valid_sends > 0  # clearing never costs thinking
    # ... while what the model reads (and the cache sees) has results replaced by the placeholder.
    assert any(replay.CLEAR_TEXT in r.text for _, _, _, _, req in records for m in req for r in m.tool_results)


def _assembled(api, old_lines: int, recent_lines: int, steps: int = 8, keep: int = 2):
    """An append-only (compressor "api") request: `steps` Bash steps, the last `keep` with results of
    `recent_lines` lines and the older ones of `old_lines`."""
    h = History(redact=False)
    h.append(user("Fix the refund rule."))
    for i in range(steps):
        h.append(assistant(ToolUseBlock(id=f"toolu_{i}", name="Bash", input={"command": f"cat part_{i}"})))
        lines = recent_lines if i >= steps - keep else old_lines
        h.append(user(ToolResultBlock(tool_use_id=f"toolu_{i}", content=_result_text(i, lines))))
    policy = Policy(window=200_000, threshold=150_000, keep_last_steps=keep, start_tokens=100, compressor="api",
                    compactor="api")
    return h, Assembler(h, policy, agent="execute", rates=api.API_RATES)


def test_the_server_clears_only_what_repays_the_cache_it_invalidates(replay, api):
    # Small old results before big recent ones: clearing saves little and rewrites the big ones. Refused.
    _, asm = _assembled(api, old_lines=2, recent_lines=300)
    a = asm.assemble()
    server = api.ClearingServer(replay.CLEAR_TEXT, api.API_RATES, payback=30)
    view, _ = server.serve(a)
    assert server.clearings == 0 and view == a.messages
    # Big old results before small recent ones: cleared, all but the last two tool uses' results ...
    h, asm = _assembled(api, old_lines=300, recent_lines=2)
    a = asm.assemble()
    server = api.ClearingServer(replay.CLEAR_TEXT, api.API_RATES, payback=30)
    view, marks = server.serve(a)
    cleared = [r.tool_use_id for m in view for r in m.tool_results if r.text == replay.CLEAR_TEXT]
    assert server.clearings == 1 and cleared == [f"toolu_{i}" for i in range(6)]
    assert view[-1] is a.messages[-1] and len(view) == len(a.messages)
    # ... and at the next request the same clearing is re-applied: the prefix just written is read, not changed.
    h.append(assistant(ToolUseBlock(id="toolu_8", name="Bash", input={"command": "cat part_8"})))
    h.append(user(ToolResultBlock(tool_use_id="toolu_8", content=_result_text(8, 2))))
    view2, _ = server.serve(asm.assemble())
    assert [m.canonical for m in view2[: len(view)]] == [m.canonical for m in view]
    # Big old results before big recent ones: the rewrite repays within the payback horizon (30 calls), not within one.
    for payback, clearings in ((30, 1), (1, 0)):
        _, asm = _assembled(api, old_lines=300, recent_lines=300)
        server = api.ClearingServer(replay.CLEAR_TEXT, api.API_RATES, payback=payback)
        server.serve(asm.assemble())
        assert server.clearings == clearings, payback

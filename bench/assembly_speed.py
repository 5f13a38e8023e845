"""How long `Assembler.assemble()` takes on a very long log, versus re-counting the log.

    python bench/assembly_speed.py [--data DIR] [--out docs/benchmarks.md] [--calls 50]

A log of about 1,000,000 cl100k tokens is built from the real Claude Code
sessions of the trajectory set: their tool steps (assistant tool calls and the
results) are repeated with fresh tool ids, so the protocol stays valid, as one
long round (the hardest case: every older step sits in the compressed layer) and,
separately, with the sessions' own rounds kept (multi-round). The log is fed
into a `History`; then, for each of `--calls` calls after one warm-up, one new
step is appended and `assemble()` is timed (so the memoised prefix is rebuilt
every B steps, as in a real run). The comparison is what an engine without
cached counts would do every step: tokenise every block of the log again with
tiktoken (`count_text`).

Policy: the Execute agent's real parameters (window 1,000,000, threshold
700,000, N=5, the `Policy()` defaults of B and start size).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_DATA, DEFAULT_DOC, iter_runs, md_table, require_data, write_section  # noqa: E402

from context.assembly import Assembler, StaticPrefix  # noqa: E402
from context.history import History  # noqa: E402
from context.messages import Message, parse_message  # noqa: E402
from context.policy import Policy  # noqa: E402
from context.tokens import block_tokens, forget_counts  # noqa: E402  (count_text over each block)

SIZES = (100_000, 300_000, 1_000_000)
TARGET_MS = 5.0
TARGET_SPEEDUP = 20.0


def _fresh(raw: dict[str, Any], suffix: str) -> dict[str, Any]:
    """A copy of a recorded message whose tool ids carry `suffix` (unique per repetition)."""
    msg = json.loads(json.dumps(raw))
    msg.pop("usage", None)
    for b in msg["content"]:
        if b.get("type") == "tool_use":
            b["id"] = f"{b['id']}_{suffix}"
        elif b.get("type") == "tool_result":
            b["tool_use_id"] = f"{b['tool_use_id']}_{suffix}"
    return msg


def message_stream(runs: list[dict[str, Any]], single_round: bool) -> Iterator[Message]:
    """Endless stream of fresh messages built from the recorded sessions.

    single_round: the first user message, then only (assistant with tool calls,
    user with their results) pairs, forever: one round that never ends.
    Otherwise: the sessions' messages as recorded (their rounds included), repeated."""
    first = runs[0]["messages"][0]
    yield parse_message(_fresh(first, "r0"))
    rep = 0
    while True:
        rep += 1
        for k, run in enumerate(runs):
            msgs = run["messages"]
            suffix = f"r{rep}s{k}"
            if single_round:
                for i in range(len(msgs) - 1):
                    a, u = msgs[i], msgs[i + 1]
                    if (
                        a["role"] == "assistant"
                        and u["role"] == "user"
                        and any(b["type"] == "tool_use" for b in a["content"])
                    ):
                        ids = {b["id"] for b in a["content"] if b["type"] == "tool_use"}
                        answered = {b.get("tool_use_id") for b in u["content"] if b["type"] == "tool_result"}
                        if ids <= answered:
                            yield parse_message(_fresh(a, suffix))
                            yield parse_message(_fresh(u, suffix))
            else:
                for m in msgs[1 if rep == 1 and k == 0 else 0 :]:
                    yield parse_message(_fresh(m, suffix))


def build(stream: Iterator[Message], target: int) -> tuple[History, float]:
    """A history of at least `target` raw tokens, ending at a step boundary (no pending tool call)."""
    history = History(redact=False)
    t0 = time.perf_counter()
    for msg in stream:
        history.append(msg)
        if history.tokens() >= target and msg.role == "user" and not history.pending_tool_ids:
            break
    return history, time.perf_counter() - t0


def next_step(stream: Iterator[Message], history: History) -> float:
    """Append messages up to the end of the next step; returns the append time (s)."""
    t = 0.0
    for msg in stream:
        t0 = time.perf_counter()
        history.append(msg)
        t += time.perf_counter() - t0
        if msg.role == "user" and not history.pending_tool_ids:
            break
    return t


def recount(history: History) -> int:
    """What an engine without cached counts does every step: tokenise every block again."""
    return sum(block_tokens(b) for m in history.view for b in m.content)


def measure(runs, single_round: bool, size: int, calls: int, recount_reps: int, static: StaticPrefix) -> dict[str, Any]:
    stream = message_stream(runs, single_round)
    history, build_s = build(stream, size)
    start_tokens, start_msgs = history.tokens(), len(history)
    assembler = Assembler(history, Policy(), agent="execute", static=static)
    assembler.assemble()  # warm-up: first compressions, the memoised prefix
    times, appends, rebuilt = [], [], 0
    gc.collect()
    for _ in range(calls):
        appends.append(next_step(stream, history))
        key_before = assembler._prefix_key
        t0 = time.perf_counter_ns()
        a = assembler.assemble()
        times.append((time.perf_counter_ns() - t0) / 1e6)
        rebuilt += assembler._prefix_key != key_before
    rc = []
    for _ in range(recount_reps):
        forget_counts()  # the engine without cached counts has no memo of counts either
        t0 = time.perf_counter()
        n = recount(history)
        rc.append(time.perf_counter() - t0)
    med = statistics.median(times)
    rc_ms = statistics.median(rc) * 1000
    return {
        "shape": "single round" if single_round else "multi-round",
        "size": size, "log_tokens": start_tokens, "end_tokens": history.tokens(), "recounted": n,
        "messages": start_msgs, "end_messages": len(history),
        "steps": len(history.step_starts), "rounds": len(history.round_starts),
        "request_msgs": len(a.messages), "request_tokens": a.raw_tokens, "estimated": a.estimated_input,
        "median_ms": med, "mean_ms": statistics.fmean(times), "p90_ms": sorted(times)[int(0.9 * (len(times) - 1))],
        "max_ms": max(times), "rebuilt": rebuilt, "calls": calls,
        "append_ms": statistics.median(appends) * 1000, "build_s": build_s,
        "recount_ms": rc_ms, "speedup": rc_ms / med if med else float("inf"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory holding claude-code.jsonl.gz")
    ap.add_argument(
        "--out", type=Path, default=DEFAULT_DOC, help="markdown file; only its assembly-speed section is rewritten"
    )
    ap.add_argument("--calls", type=int, default=50, help="timed assemble() calls per size")
    ap.add_argument("--recount", type=int, default=3, help="repetitions of the full re-count per size")
    args = ap.parse_args(argv)
    started = time.perf_counter()

    runs = list(iter_runs(require_data(args.data) / "claude-code.jsonl.gz"))
    static = StaticPrefix(system="You are the Execute agent of baton. " * 200)  # a ~1.4k-token system prompt
    pol = Policy()
    results = []
    for single in (True, False):
        for size in SIZES:
            r = measure(runs, single, size, args.calls, args.recount, static)
            results.append(r)
            print(
                f"{r['shape']:>12} {r['log_tokens']:>9,} tokens {r['messages']:>5} msgs (+{args.calls} steps): "
                "assemble median "
                f"{r['median_ms']:.3f} ms (p90 {r['p90_ms']:.2f}, max {r['max_ms']:.2f}, prefix rebuilt "
                f"{r['rebuilt']}/{r['calls']}), re-count {r['recount_ms']:.0f} ms, {r['speedup']:.0f}x",
                flush=True,
            )
    elapsed = time.perf_counter() - started

    header = [
        "log",
        "log tokens (start → end)",
        "messages (start → end)",
        "last request (msgs / tokens)",
        "assemble median ms",
        "p90 / max ms",
        "prefix rebuilt",
        "append ms/step",
        "re-count ms",
        "speed-up",
    ]
    rows = [[
        r["shape"], f"{r['log_tokens']:,} → {r['end_tokens']:,}", f"{r['messages']:,} → {r['end_messages']:,}",
        f"{r['request_msgs']:,} / {r['request_tokens']:,}",
        f"{r['median_ms']:.3f}", f"{r['p90_ms']:.2f} / {r['max_ms']:.2f}", f"{r['rebuilt']}/{r['calls']}",
        f"{r['append_ms']:.2f}", f"{r['recount_ms']:,.0f}", f"{r['speedup']:,.0f}x",
    ] for r in results]
    table = md_table(header, rows)
    t_rows = []
    for r in results:
        if r["size"] == max(SIZES):
            t_rows.append([r["shape"], f"assemble ≤ {TARGET_MS:g} ms at 1M tokens", f"{r['median_ms']:.3f} ms",
                           "met" if r["median_ms"] <= TARGET_MS else "**missed**"])
            t_rows.append([r["shape"], f"≥ {TARGET_SPEEDUP:g}x faster than re-counting", f"{r['speedup']:,.0f}x",
                           "met" if r["speedup"] >= TARGET_SPEEDUP else "**missed**"])
    targets = md_table(["log", "target", "measured", "met?"], t_rows, "llrl")
    print()
    print(table)
    print()
    print(targets)

    cmd = "python bench/assembly_speed.py" + (
        "" if not sys.argv[1:] else " " + " ".join(argv if argv is not None else sys.argv[1:])
    )
    doc = [
        "## Assembly speed",
        "",
        f"Command: `{cmd}` ({elapsed:.0f} s; Python {platform.python_version()}, {os.cpu_count()} CPU(s)).",
        "",
        "Logs of 100k, 300k and 1M cl100k tokens built from the two real Claude Code sessions, repeated with fresh "
        "tool ids. *single round*: only their tool steps, one round that never ends, so every older step sits in "
        "the compressed layer (the hardest case); *multi-round*: the sessions as recorded, rounds included. "
        f"Policy: Execute defaults (window {pol.window:,}, threshold {pol.threshold:,}, N={pol.keep_last_steps}, "
        f"B={pol.batch}, start size {pol.start_tokens:,}). After one warm-up call, {args.calls} calls each append one "
        "new step and time `Assembler.assemble()` (the memoised prefix is rebuilt every B steps, counted under "
        "*prefix rebuilt*). *re-count* is what an engine without cached counts would do every step: "
        f"`count_text` over every block of the log (median of {args.recount}). "
        "*speed-up* = re-count / assemble median. "
        "*append ms/step*: `History.append` of one step (tokenises only the new blocks, once). "
        "*re-count* is timed on the final log (the *end* size).",
        "",
        table,
        "",
        "### Targets",
        "",
        targets,
    ]
    write_section(args.out, "assembly-speed", "\n".join(doc))
    print(f"\nwrote {args.out} ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

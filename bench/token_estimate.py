"""How well do token estimates predict Claude's own count? Measured on real Claude Code sessions.

Run: ``.venv/bin/python bench/token_estimate.py [--data DIR] [--worst N]`` (DIR holds
``claude-code.jsonl.gz``; default ``../shared/trajectories`` from the project
root). ``measure(path)`` returns the numbers as a dict.

Method. In the recorded sessions every assistant message carries the real
``usage`` of the call that produced it, and that call's input is every message
before it. Claude Code logs one response's parallel tool calls as several
assistant entries carrying the *same* usage; they are grouped into one call
whose input ends before the first of them. For each consecutive pair of calls
(k-1, k), the messages added in between (the assistant turn of call k-1 and
the following user message(s)) are estimated, and

* span:  the estimate vs the real delta ``total_k - total_{k-1}``,
* total: ``total_{k-1} + estimate`` vs ``total_k`` (the anchored prediction),

each as an absolute relative error. Pairs straddling a recorded compaction
(``meta.compactions[].at_message``) and pairs whose delta is <= 0 are skipped.

Estimators: raw cl100k; characters/3 of the same text cl100k counts (text, tool
name + input JSON, tool-result text); characters/3 of the whole JSON
serialisation of the messages (a reference: JSON keys and ids happen to stand
in for the framing); a fixed 1.19 x cl100k; the calibrated ``TokenEstimator``
learning online (a fresh one per session, predicting each pair before it
observes that call's usage: no peeking); and the same estimator started from a
cold prior with no overheads, to show what the online learning alone does.

``--worst N`` lists the N pairs with the largest calibrated total error and
their shape (which roles and tools the span holds, raw tokens per role): what
drives the tail. On the recorded sessions that is

* assistant turns that cost hundreds to thousands of tokens more than their
  visible content (a short text + Edit/Write), most likely thinking the log
  lost: the same kind of turn without the extra costs ~1.2-1.3x cl100k;
* pre-commit hook failures (tool results ending "[Output truncated: showing 30
  of N lines] ... Fix these issues before committing."), charged ~2.4x their
  cl100k count whatever N, and one Task + Skill turn charged 4x: content the
  model read that the log does not hold;
* large file reads, which Claude counts at ~1.1x cl100k while the JSON of tool
  calls is ~1.3x: a single factor over-estimates the former.

The first two are not predictable from the log, so the estimator down-weights
them (Huber) instead of letting them drag its coefficients; the third is what
its separate assistant and user factors are for.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from context.estimator import TokenEstimator, usage_total  # noqa: E402
from context.messages import Message, parse_message  # noqa: E402
from context.tokens import message_counts, split_counts  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "trajectories"
FILE_NAME = "claude-code.jsonl.gz"

METHODS = [
    ("raw", "raw cl100k"),
    ("chars3", "chars/3 (counted text)"),
    ("chars3_json", "chars/3 (message JSON, ref.)"),
    ("fixed119", "fixed 1.19 x cl100k"),
    ("calibrated", "calibrated (online)"),
    ("calibrated_cold", "calibrated, cold prior"),
]


def _content_chars(m: Message) -> int:
    """Characters of exactly the text that ``block_tokens`` counts (images left out)."""
    from context.tokens import dumps_input

    n = 0
    for b in m.content:
        if b.type == "text":
            n += len(b.text)
        elif b.type == "tool_use":
            n += len(b.name) + len(dumps_input(b.input))
        elif b.type == "tool_result":
            n += len(b.text)
        elif b.type == "thinking":
            n += len(b.thinking)
    return n


def _resolve(path: str | Path | None) -> Path:
    p = Path(path) if path is not None else DEFAULT_DATA
    return p / FILE_NAME if p.is_dir() else p


def _calls(raw_messages: list[dict[str, Any]]) -> list[tuple[int, int, Any]]:
    """(index of first assistant message of the call, real total input, usage) per distinct call."""
    calls: list[tuple[int, int, Any]] = []
    for i, m in enumerate(raw_messages):
        if m.get("role") != "assistant":
            continue
        total = usage_total(m.get("usage"))
        if total is None:
            continue
        if calls and calls[-1][1] == total and _only_assistant_between(raw_messages, calls[-1][0], i):
            continue  # same response logged as several entries
        calls.append((i, total, m["usage"]))
    return calls


def _only_assistant_between(raw: list[dict[str, Any]], i0: int, i1: int) -> bool:
    # Interleaved tool results are fine (the converter placed them there); a real
    # user text turn would mean a new call and a new usage.
    return all(
        m.get("role") == "assistant" or all(b.get("type") == "tool_result" for b in m.get("content", []))
        for m in raw[i0 + 1 : i1]
    )


def _stats(errors: list[float]) -> dict[str, float]:
    if not errors:
        return {"median": float("nan"), "p90": float("nan")}
    s = sorted(errors)
    p90 = s[min(len(s) - 1, max(0, int(round(0.9 * (len(s) - 1)))))]
    return {"median": statistics.median(s), "p90": p90}


LEARNED = ("factor", "assistant_factor", "user_factor", "per_message", "per_block")


def _learned(est: TokenEstimator) -> dict[str, float]:
    return {k: round(getattr(est, k), 3) for k in LEARNED}


def _shape(span: list[Message]) -> str:
    """Compact description of a span: role letter and block kinds (tool names for tool calls)."""
    parts = []
    for m in span:
        kinds = [f"tool_use:{b.name}" if b.type == "tool_use" else b.type for b in m.content]
        parts.append(f"{m.role[0].upper()}[{','.join(kinds)}]")
    return " ".join(parts)


def measure(path: str | Path | None = None, worst: int = 15) -> dict[str, Any]:
    """Run the measurement on ``path`` (a claude-code .jsonl.gz or a directory holding it).

    ``worst``: how many of the pairs with the largest calibrated total error to
    describe in ``result["worst"]``.
    """
    file = _resolve(path)
    tail: list[dict[str, Any]] = []
    span_err: dict[str, list[float]] = {k: [] for k, _ in METHODS}
    total_err: dict[str, list[float]] = {k: [] for k, _ in METHODS}
    sessions = []
    skipped = {"compaction": 0, "non_positive_delta": 0}
    with gzip.open(file, "rt", encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            run = json.loads(line)
            raw_messages = run["messages"]
            messages = [parse_message(m) for m in raw_messages]
            compactions = [c["at_message"] for c in run.get("meta", {}).get("compactions", [])]
            est = TokenEstimator()
            cold = TokenEstimator(prior_per_message=0.0, prior_per_block=0.0)
            calls = _calls(raw_messages)
            pairs = 0
            prev: tuple[int, int, Any] | None = None
            for call in calls:
                i1, t1, usage = call
                if prev is not None:
                    i0, t0, _ = prev
                    if any(i0 < c <= i1 for c in compactions):
                        skipped["compaction"] += 1
                        est.forget_anchor()
                        cold.forget_anchor()
                    elif t1 - t0 <= 0:
                        skipped["non_positive_delta"] += 1
                    else:
                        pairs += 1
                        span = messages[i0:i1]
                        delta = t1 - t0
                        raw, _, _ = message_counts(span)
                        assistant_raw = split_counts(span)[3]
                        guesses = {
                            "raw": raw,
                            "chars3": sum(_content_chars(m) for m in span) / 3,
                            "chars3_json": sum(len(m.canonical) for m in span) / 3,
                            "fixed119": 1.19 * raw,
                            "calibrated": est.estimate_messages(span),
                            "calibrated_cold": cold.estimate_messages(span),
                        }
                        # The API path must agree with the anchored prediction.
                        assert est.predict_total(t0, span) == t0 + guesses["calibrated"]
                        for k, g in guesses.items():
                            span_err[k].append(abs(g - delta) / delta)
                            total_err[k].append(abs(t0 + g - t1) / t1)
                        g = guesses["calibrated"]
                        tail.append(
                            {
                                "session": run.get("id"),
                                "messages": [i0, i1],
                                "total": t1,
                                "delta": delta,
                                "estimate": g,
                                "error_tokens": g - delta,
                                "total_error": abs(t0 + g - t1) / t1,
                                "assistant_raw": assistant_raw,
                                "user_raw": raw - assistant_raw,
                                "shape": _shape(span),
                            }
                        )
                # Only now does the estimator see call k's real usage.
                est.observe(usage, messages[:i1])
                cold.observe(usage, messages[:i1])
                prev = call
            sessions.append(
                {
                    "id": run.get("id"),
                    "calls": len(calls),
                    "pairs": pairs,
                    "learned": _learned(est),
                    "learned_cold": _learned(cold),
                }
            )
    return {
        # relative to the repository: docs/benchmarks.md must not name the machine it ran on
        "data": os.path.relpath(Path(file).resolve(), ROOT),
        "pairs": sum(s["pairs"] for s in sessions),
        "skipped": skipped,
        "sessions": sessions,
        "span": {k: _stats(v) for k, v in span_err.items()},
        "total": {k: _stats(v) for k, v in total_err.items()},
        "labels": dict(METHODS),
        "worst": sorted(tail, key=lambda p: -p["total_error"])[: max(worst, 0)],
    }


def format_table(result: dict[str, Any], worst: int = 0) -> str:
    lines = [
        f"data: {result['data']}",
        f"pairs: {result['pairs']} (skipped: {result['skipped']})",
        "",
        f"| {'estimator':<30} | span median | span p90 | total median | total p90 |",
        f"|{'-' * 32}|-------------|----------|--------------|-----------|",
    ]
    for key, label in METHODS:
        s, t = result["span"][key], result["total"][key]
        lines.append(
            f"| {label:<30} | {s['median']:>10.1%} | {s['p90']:>7.1%} "
            f"| {t['median']:>11.2%} | {t['p90']:>8.2%} |"
        )
    lines.append("")
    for s in result["sessions"]:
        lines.append(
            f"{s['id']}: {s['calls']} calls, {s['pairs']} pairs; learned {s['learned']}; "
            f"cold start learned {s['learned_cold']}"
        )
    if worst > 0:
        lines += ["", f"worst {worst} pairs by calibrated total error (error = estimate - real delta):"]
        for p in result["worst"][:worst]:
            i0, i1 = p["messages"]
            lines.append(
                f"  {p['total_error']:6.2%}  error {p['error_tokens']:+6d} of delta {p['delta']:6d} "
                f"(total {p['total']:,}); raw assistant {p['assistant_raw']}, user {p['user_raw']}; "
                f"{p['session']} [{i0}:{i1}] {p['shape']}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None, help=f"directory holding {FILE_NAME} (or the file itself)")
    ap.add_argument("--json", action="store_true", help="print the result dict as JSON")
    ap.add_argument("--worst", type=int, default=0, metavar="N",
                    help="also list the N pairs with the largest calibrated total error")
    ap.add_argument("--out", default=None,
                    help="also write the table as the token-estimate section of this markdown file")
    args = ap.parse_args(argv)
    if not _resolve(args.data).exists():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from common import require_data

        require_data(_resolve(args.data))
    result = measure(args.data, worst=max(args.worst, 15))
    table = format_table(result, worst=args.worst)
    print(json.dumps(result, indent=2) if args.json else table)
    if args.out:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from common import write_section

        body = "\n".join([
            "## Token estimate error",
            "",
            f"Command: `python bench/token_estimate.py --out {args.out}`. "
            "On the Claude Code runs (real `usage` per call), "
            "predict each call's total input from the previous call's real total plus the estimate of the messages "
            "added since (*total*), and the added span alone against the real delta (*span*); absolute relative "
            "error. The calibrated estimator learns online from earlier calls only.",
            "",
            "```",
            table,
            "```",
        ])
        write_section(Path(args.out), "token-estimate", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

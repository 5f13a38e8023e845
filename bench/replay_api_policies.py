"""Policies B and C of the context replay's A/B/C table (issue 32): the API's compaction and context editing.

bench/context_replay.py replays each recorded run; these policies ride along and the table compares

* A: baton's engine (`BatonPolicy`: per-tool compression with the payback rule, baton's own summary at the
  threshold, the pinned opening and the bridge);
* B: the engine with compactor ``api`` (``context.api_compaction``): at the same threshold and with the same
  kept steps, the summarised part of the request goes to the API, whose block is sent first, alone in an
  assistant message; the kept turns follow exactly as they were sent; the pinned opening is appended to the
  last message at compaction; later batches are still compressed by baton;
* C: B with compressor ``api`` too (``context.api_editing``): the client's history is append-only and the
  server clears older tool results (`ClearingServer`); C' is the same client on a stateless server.

A0 (A at the engine's default cache ratios) and C' are diagnostics: the per-role choice reads A, B and C.

The API is simulated: its summary is baton's fallback summary (`fallback_summary`, as the replay's own
summaries are), so B's block is the size of what baton would have written. Every policy of the table reads
the 5.5 models' cache ratios in its payback rule (`API_RATES`: a read at 0.05x, a write at 1.25x), as
``agents.agent.assembler_for`` gives the engine for those models.

Thinking after an API compaction: the existing `PrefixTracker` binds a block to everything before it, so it
would call every kept turn's block invalid once the compaction block replaced the messages before them.
`CompactionTracker` adds the API's rule (as ``PrefixChain.admit_summary`` models it): the block stands for
the messages it summarised, so the chain goes on after it from where those messages ended; a kept turn's
thinking is valid when it is sent back unchanged after the block and was valid under the summarised prefix.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import md_table  # noqa: E402
from prefix_stability import PrefixTracker  # noqa: E402
from request_prefix import canonical_message, chain, seed  # noqa: E402

from context.api_compaction import CompactionReply, CompactionRequest  # noqa: E402
from context.assembly import Assembled, Assembler, StaticPrefix, kept_from  # noqa: E402
from context.cache_rates import CacheRates  # noqa: E402
from context.compaction import CircuitBreaker, KnownFacts, SummaryRequest, fallback_summary, summary_request  # noqa: E402
from context.compaction_event import CompactionEvent  # noqa: E402
from context.history import History  # noqa: E402
from context.messages import CompactionBlock, Message, ToolResultBlock  # noqa: E402
from context.policy import MAX_TOKENS as POLICY_MAX_TOKENS  # noqa: E402
from context.policy import Policy  # noqa: E402
from context.redaction import redact  # noqa: E402
from context.summary_schemas import ExecuteSummary  # noqa: E402


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens (Anthropic's price list, November 2026)."""

    input: float
    write_5m: float
    write_1h: float
    read: float
    output: float


PRICES = {"Opus 5.5": Price(4.0, 5.0, 8.0, 0.20, 20.0), "Sonnet 5.5": Price(2.0, 2.5, 4.0, 0.10, 10.0)}
TTLS = ("5m", "1h")
# The payback rule's ratios for both models (the same for Opus and Sonnet 5.5): read 0.05x, write 1.25x.
API_RATES = CacheRates.of(PRICES["Opus 5.5"].input, PRICES["Opus 5.5"].read, PRICES["Opus 5.5"].write_5m,
                          PRICES["Opus 5.5"].write_1h)
RECALL_BAR = 98.0  # needed-fact recall (visible + reachable) a policy must reach to be chosen

# Keys of the table's policies in a replay's results; the lower-threshold copies add LOWER.
A, B, C, C_STATELESS = "api-table A", "api-table B", "api-table C", "api-table C'"
A_DEFAULT_RATES = "api-table A0"
LOWER = " lower"
LABELS = {
    A: "A baton: per-tool compression, own summary",
    A_DEFAULT_RATES: "A0 as A, payback at the engine's default ratios (diagnostic)",
    B: "B API compaction + baton's compression",
    C: "C API compaction + API context editing",
    C_STATELESS: "C' as C, the server clearing afresh each request (diagnostic)",
}


# ---------------------------------------------------------------------------- the server's clearing


class ClearingServer:
    """What the server makes of C's append-only requests under ``clear_tool_uses_20250919``.

    The client sends trigger and keep (``context.api_editing``). Sticky (C, the issue's model): the server
    re-applies the clearing it made before, and clears more only when the prompt passes the trigger and the
    results not yet cleared, all but those of the last `keep` tool uses, repay the cache they invalidate:
    cleared tokens x read x payback >= tokens from the first newly cleared result to the end x write (the
    payback rule with the engine's ratios; the newly written prefix is read after). Stateless (C'): each
    request is cleared afresh, all but the last `keep` tool uses, when the cleared tokens reach the request's
    ``clear_at_least`` (the engine's payback size, from the first tool result to the end): once a clearing
    passes, the next request clears one step more.

    Cleared results read `placeholder` (the docs give no text). A clearing never changes what the client
    sent, so it never invalidates thinking ("server-side context management never invalidates thinking
    blocks"); it changes only what the cache sees.
    """

    def __init__(self, placeholder: str, rates: CacheRates, payback: int, *, sticky: bool = True):
        self.placeholder, self.rates, self.payback, self.sticky = placeholder, rates, payback, sticky
        self.cleared: set[str] = set()  # the sticky server's cleared tool_use ids
        self.clearings = 0  # requests at which the server cleared a result it had not cleared at the previous one
        self._last: set[str] = set()
        self._forms: dict[tuple[int, frozenset[str]], tuple[Message, Message]] = {}
        self._placeholder_tokens = ToolResultBlock(tool_use_id="x", content=placeholder).tokens

    def serve(self, assembled: Assembled, *, commit: bool = True) -> tuple[list[Message], list[int]]:
        """The messages the model reads for this request, and the cache breakpoints on them. `commit`: the
        request is sent (a clearing it makes is counted and, on the sticky server, kept)."""
        msgs = assembled.messages
        edit = _clear_edit(assembled.request_fields)
        before = self.cleared
        cleared = before if self.sticky else set()
        if edit is not None and assembled.estimated_input > edit["trigger"]["value"]:
            new = self._candidates(msgs, cleared, edit["keep"]["value"])
            if new and self._worth(msgs, cleared, new, edit, assembled):
                cleared = cleared | new
        if commit:
            present = {r.tool_use_id for m in msgs for r in m.tool_results}
            self.clearings += bool((cleared - self._last) & present)  # a result the last request did not clear
            self._last = cleared
            if self.sticky:
                self.cleared = cleared
        view = self._apply(msgs, cleared)
        if not self.sticky:
            return view, list(assembled.breakpoints)
        # The client also marks the end of what was cleared before this request (a new clearing reads the prefix
        # up to it) and after it (written now, so the next clearing finds it): 3 message breakpoints at most,
        # the last message's first, the stable end's last.
        ends = [max((i for i, m in enumerate(msgs) if any(r.tool_use_id in ids for r in m.tool_results)), default=-1)
                for ids in (before, cleared)]
        marks = list(dict.fromkeys(i for i in (len(msgs) - 1, *ends, *reversed(assembled.breakpoints)) if i >= 0))
        return view, sorted(marks[:3])

    def _candidates(self, msgs: list[Message], cleared: set[str], keep: int) -> set[str]:
        uses = [u.id for m in msgs for u in m.tool_uses]
        kept = set(uses[len(uses) - keep:]) if keep else set()
        return {r.tool_use_id for m in msgs for r in m.tool_results
                if r.tool_use_id not in cleared and r.tool_use_id not in kept}

    def _worth(self, msgs: list[Message], cleared: set[str], new: set[str], edit: dict, assembled: Assembled) -> bool:
        saved = sum(max(0, r.tokens - self._placeholder_tokens) for m in msgs for r in m.tool_results
                    if r.tool_use_id in new)
        if not self.sticky:  # clear_at_least is in the API's tokens: the engine's scale of the raw counts
            scale = assembled.scale
            return saved * scale >= (edit.get("clear_at_least") or {}).get("value", 0)
        if self.payback == 0:
            return True
        first = next(i for i, m in enumerate(msgs) if any(r.tool_use_id in new for r in m.tool_results))
        rewritten = sum(m.tokens for m in self._apply(msgs[first:], cleared | new))
        return saved * self.rates.read * self.payback >= rewritten * self.rates.write

    def _apply(self, msgs: list[Message], cleared: set[str]) -> list[Message]:
        out = []
        for m in msgs:
            mine = frozenset(r.tool_use_id for r in m.tool_results if r.tool_use_id in cleared)
            if not mine:
                out.append(m)
                continue
            hit = self._forms.get((id(m), mine))
            if hit is None or hit[0] is not m:
                blocks = [ToolResultBlock(tool_use_id=b.tool_use_id, content=self.placeholder, is_error=b.is_error)
                          if isinstance(b, ToolResultBlock) and b.tool_use_id in mine else b for b in m.content]
                hit = self._forms[(id(m), mine)] = (m, Message(role=m.role, content=blocks))
            out.append(hit[1])
        return out


def _clear_edit(fields: dict[str, Any]) -> dict[str, Any] | None:
    edits = (fields.get("context_management") or {}).get("edits", [])
    return next((e for e in edits if e.get("type") == "clear_tool_uses_20250919"), None)


# ---------------------------------------------------------------------------- policies B and C


class ApiPolicy:
    """B (compactor ``api``), or with a `server` C (compressor ``api`` too; the server's view is priced).

    The replay calls `request` before each recorded call: it returns the messages the model reads, their cache
    breakpoints and the compaction requests made before it; `body` is the client's request (the thinking
    tracker reads it), `planned` whether the engine chose to change the view there.
    """

    def __init__(self, replay: ModuleType, history: History, static: StaticPrefix, settings: dict[str, Any],
                 server: ClearingServer | None = None):
        self.replay, self.history, self.static, self.server = replay, history, static, server
        strategies = {"compactor": "api"}
        if server is not None:  # the client never trims (the window is the server's): its history stays append-only
            strategies |= {"compressor": "api", "window": POLICY_MAX_TOKENS}
        self.policy = Policy(**{**settings, **strategies})
        self.assembler = Assembler(history, self.policy, agent=replay.AGENT, static=static, rates=API_RATES)
        self.event: CompactionEvent | None = None
        self.breaker = CircuitBreaker()
        self.calls_since_compaction = 0
        self.body: dict[str, Any] = {}
        self.planned = False
        self._compressed = 0
        self.summary_output = self.api_compactions = self.fallbacks = 0
        self.summarised: list[dict[str, Any]] | None = None  # what a new block stands for, until the tracker reads it
        self._asked: CompactionRequest | None = None

    def tracker(self) -> CompactionTracker:
        return CompactionTracker(self)

    def counts(self) -> dict[str, int]:
        return {"summary_output": self.summary_output, "api_compactions": self.api_compactions,
                "fallbacks": self.fallbacks, "clearings": self.server.clearings if self.server else 0}

    def request(self) -> tuple[list[Message], list[int], list[SummaryRequest]]:
        a = self.assembler.assemble(self.event)
        extra: list[SummaryRequest] = []
        self.calls_since_compaction += 1
        compressed = a.compressed_steps - a.trimmed_steps
        self.planned, self._compressed = compressed > self._compressed, compressed
        if self._over_threshold(a) and self._compaction_can_help(a.estimated_input):
            self.planned, self.calls_since_compaction = True, 0
            extra.append(self._compact(a))
            a = self.assembler.assemble(self.event)
            self._compressed = a.compressed_steps - a.trimmed_steps
        self.body = a.to_request(self.static, model=self.replay.MODEL, max_tokens=self.replay.MAX_TOKENS)
        if self.server is None:
            return a.messages, a.breakpoints, extra
        view, marks = self.server.serve(a)
        return view, marks, extra

    def _over_threshold(self, a: Assembled) -> bool:
        """B: the engine's decision. C: the same rule on what the model reads (the server's view), since the
        client's append-only history only grows."""
        if self.server is None:
            return self.assembler.should_compact(a, self.event)
        view, _ = self.server.serve(a, commit=False)
        estimate = self.assembler.estimator.estimate_raw(
            self.static.tokens + sum(m.tokens for m in view), len(view), sum(len(m.content) for m in view))
        base = self.event.in_view(self.history).kept_from if self.event else 0
        return estimate > self.policy.threshold and kept_from(self.history, base, self.policy.keep_last_steps) > base

    def _compaction_can_help(self, tokens: int) -> bool:
        """As the agents' step decides (``Policy.may_compact_again``, as `BatonPolicy`)."""
        left = None if self.event is None else self.event.tokens_after
        return self.policy.may_compact_again(left, self.calls_since_compaction - 1, tokens)

    def _compact(self, a: Assembled) -> SummaryRequest:
        """Compact through the engine's compactor with the simulated API; the request to price."""
        self._asked = None
        prompt = self.replay.COMPACT_PROMPT
        event = self.assembler.compactor.compact(self.assembler, self.event, compaction_call=self._api, call=None,
                                                 schema=ExecuteSummary, prompt=prompt, breaker=self.breaker)
        self.event = event
        self.summary_output += sum(m.tokens for m in event.messages if m.role == "assistant")
        if event.block is None:  # baton's own summary (the engine fell back): priced as A prices its summary
            self.fallbacks += 1
            return summary_request(a, prompt)
        self.api_compactions += 1
        asked = self._asked
        self.summarised = [m.api for m in asked.messages]
        return SummaryRequest(tuple(asked.messages), asked.instructions, asked.breakpoints)

    def _api(self, request: CompactionRequest, timeout_s: float) -> CompactionReply:
        """The API's on-demand compaction, simulated: its summary is baton's fallback summary of the same steps."""
        self._asked = request
        previous = self.event
        base = previous.in_view(self.history).kept_from if previous else 0
        keep = kept_from(self.history, base, self.policy.keep_last_steps)
        summary = fallback_summary(ExecuteSummary, self.history, keep, KnownFacts(), self.replay.AGENT,
                                   previous.summary if previous else None)
        text = f"<compact_summary>{json.dumps(summary, ensure_ascii=False, sort_keys=True)}</compact_summary>"
        block = CompactionBlock(content=redact(text), signature="replay")
        return CompactionReply(block=block, stop_reason="compaction")


class CompactionTracker(PrefixTracker):
    """`PrefixTracker` plus the API compaction block's rule (see the module docstring).

    At the request right after an API compaction (`ApiPolicy.summarised` set), the block's digest is the one
    the summarised messages end with: computed along this tracker's own chain, so the messages a first block
    stood for keep standing for them inside a second compaction's summarised part."""

    def __init__(self, policy: ApiPolicy):
        super().__init__()
        self._policy = policy

    def request(self, body: dict[str, Any], *, planned: bool = False) -> None:
        summarised, self._policy.summarised = self._policy.summarised, None
        if summarised is None:
            super().request(body, planned=planned)
            return
        canon, keys = self._canonicals(body["messages"])
        start = seed(body.get("system"), body.get("tools"))
        cut = self._digest_after([canonical_message(m) for m in summarised], start)
        if self.stats.calls:
            self.stats.breaks_planned += 1  # the block replaced what it summarised: a planned change
        self.stats.calls += 1
        digests = [start, cut, *chain(cut, canon[1:])[1:]]
        valid = self._count_sends(keys, digests)
        if self._last_bound is not None:
            self.stats.produced += 1
            self.stats.valid_next += self._last_bound in valid
        self._sent, self._chain, self._last_bound = canon, digests, None

    def _digest_after(self, canon: list[str], start: str) -> str:
        same = self._common(canon) if self._chain and self._chain[0] == start else 0
        return chain(self._chain[same] if same else start, canon[same:])[-1]


def api_policies(replay: ModuleType, dataset: str, history: History, static: StaticPrefix,
                 default: tuple[int, int]) -> dict[str, Any]:
    """The table's policies for one run (key -> policy), at the default threshold and, for the data sets
    `replay.LOWER_THRESHOLDS` names, at the lower one. `replay` is bench/context_replay.py as loaded (its
    constants, `PAYBACK` as --payback set it, and `BatonPolicy`)."""
    batch, start = default
    thresholds = {"": replay.THRESHOLD}
    if dataset in replay.LOWER_THRESHOLDS:
        thresholds[LOWER] = replay.LOWER_THRESHOLDS[dataset]
    out: dict[str, Any] = {}
    for suffix, threshold in thresholds.items():
        settings = {"window": replay.WINDOW, "threshold": threshold, "keep_last_steps": replay.KEEP_STEPS,
                    "batch": batch, "start_tokens": start, "payback_calls": replay.PAYBACK}
        out[A + suffix] = replay.BatonPolicy(history, static, batch, start, threshold=threshold, _rates=API_RATES)
        out[A_DEFAULT_RATES + suffix] = replay.BatonPolicy(history, static, batch, start, threshold=threshold)
        out[B + suffix] = ApiPolicy(replay, history, static, settings)
        for key, sticky in ((C, True), (C_STATELESS, False)):
            server = ClearingServer(replay.CLEAR_TEXT, API_RATES, replay.PAYBACK, sticky=sticky)
            out[key + suffix] = ApiPolicy(replay, history, static, settings, server=server)
    return out


# ---------------------------------------------------------------------------- the table


SUMMED = ("calls", "input", "read", "write", "plain", "compactions", "needed", "visible", "reachable", "invalid",
          "sends", "valid_sends", "produced", "valid_next", "summary_output", "api_compactions", "fallbacks",
          "clearings")


def totals(results: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    """(data set, policy key) -> summed counts of the table's policies, output tokens included."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in results:
        for key, s in r["stats"].items():
            if not key.startswith("api-table "):
                continue
            t = out.setdefault((r["dataset"], key), dict.fromkeys((*SUMMED, "output"), 0.0))
            for f in SUMMED:
                t[f] += s.get(f, 0)
            t["output"] += r["output"] + s.get("summary_output", 0)
    return out


def cost(t: dict[str, float], model: str, ttl: str) -> float:
    """Dollars of the replay: every call and compaction, cache writes at the TTL's price."""
    p = PRICES[model]
    write = p.write_5m if ttl == "5m" else p.write_1h
    return (t["plain"] * p.input + t["write"] * write + t["read"] * p.read + t["output"] * p.output) / 1e6


def recall(t: dict[str, float]) -> float:
    return 100 * (t["visible"] + t["reachable"]) / t["needed"] if t["needed"] else 100.0


def _pct(a: float, b: float) -> str:
    return f"{100 * a / b:.1f}" if b else "–"


def api_rows(results: list[dict[str, Any]], thresholds: dict[str, int]):
    """The A/B/C table: per data set and threshold, each policy's tokens, cost, recall and thinking."""
    header = ["data set", "threshold", "policy", "calls", "mean input/call", "cache read share %",
              "compactions: API's / baton's", "cleared (server)",
              *(f"{m} $ {ttl}" for m in PRICES for ttl in TTLS), "x A: 5m / 1h",
              "recall visible %", "reachable %", "total %", "thinking sends valid %", "blocks valid at the next call %"]
    tot = totals(results)
    rows = []
    for ds in sorted({d for d, _ in tot}):
        for suffix in ("", LOWER):
            if (ds, A + suffix) not in tot:
                continue
            base = tot[(ds, A + suffix)]
            for key in (A, A_DEFAULT_RATES, B, C, C_STATELESS):
                t = tot.get((ds, key + suffix))
                if t is None:
                    continue
                all_in = t["read"] + t["write"] + t["plain"]
                own = t["compactions"] - t["api_compactions"]  # A's, and B's or C's fallbacks
                compactions = f"{int(t['api_compactions'])} / {int(own)}"
                rows.append([
                    ds, f"{thresholds.get(ds + suffix, 0):,}" + (" (lower)" if suffix else ""), LABELS[key],
                    int(t["calls"]), f"{t['input'] / max(t['calls'], 1):,.0f}", _pct(t["read"], all_in), compactions,
                    int(t["clearings"]) if key in (C, C_STATELESS) else "–",
                    *(f"{cost(t, m, ttl):.2f}" for m in PRICES for ttl in TTLS),
                    " / ".join(f"{cost(t, 'Sonnet 5.5', ttl) / cost(base, 'Sonnet 5.5', ttl):.3f}" for ttl in TTLS),
                    _pct(t["visible"], t["needed"]), _pct(t["reachable"], t["needed"]), f"{recall(t):.1f}",
                    f"{_pct(t['valid_sends'], t['sends'])} ({int(t['valid_sends']):,} / {int(t['sends']):,})",
                    _pct(t["valid_next"], t["produced"]),
                ])
    return header, rows


def best_rows(results: list[dict[str, Any]], roles: dict[str, tuple[str, str]]):
    """Per role (-> the data set that stands for it, its model) and TTL, at the default threshold: each of A, B
    and C's cost and recall, and the cheapest at recall >= RECALL_BAR (costs within 0.5% tie; the higher share
    of thinking sent back valid breaks it)."""
    header = ["role", "data set (stands for)", "model", "TTL", *(f"{k[-1]} $ (recall %)" for k in (A, B, C)),
              f"cheapest at recall ≥ {RECALL_BAR:.0f}%"]
    tot = totals(results)
    rows = []
    for role, (ds, model) in roles.items():
        for ttl in TTLS:
            cands = [(k, tot[(ds, k)]) for k in (A, B, C) if (ds, k) in tot]
            ok = [(k, t) for k, t in cands if recall(t) >= RECALL_BAR]
            choice = f"none reaches {RECALL_BAR:.0f}%"
            if ok:
                low = min(cost(t, model, ttl) for _, t in ok)
                near = [(k, t) for k, t in ok if cost(t, model, ttl) <= low * 1.005]
                share = {k: t["valid_sends"] / max(t["sends"], 1) for k, t in near}
                winners = [k for k, _ in near if share[k] == max(share.values())]
                choice = " = ".join(k[-1] for k in winners)
                if len(winners) > 1:
                    choice += " (the same cost and thinking validity)"
                elif len(near) > 1:
                    choice += " (cost within 0.5%: thinking validity decides)"
            rows.append([role, ds, model, ttl, *(f"{cost(t, model, ttl):.2f} ({recall(t):.1f})" for _, t in cands),
                         choice])
    return header, rows


def api_section(table: str, best: str, command: str, runs: int, calls: int, elapsed: float, jobs: int,
                replay: ModuleType) -> str:
    """The markdown section for docs/benchmarks.md."""
    lower = ", ".join(f"{ds} {t:,}" for ds, t in replay.LOWER_THRESHOLDS.items())
    return "\n".join([
        "## Context: baton's engine vs the API's compaction and context editing",
        "",
        f"Command: `{command}` ({runs} runs, {calls} calls, {elapsed:.0f} s on {jobs} process(es)).",
        "",
        "The same replay and cache model as the Context replay section (prefix hashes at breakpoints, the "
        "20-block lookback, no expiry), priced at today's rates per MTok: Opus 5.5 input $4, 5-minute write $5, 1-hour "
        "write $8, read $0.20, output $20; Sonnet 5.5 half of each. *5m*: every breakpoint for 5 minutes; *1h*: "
        "every breakpoint for an hour (writes at 2x input). **The recorded runs carry no timestamps**, so no "
        "entry expires in this model and the mixed rule (1 hour only before a gap over 5 minutes) cannot be "
        "measured: the 1h columns show only what the dearer write costs. Output: the recorded replies (the same "
        "for every policy) plus each compaction's summary. Execute thresholds scaled down 10x as above "
        f"(compaction at an estimated {replay.THRESHOLD:,}, start size {replay.DEFAULT_START:,}); *lower*: "
        f"{lower}, where every data set compacts. Every policy's payback rule reads the 5.5 models' ratios "
        f"(read 0.05x, write 1.25x; payback {replay.PAYBACK} calls), as the engine does for them; *A0* "
        "(diagnostic) is A with the engine's default ratios (read 0.1x), the policy (d) of the Context replay "
        "section, priced here at the 5.5 rates.",
        "",
        "* **A**: baton's engine (`BatonPolicy`): per-tool compression, its own summary at the threshold, the "
        "pinned opening and the bridge. Its summary request is the whole context plus the compact prompt.",
        "* **B**: the engine with compactor `api` (`context.api_compaction`): at the same threshold and with the "
        f"same kept steps (the last {replay.KEEP_STEPS}, `kept_from`) the request becomes one assistant message "
        "holding the API's compaction block, then the kept turns exactly as sent before, the pinned opening "
        "appended to the last user message at compaction; later batches are compressed as in A. The compaction "
        "request is the request cut before the kept steps, with system and tools and the step's breakpoints "
        "before the cut (a cache read of the prefix the steps cached), plus the compact prompt as instructions. "
        "**The API is simulated: the block holds baton's fallback summary (`context.compaction.fallback_summary`) "
        "of the same steps, so its size is that of the summaries the replay models for A**; a compaction the "
        "engine cannot plan (kept steps not the request's tail) falls back to baton's own summary (*fallback*).",
        "* **C**: B with compressor `api` (`context.api_editing`): the client sends its history append-only "
        f"(no compression, no earlier round cut), and the server applies `clear_tool_uses_20250919` (trigger "
        f"{replay.DEFAULT_START:,} on the request as sent, keep {replay.KEEP_STEPS} tool uses) to what the model "
        "reads: sticky (it re-applies what it cleared), clearing more only when the results not yet cleared repay "
        "the rewrite, "
        "cleared x 0.05 x payback ≥ tokens from the first newly cleared result to the end x 1.25; a cleared result "
        f"reads `{replay.CLEAR_TEXT}` (the docs give no text). Priced on the server's view, with the client's "
        "breakpoints plus one at the end of what was cleared before (so a new clearing reads the prefix before "
        "it). Compaction as in B, decided on the server's view; the compaction request carries no context "
        "management (the API refuses the two together), so it reads the cache only up to the first cleared "
        "result. *C'* (diagnostic): the same client on a server that clears afresh on every request, all but the "
        "last tool uses, whenever that clears the engine's `clear_at_least`, with the engine's breakpoints.",
        "",
        "Columns: *compactions: API's / baton's*: compactions whose summary the API wrote, and baton's own (A's, "
        "or B's and C's fallbacks); *cleared (server)*: requests at which the server cleared a result it had "
        "not cleared at the request before; costs are the whole replay, calls and compactions; *x A*: cost over "
        "A's at the same threshold and TTL (the same for both models: Opus 5.5's prices are twice Sonnet's "
        "throughout). Recall as in the Context replay section, on what the model reads. Thinking (the runs hold "
        "none: each reply is assumed to carry one, bound to its request): *sends valid* = blocks sent back valid "
        "/ sent back; *valid at the next call* = blocks still valid at the call after the one that produced them. "
        "In B and C a compaction block stands for the messages it summarised (`CompactionTracker` in "
        "`bench/replay_api_policies.py`, the rule of `PrefixChain.admit_summary`), so the kept turns' thinking "
        "stays valid; baton's own summary (A, a fallback) changes what precedes them. At a later API compaction "
        "the engine moves the pinned opening to the new last message, off the one it was appended to before: "
        "when that one is among the new kept turns, the thinking after it is no longer valid (measured as the "
        "engine does it). Server-side clearing never invalidates thinking: C's tracker reads the client's request.",
        "",
        table,
        "",
        f"Cheapest per role at needed-fact recall ≥ {RECALL_BAR:.0f}% (default threshold; costs within 0.5% tie, "
        "broken by thinking validity):",
        "",
        best,
        "",
    ])


def api_table(results: list[dict[str, Any]], replay: ModuleType) -> tuple[str, str]:
    """The A/B/C table and the per-role choice, as markdown."""
    thresholds = {ds: replay.THRESHOLD for ds in {r["dataset"] for r in results}}
    thresholds |= {ds + LOWER: t for ds, t in replay.LOWER_THRESHOLDS.items()}
    header, rows = api_rows(results, thresholds)
    table = md_table(header, rows, "lll" + "r" * (len(header) - 3))
    roles = {"Init (Opus)": ("tau-bench-airline", "Opus 5.5"), "Execute (Sonnet)": ("claude-code", "Sonnet 5.5"),
             "Execute (Sonnet), one command a step": ("mini-swe-agent", "Sonnet 5.5")}
    present = {r["dataset"] for r in results}
    best = md_table(*best_rows(results, {k: v for k, v in roles.items() if v[0] in present}), "llllrrrl")
    return table, best

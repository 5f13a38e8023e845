"""Replay recorded agent trajectories under several context policies and price them.

    python bench/context_replay.py [--data DIR] [--out docs/benchmarks.md | --charts DIR]
                                   [--batch B] [--start S] [--sweep] [--api-table] [--jobs N]

It prints its tables; it writes docs/benchmarks.md and docs/img/*.png only when asked (--out). The table of
baton's engine against the API's compaction and context editing, priced at the 5.5 models' rates, is
bench/replay_api_policies.py's (alone: --api-table).

Every recorded assistant message is one model call; its context is everything
before it in the (repaired) log. For each call and each policy we build the
request, then price it with a model of Anthropic's prompt cache:

* prefix order: tools, system, messages; the static prefix (tools + system) is
  always a breakpoint; baton marks `Assembled.breakpoints`, the baselines mark
  their last message (as Claude Code does);
* every breakpoint of a request writes a cache entry (hash of the prefix up to
  it; "identical" means equal `Message.canonical` strings);
* the read of a new request is the longest cached prefix found at one of its
  breakpoints or up to 20 content blocks before one (the lookback rule);
  tokens from the read point to the last breakpoint are cache writes (1.25x),
  tokens after the last breakpoint plain input (1x), cache reads cost 0.1x;
* no expiry within a run. Sonnet 4.5 prices: $3/MTok input, $15/MTok output.

Summary requests carry the engine's breakpoints (`context.compaction.summary_breakpoints`) and are also
priced with the system prompt's breakpoint only, as the agents sent them before issue 9; the pinned opening
is measured against the same policy with `opening_cap_chars=0`, at the default thresholds and at lower ones
(`LOWER_THRESHOLDS`) where every data set compacts.

Token counts are raw cl100k counts (`Message.tokens`, `StaticPrefix.tokens`);
only ratios between policies matter. The Execute agent's thresholds are scaled
down 10x (window 100,000, compaction threshold 70,000; clear_tool_uses trigger
10,000) so the recorded runs reach them.

Needed-fact recall: identifiers in each tool call's input that first appeared in
an earlier tool result; "visible" if the identifier occurs in the request of
that call, "reachable" if not visible but an archive reference visible in the
request points at a full result that contains it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field, fields
from multiprocessing import Pool
from pathlib import Path
from typing import Any, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    DEFAULT_DATA,
    dataset_name,
    iter_runs,
    md_table,
    require_data,
    trajectory_files,
    write_section,
)
from prefix_stability import PrefixStats, PrefixTracker  # noqa: E402
from replay_api_policies import api_policies, api_section, api_table  # noqa: E402

from context.assembly import Assembler, StaticPrefix, request_body  # noqa: E402
from context.compaction import CircuitBreaker, SummaryRequest, compact, summary_request  # noqa: E402
from context.compaction_event import CompactionEvent  # noqa: E402
from context.compression import archive_ref  # noqa: E402
from context.history import History, own_text  # noqa: E402
from context.messages import (  # noqa: E402
    CompactionBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    parse_message,
)
from context.policy import Policy  # noqa: E402
from context.protocol import problems  # noqa: E402
from context.summary_cap import cap_tokens, summary_tokens  # noqa: E402
from context.summary_schemas import ExecuteSummary  # noqa: E402
from context.todo_recap import recap_of  # noqa: E402

# ---------------------------------------------------------------------------- parameters

PRICE_IN = 3.0 / 1e6
PRICE_OUT = 15.0 / 1e6
WRITE_X = 1.25
READ_X = 0.10
LOOKBACK_BLOCKS = 20

SCALE = 10
WINDOW = 1_000_000 // SCALE
THRESHOLD = 700_000 // SCALE
CLAUDE_PER_CL100K = 1.19  # Claude's count of a span over its cl100k count (../shared/trajectories/README.md)
KEEP_STEPS = 5
MASK_KEEP = 5
CLEAR_TRIGGER = 100_000 // SCALE
CLEAR_KEEP = 3
SUMMARY_OUTPUT = 2_000
SUMMARY_FIELDS = ("summary_read", "summary_write", "summary_plain", "summary_bare_read", "summary_bare_plain")
AGENT = "execute"

DEFAULT_BATCH = Policy.model_fields["batch"].default
DEFAULT_START = Policy.model_fields["start_tokens"].default
PAYBACK = Policy.model_fields["payback_calls"].default  # set from --payback
E_BATCHES = (1, 2, 5, 10)
SWEEP_STARTS = (0, 5_000, 10_000, 20_000, 40_000)
SWEEP_BATCHES = (1, 2, 5, 10)

# Lower compaction thresholds, so that every data set compacts a few times (about a third to a half of its
# longer runs' sizes; the window stays): the issue-9 tables.
LOWER_THRESHOLDS = {"claude-code": 40_000, "mini-swe-agent": 20_000, "tau-bench-airline": 5_000}
NO_PIN = {"opening_cap_chars": 0}  # the opening is not pinned after a summary (as before issue 9)
NO_RECAP = {"todo_recap": False}  # no todo recap at the end of the request (as before issue 13)
NO_CAP = {"summary_cap_share": 0.0}  # summaries grow as they will (as before issue 13)
# The recorded runs never call TodoWrite, so the recap's cost is also measured for an agent that keeps
# this plan from its first call on (a typical list: two done, one in progress, three to do).
SYNTHETIC_PLAN = [("Reproduce the failing test", "completed"), ("Find where the parser drops the header", "completed"),
                  ("Fix the header handling in parse_request", "in_progress"),
                  ("Add a regression test for empty headers", "pending"), ("Run the whole test suite", "pending"),
                  ("Summarise the change for the reviewer", "pending")]
WITH_PLAN = {"_plan": True}  # BatonPolicy: a recap of SYNTHETIC_PLAN wherever the run has none

# The request bodies the prefix measures read (bench/prefix_stability.py): model and max_tokens are not part
# of a thinking block's prefix.
MODEL, MAX_TOKENS = "replay", 1
PREFIX_FIELDS = tuple(f.name for f in fields(PrefixStats) if f.name != "calls")  # Stats counts the calls

MASK_TEXT = "Old tool output omitted ({n} lines)."
CLEAR_TEXT = "[Tool result cleared to save context]"

COMPACT_PROMPT = """\
Your context is about to be compacted. Summarise the work so far so that you can continue
the task from the summary alone, without the conversation above. Reply with one JSON object
inside <compact_summary>...</compact_summary> and nothing else. Use exactly these keys:

- "generated_components": {"tools": [paths of tool modules written], "checkers": [paths of
  checker modules written], "samples": number of samples written or their paths}.
- "evaluation_progress": {"current_iteration": integer, "success_rate": number or null,
  "layer_status": {layer name: short status}}.
- "identified_issues": {"layer2_problems": [...], "layer3_problems": [...], "fix_attempts":
  [what was tried, and whether it worked]}.
- "pending_work": [the next concrete steps, in order, each one line].
- "key_paths": {"execution_output_dir": path or null, plus every other file or directory you
  will need again, by purpose}.

Rules: keep every identifier you will need verbatim (file paths, ids, function names, error
messages, command lines, numbers); prefer facts over narrative; do not invent results you have
not seen; say what failed and why, not only what succeeded. Full tool results stay archived
under state/execute/tool_results/<tool_use_id>.txt: where a detail is long, cite the archive
path instead of copying it. Keep the summary under 2,000 tokens. Do not call any tool.
"""

PROMPT_TOKENS = TextBlock(text=COMPACT_PROMPT).tokens

# ---------------------------------------------------------------------------- prompt cache


class PromptCache:
    """Anthropic's prompt cache for one run: entries are prefix hashes written at breakpoints."""

    def __init__(self, static: StaticPrefix, lookback: int = LOOKBACK_BLOCKS):
        self.entries: set[int] = set()
        self.lookback = lookback
        self.static_tokens = static.tokens
        self.static_blocks = (1 if static.system else 0) + len(static.tools)
        self.static_hash = hash(("static", static.system, json.dumps(static.tools, sort_keys=True)))

    def charge(
        self, messages: list[Message], breakpoints: Iterable[int], *, store: bool = True
    ) -> tuple[int, int, int, int]:
        """(total, read, write, plain) input tokens of one request. With `store=False` nothing
        is written (a one-off request): everything not read is plain input."""
        h, tok, blk = self.static_hash, self.static_tokens, self.static_blocks
        pos_h, pos_tok, pos_blk = [h], [tok], [blk]
        for m in messages:
            h = hash((h, m.canonical))
            tok += m.tokens
            blk += len(m.content)
            pos_h.append(h)
            pos_tok.append(tok)
            pos_blk.append(blk)
        bps = sorted({0, *(i + 1 for i in breakpoints if 0 <= i < len(messages))})
        read = 0
        for b in bps:
            p = b
            while p >= 0 and pos_blk[b] - pos_blk[p] <= self.lookback:
                if pos_tok[p] <= read:
                    break  # nothing longer can be found further back
                if pos_h[p] in self.entries:
                    read = pos_tok[p]
                    break
                p -= 1
        total = pos_tok[-1]
        if not store:
            return total, read, 0, total - read
        last = pos_tok[bps[-1]]
        write = max(0, last - read)
        plain = total - max(last, read)
        self.entries.update(pos_h[b] for b in bps)
        return total, read, write, plain


# ---------------------------------------------------------------------------- policies


@dataclass
class Stats:
    calls: int = 0
    input: int = 0  # main calls: total input tokens
    read: int = 0  # all calls (main + summary)
    write: int = 0
    plain: int = 0
    summary_input: int = 0
    # summary requests alone: with the engine's cache breakpoints, and with the system prompt's only
    summary_read: int = 0
    summary_write: int = 0
    summary_plain: int = 0
    summary_bare_read: int = 0
    summary_bare_plain: int = 0
    compactions: int = 0
    # facts (identifiers) of the latest opening at each compaction, and those visible in the request after it
    opening_facts: int = 0
    opening_visible: int = 0
    # todo recap notes appended to the log (context.todo_recap), and their tokens
    recap_calls: int = 0
    recap_tokens: int = 0
    summary_max: int = 0  # the largest summary of the run, in tokens (context.summary_cap)
    condensed: int = 0  # compactions whose summary was condensed
    needed: int = 0
    visible: int = 0
    reachable: int = 0
    invalid: int = 0  # requests that break the request protocol (context.protocol; should stay 0)
    series: list[int] = field(default_factory=list)
    compaction_calls: list[int] = field(default_factory=list)

    def add(self, total: int, read: int, write: int, plain: int, *, main: bool = True) -> None:
        self.read += read
        self.write += write
        self.plain += plain
        if main:
            self.calls += 1
            self.input += total
            self.series.append(total)
        else:
            self.summary_input += total

    def add_summary(self, cached: tuple[int, int, int, int], bare: tuple[int, int, int, int], prompt: int) -> None:
        """A summary request: its context charged with the engine's breakpoints (`cached`, what is paid) and
        with the system prompt's only (`bare`); the compact prompt after it is plain input either way."""
        total, read, write, plain = cached
        self.add(total + prompt, read, write, plain + prompt, main=False)
        self.summary_read += read
        self.summary_write += write
        self.summary_plain += plain + prompt
        self.summary_bare_read += bare[1]
        self.summary_bare_plain += bare[3] + prompt


def _placeholder_results(view: list[Message], keep: int, text_for, cache: dict) -> tuple[list[Message], int]:
    """The view with every tool result but the last `keep` replaced by a placeholder,
    and the index of the last message changed (-1 if none)."""
    out = list(view)
    seen, last_masked = 0, -1
    for i in range(len(view) - 1, -1, -1):
        m = view[i]
        n = len(m.tool_results) if m.role == "user" else 0
        if not n:
            continue
        masked = max(0, min(n, n - (keep - seen)))  # the first `masked` results of this message
        seen += n
        if masked:
            key = (id(m), masked)
            hit = cache.get(key)
            if hit is None:
                blocks, k = [], 0
                for b in m.content:
                    if isinstance(b, ToolResultBlock) and k < masked:
                        k += 1
                        b = ToolResultBlock(tool_use_id=b.tool_use_id, content=text_for(b), is_error=b.is_error)
                    blocks.append(b)
                hit = cache[key] = (m, Message(role="user", content=blocks))
            out[i] = hit[1]
            last_masked = max(last_masked, i)
    return out, last_masked


def _lines(b: ToolResultBlock) -> int:
    t = b.text
    return t.count("\n") + (1 if t and not t.endswith("\n") else 0)


class NonePolicy:
    label = "(a) none"

    def __init__(self, history: History, static: StaticPrefix):
        self.history = history

    def request(self):
        view = self.history.view
        return list(view), [len(view) - 1], []


class MaskPolicy:
    """(b): SWE-agent-style masking every step, one breakpoint on the last message.
    With `prefix_breakpoint`, (b'): a second breakpoint on the last masked message,
    so the masked prefix is read from the cache (the lead's "mask every step" reference)."""

    def __init__(self, history: History, static: StaticPrefix, prefix_breakpoint: bool = False):
        self.history = history
        self.prefix_breakpoint = prefix_breakpoint
        self._cache: dict = {}

    def request(self):
        msgs, last_masked = _placeholder_results(
            self.history.view, MASK_KEEP, lambda b: MASK_TEXT.format(n=_lines(b)), self._cache
        )
        bps = [last_masked, len(msgs) - 1] if self.prefix_breakpoint and last_masked >= 0 else [len(msgs) - 1]
        return msgs, bps, []


class ClearPolicy:
    label = "(c) clear_tool_uses"

    def __init__(self, history: History, static: StaticPrefix):
        self.history = history
        self.static_tokens = static.tokens
        self._cache: dict = {}

    def request(self):
        view = self.history.view
        if self.static_tokens + self.history.tokens() > CLEAR_TRIGGER:
            view, _ = _placeholder_results(view, CLEAR_KEEP, lambda b: CLEAR_TEXT, self._cache)
        else:
            view = list(view)
        return view, [len(view) - 1], []


class BatonPolicy:
    def __init__(self, history: History, static: StaticPrefix, batch: int, start: int, **overrides: Any):
        self.plan = recap_of(SYNTHETIC_PLAN) if overrides.pop("_plan", False) else None
        rates = overrides.pop("_rates", None)  # the payback rule's cache ratios (None: the engine's default)
        settings = {"window": WINDOW, "threshold": THRESHOLD, "keep_last_steps": KEEP_STEPS, "batch": batch,
                    "start_tokens": start, "payback_calls": PAYBACK, **overrides}
        self.policy = Policy(**settings)
        # With the synthetic plan the policy keeps its own log: the recap is a message the step appends to
        # the agent's log (agents/step.py, context.todo_recap), so this policy's log differs from the run's.
        self.history = History(redact=False) if self.plan is not None else history
        self._steps_since_recap = 0
        self.assembler = Assembler(self.history, self.policy, agent=AGENT, static=static,
                                   **({"rates": rates} if rates else {}))
        self.event: CompactionEvent | None = None
        self.breaker = CircuitBreaker()
        self.opening_facts = self.opening_visible = 0
        self.recap_calls = self.recap_tokens = 0
        self.summary_max = self.condensed = 0
        self.summary_output = 0  # tokens of the summaries written (the replay_api_policies table prices them)
        self.calls_since_compaction = 0
        self.static = static
        self.body: dict[str, Any] = {}  # the Messages API body of the last call, as the agent sends it
        self.planned = False  # whether the engine chose to change the view at the last call
        self._compressed = 0  # steps compressed in batches at the last call

    def request(self):
        a = self.assembler.assemble(self.event)
        extra: list[SummaryRequest] = []
        self.calls_since_compaction += 1
        compressed = a.compressed_steps - a.trimmed_steps  # emergency trimming is not a planned change
        self.planned, self._compressed = compressed > self._compressed, compressed  # a batch left the window
        if self.assembler.should_compact(a, self.event) and self._compaction_can_help(a.estimated_input):
            self.planned = True
            self.calls_since_compaction = 0
            extra.append(summary_request(a, COMPACT_PROMPT))
            facts = self._opening_facts()
            self.event = compact(schema=ExecuteSummary, assembler=self.assembler, previous=self.event,
                                 prompt=COMPACT_PROMPT, call=None, breaker=self.breaker)
            a = self.assembler.assemble(self.event)
            self.summary_max = max(self.summary_max, summary_tokens(self.event.summary))
            self.summary_output += self.event.messages[-1].tokens
            self.condensed += self.event.condensed is not None
            shown = "\n".join(block_text(b) for m in a.messages for b in m.content)
            self.opening_facts += len(facts)
            self.opening_visible += sum(f in shown for f in facts)
            self._compressed = a.compressed_steps - a.trimmed_steps
        # The body as the agent sends it; a recap is a message of the log, where the step appended it.
        self.body = a.to_request(self.static, model=MODEL, max_tokens=MAX_TOKENS)
        return a.messages, a.breakpoints, extra

    def counts(self) -> dict[str, int]:
        return {"summary_output": self.summary_output}

    def observe(self, message: Message) -> None:
        """A recorded message joined the run's log. With the synthetic plan this policy keeps its own log and
        appends the plan's recap after a step's results once the plan has been out of view for
        ``recap_every_steps`` steps, as the step does (the recorded runs never call TodoWrite)."""
        if self.plan is None:
            return
        self.history.append(message)
        if message.role == "assistant":
            self._steps_since_recap += 1
        elif self._steps_since_recap >= self.policy.recap_every_steps:
            recap = Message(role="user", content=(TextBlock(text=self.plan),))
            self.history.append(recap)
            self.recap_calls += 1
            self.recap_tokens += recap.tokens
            self._steps_since_recap = 0

    def _compaction_can_help(self, tokens: int) -> bool:
        """As the agents' step decides (``Policy.may_compact_again``)."""
        left = None if self.event is None else self.event.tokens_after
        return self.policy.may_compact_again(left, self.calls_since_compaction - 1, tokens)

    def _opening_facts(self) -> set[str]:
        """Identifiers of the latest opening (the task, the user's latest request) when the context is compacted."""
        index = self.history.latest_opening(len(self.history.view))
        return identifiers({"text": own_text(self.history.view[index])}) if index is not None else set()


def baton_key(batch: int, start: int) -> str:
    return f"baton B={batch} S={start}"


def variants(dataset: str, default: tuple[int, int]) -> dict[str, tuple[int, int, dict[str, Any]]]:
    """Policies of the issue-9 tables: the default without the pinned opening, and the default at the
    LOWER_THRESHOLDS with and without it (key -> batch, start, other Policy settings)."""
    out = {f"{baton_key(*default)} no pin": (*default, NO_PIN),
           f"{baton_key(*default)} no recap": (*default, NO_RECAP),
           f"{baton_key(*default)} plan": (*default, WITH_PLAN)}
    out[f"{baton_key(*default)} no cap"] = (*default, NO_CAP)
    if dataset in LOWER_THRESHOLDS:
        lower = {"threshold": LOWER_THRESHOLDS[dataset]}
        out["lower"] = (*default, lower)
        out["lower no pin"] = (*default, {**lower, **NO_PIN})
        out["lower no cap"] = (*default, {**lower, **NO_CAP})
    return out


# ---------------------------------------------------------------------------- needed facts

_PATH = re.compile(r"(?:[\w.~@+-]*/)+[\w.@+-]+")
_FILE = re.compile(
    r"\b[\w-]+\.(?:py|pyi|js|mjs|ts|tsx|jsx|json|md|txt|ya?ml|toml|cfg|ini|sh|c|h|cc|cpp|hpp|rs|go|java|rb|"
    r"exs?|heex|eex|html|css|scss|sql|csv|lock|xml|rst|ipynb|log)\b"
)
_ID = re.compile(r"\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,}\b")
_TOOLU = re.compile(r"\btoolu_[A-Za-z0-9_]+")
_SNAKE_NUM = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*_\d+\b")
_NUM = re.compile(r"(?<![\w.])\d{4,}(?!\w)")
_QUOTED = re.compile(r"\"([^\"\n]{4,80})\"|'([^'\n]{4,80})'|`([^`\n]{4,80})`")
_EDGE = re.compile(r"[\w./]")  # a quoted identifier starts and ends with one of these
_REF = re.compile(r"state/[A-Za-z0-9_-]+/tool_results/[A-Za-z0-9_-]+\.txt")
_STOP = {
    "true", "false", "none", "null", "self", "this", "that", "with", "from", "import", "return", "print",
    "class", "def", "else", "elif", "pass", "main", "master", "head", "origin", "utf-8", "utf8", "string",
    "error", "value", "values", "data", "name", "type", "text", "json", "python", "python3", "bash", "echo",
    "test", "tests", "file", "files", "path", "line", "lines", "result", "output", "input", "list", "dict",
    "/dev/null", "/tmp", "/usr/bin/env", "dev/null", "usr/bin/env", "__init__.py", "setup.py", "n/a",
    "todo", "done", "pending", "completed", "in_progress", "http://", "https://",
}


def _scalars(value: Any, keys: bool = True) -> Iterable[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            if keys:
                yield str(k)
            yield from _scalars(v, keys)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _scalars(v, keys)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def identifiers(tool_input: dict[str, Any]) -> set[str]:
    """Identifier-like strings in a tool call's input (see the module docstring)."""
    found: set[str] = set()
    for s in _scalars(tool_input, keys=False):  # values only: keys are the tool's schema, not facts
        if 4 <= len(s) <= 80 and not any(c.isspace() for c in s) and any(c.isdigit() or c in "_/." for c in s):
            found.add(s)  # a whole short value: an id, a path, a date, a number
        for rx in (_PATH, _FILE, _ID, _TOOLU, _SNAKE_NUM, _NUM):
            found.update(rx.findall(s))
        if any(c.isspace() for c in s):
            for groups in _QUOTED.findall(s):
                q = next(g for g in groups if g)
                if _EDGE.match(q[0]) and _EDGE.match(q[-1]) and "\\" not in q and any(c.isalnum() for c in q):
                    found.add(q)
    return {
        f.rstrip(".,:;") for f in found
        if len(f.rstrip(".,:;")) >= 4 and f.lower() not in _STOP and any(c.isalnum() for c in f)
    }


def block_text(b: Any) -> str:
    if isinstance(b, TextBlock):
        return b.text
    if isinstance(b, ToolUseBlock):
        return "\n".join([b.name, *_scalars(b.input)])
    if isinstance(b, ToolResultBlock):
        return b.text
    if isinstance(b, ThinkingBlock):
        return b.thinking
    if isinstance(b, CompactionBlock):  # the API's summary (bench/replay_api_policies.py)
        return b.content or ""
    return ""


def needed_facts(system: str, msgs: list[Message]) -> tuple[dict[int, list[str]], dict[str, set[str]]]:
    """For each assistant message index: the identifiers its tool calls need that first
    appeared in an earlier tool result (one entry per tool call and identifier); and for each
    such identifier the archive refs of the results that contain it."""
    per_use: dict[int, list[set[str]]] = {}
    candidates: set[str] = set()
    for j, m in enumerate(msgs):
        if m.role == "assistant" and m.tool_uses:
            per_use[j] = [identifiers(u.input) for u in m.tool_uses]
            for ids in per_use[j]:
                candidates |= ids
    first: dict[str, tuple[int, str]] = {c: (-1, "system") for c in candidates if c in system}
    remaining = candidates - first.keys()
    for j, m in enumerate(msgs):
        if not remaining:
            break
        for b in m.content:
            text = block_text(b)
            if not text:
                continue
            kind = "tool_result" if isinstance(b, ToolResultBlock) else m.role
            hit = {c for c in remaining if c in text}
            for c in hit:
                first[c] = (j, kind)
            remaining -= hit
    from_results = {c for c, (j, kind) in first.items() if kind == "tool_result"}
    needed: dict[int, list[str]] = {}
    for j, uses in per_use.items():
        lst = [c for ids in uses for c in sorted(ids) if c in from_results and first[c][0] < j]
        if lst:
            needed[j] = lst
    wanted = {c for lst in needed.values() for c in lst}
    refs: dict[str, set[str]] = defaultdict(set)
    for m in msgs:
        for r in m.tool_results:
            text = r.text
            ref = archive_ref(AGENT, r.tool_use_id)
            for c in wanted:
                if c in text:
                    refs[c].add(ref)
    return needed, refs


class TextCache:
    """Searchable text of messages, computed once per message object."""

    def __init__(self):
        self._texts: dict[int, tuple[Message, str]] = {}

    def __call__(self, m: Message) -> str:
        hit = self._texts.get(id(m))
        if hit is None or hit[0] is not m:
            hit = self._texts[id(m)] = (m, "\n".join(block_text(b) for b in m.content))
        return hit[1]


# ---------------------------------------------------------------------------- one run


def replay_run(task: tuple) -> dict[str, Any]:
    """One run under every policy. `task`: data set, index, run, baton (B, S) configurations (the default
    first), cache lookback, and optionally True to replay only the A/B/C table's policies."""
    dataset, index, traj, configs, lookback, *only = task
    msgs = [parse_message(m) for m in traj["messages"]]
    static = StaticPrefix(system=traj.get("system") or "")
    history = History(redact=False)
    policies: dict[str, Any] = {} if only and only[0] else {
        "none": NonePolicy(history, static),
        # (b) gets the same breakpoint strategy baton uses (the end of its stable,
        # masked prefix and the last message): the fair comparison, and the one the
        # reference numbers (1.44x / 1.20x / 0.84x) were measured with.
        "mask": MaskPolicy(history, static, prefix_breakpoint=True),
        "mask_1bp": MaskPolicy(history, static),
        "clear": ClearPolicy(history, static),
    }
    if policies:
        for b, s in configs:
            policies[baton_key(b, s)] = BatonPolicy(history, static, b, s)
        for key, (b, s, overrides) in variants(dataset, configs[0]).items():
            policies[key] = BatonPolicy(history, static, b, s, **overrides)
    policies.update(api_policies(sys.modules[__name__], dataset, history, static, configs[0]))
    caches = {k: PromptCache(static, lookback) for k in policies}
    stats = {k: Stats() for k in policies}
    trackers = {k: p.tracker() if hasattr(p, "tracker") else PrefixTracker() for k, p in policies.items()}
    needed, refs = needed_facts(static.system, msgs)
    texts = TextCache()
    last_request: dict[str, list[Message]] = {}
    output_tokens = 0
    n_calls = 0

    for j, m in enumerate(msgs):
        if m.role == "assistant":
            output_tokens += m.tokens
            if history.pending_tool_ids:
                history.close_pending()  # an interrupted call: the engine's repair answers it
            if history.view and history.view[-1].role == "user":
                n_calls += 1
                for key, pol in policies.items():
                    req, bps, extra = pol.request()
                    cache, st = caches[key], stats[key]
                    for sreq in extra:
                        st.invalid += bool(problems(sreq))
                        context = list(sreq.context)
                        st.add_summary(cache.charge(context, sreq.breakpoints),
                                       cache.charge(context, [], store=False), PROMPT_TOKENS)
                        st.compactions += 1
                        st.compaction_calls.append(n_calls - 1)
                    st.invalid += bool(problems(req))
                    st.add(*cache.charge(req, bps))
                    last_request[key] = req
                    body, planned = wire(pol, req, static)
                    trackers[key].request(body, planned=planned)
                for tracker in trackers.values():
                    tracker.reply(m.api)
            if j in needed and last_request:
                for key, req in last_request.items():
                    _recall(stats[key], req, needed[j], refs, texts)
        history.append(m)
        for pol in policies.values():
            if isinstance(pol, BatonPolicy):
                pol.observe(m)
    for key, pol in policies.items():
        if isinstance(pol, BatonPolicy):
            stats[key].opening_facts, stats[key].opening_visible = pol.opening_facts, pol.opening_visible
            stats[key].recap_calls, stats[key].recap_tokens = pol.recap_calls, pol.recap_tokens
            stats[key].summary_max, stats[key].condensed = pol.summary_max, pol.condensed

    return {
        "dataset": dataset, "index": index, "id": traj.get("id", str(index)), "calls": n_calls,
        "output": output_tokens, "final_tokens": history.tokens() + static.tokens,
        "stats": {k: {**vars(v), **{f: getattr(trackers[k].stats, f) for f in PREFIX_FIELDS},
                      **(policies[k].counts() if hasattr(policies[k], "counts") else {})} for k, v in stats.items()},
    }


def wire(pol: Any, req: list[Message], static: StaticPrefix) -> tuple[dict[str, Any], bool]:
    """The Messages API body a policy sends at this call, and whether its view changed by plan there. baton's
    is its assembler's own (`Assembled.to_request`, the client's also where a server edits it); the baselines
    send their messages as they are."""
    if hasattr(pol, "body"):
        return pol.body, pol.planned
    return request_body(static, [m.api for m in req], model=MODEL, max_tokens=MAX_TOKENS), False


def _recall(st: Stats, req: list[Message], idents: list[str], refs: dict[str, set[str]], texts: TextCache) -> None:
    big = "\n".join(texts(m) for m in req)
    visible_refs: set[str] | None = None
    for c in idents:
        st.needed += 1
        if c in big:
            st.visible += 1
            continue
        if visible_refs is None:
            visible_refs = set(_REF.findall(big))
        if refs.get(c, set()) & visible_refs:
            st.reachable += 1


# ---------------------------------------------------------------------------- aggregation


def cost(s: dict[str, Any], output: int) -> float:
    inp = s["plain"] + WRITE_X * s["write"] + READ_X * s["read"]
    return PRICE_IN * inp + PRICE_OUT * (output + SUMMARY_OUTPUT * s["compactions"])


def aggregate(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """dataset -> policy key -> totals."""
    agg: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for r in results:
        for key, s in r["stats"].items():
            a = agg[r["dataset"]][key]
            for f in ("calls", "input", "read", "write", "plain", "summary_input", "compactions", "needed", "visible",
                      "reachable", "invalid", *SUMMARY_FIELDS, "opening_facts", "opening_visible", "recap_calls",
                      "recap_tokens", "condensed", *PREFIX_FIELDS):
                a[f] += s[f]
            a["summary_max"] = max(a["summary_max"], s["summary_max"])
            a["cost"] += cost(s, r["output"])
            a["runs"] += 1
    return agg


def pct(a: float, b: float) -> str:
    return f"{100 * a / b:.1f}" if b else "–"


def policy_rows(agg, order: list[tuple[str, str]]):
    header = ["data set", "policy", "calls", "mean input/call", "cache read share", "cost ($)",
              "x (a)", "x (b)", "compactions", "recall visible %", "reachable %", "total %"]
    rows = []
    for ds in sorted(agg):
        base_a, base_b = agg[ds]["none"]["cost"], agg[ds]["mask"]["cost"]
        for key, label in order:
            a = agg[ds][key]
            all_in = a["read"] + a["write"] + a["plain"]
            rows.append(
                [
                    ds,
                    label,
                    int(a["calls"]),
                    f"{a['input'] / max(a['calls'], 1):,.0f}",
                    pct(a["read"], all_in),
                    f"{a['cost']:.2f}",
                    f"{a['cost'] / base_a:.2f}",
                    f"{a['cost'] / base_b:.2f}",
                    int(a["compactions"]),
                    pct(a["visible"], a["needed"]),
                    pct(a["reachable"], a["needed"]),
                    pct(a["visible"] + a["reachable"], a["needed"]),
                ]
            )
    return header, rows


TARGETS_A = {"claude-code": 0.45, "tau-bench-airline": 1.00, "mini-swe-agent": 1.00}
TARGETS_B = {"claude-code": 0.70, "mini-swe-agent": 0.70, "tau-bench-airline": 0.85}
RECALL_TARGET = 95.0


def target_rows(agg, default_key: str, baton_keys: list[tuple[str, str]]):
    header = ["data set", "target", "measured", "met?"]
    rows = []
    for ds in sorted(agg):
        d, a, b = agg[ds][default_key], agg[ds]["none"], agg[ds]["mask"]
        if ds in TARGETS_A:
            r = d["cost"] / a["cost"]
            rows.append(
                [ds, f"(d) cost ≤ {TARGETS_A[ds]:.2f}x (a)", f"{r:.2f}x", "met" if r <= TARGETS_A[ds] else "**missed**"]
            )
        if ds in TARGETS_B:
            r = d["cost"] / b["cost"]
            rows.append(
                [ds, f"(d) cost ≤ {TARGETS_B[ds]:.2f}x (b)", f"{r:.2f}x", "met" if r <= TARGETS_B[ds] else "**missed**"]
            )
        for key, label in baton_keys:
            x = agg[ds][key]
            rec = 100 * (x["visible"] + x["reachable"]) / x["needed"] if x["needed"] else 100.0
            rows.append([ds, f"{label}: recall visible+reachable ≥ {RECALL_TARGET:.0f}%", f"{rec:.1f}%",
                         "met" if rec >= RECALL_TARGET else "**missed**"])
    return header, rows


def run_all(tasks: list, jobs: int) -> list[dict[str, Any]]:
    if jobs > 1:
        with Pool(jobs) as pool:
            results = list(pool.imap_unordered(replay_run, tasks, chunksize=1))
    else:
        results = [replay_run(t) for t in tasks]
    results.sort(key=lambda r: (r["dataset"], r["index"]))
    return results


def _recall_of(x) -> float:
    return 100 * (x["visible"] + x["reachable"]) / x["needed"] if x["needed"] else 100.0


def best_rows(agg):
    header = ["data set", "cheapest (any recall)", "cheapest with recall target", "x (a)", "x (b)", "recall %"]
    rows = []
    grid = [(b, s) for s in SWEEP_STARTS for b in SWEEP_BATCHES]
    for ds in sorted(agg):
        a, bb = agg[ds]["none"]["cost"], agg[ds]["mask"]["cost"]
        cheapest = min(grid, key=lambda c: agg[ds][baton_key(*c)]["cost"])
        ok = [c for c in grid if _recall_of(agg[ds][baton_key(*c)]) >= RECALL_TARGET]
        c = min(ok, key=lambda c: agg[ds][baton_key(*c)]["cost"]) if ok else None
        x = agg[ds][baton_key(*c)] if c else None
        rows.append([
            ds, f"B={cheapest[0]} S={cheapest[1]:,} ({agg[ds][baton_key(*cheapest)]['cost'] / a:.3f}x (a))",
            f"B={c[0]} S={c[1]:,}" if c else "none", f"{x['cost'] / a:.3f}" if x else "–",
            f"{x['cost'] / bb:.3f}" if x else "–", f"{_recall_of(x):.1f}" if x else "–",
        ])
    ok_all = [c for c in grid if all(_recall_of(agg[ds][baton_key(*c)]) >= RECALL_TARGET for ds in agg)]
    if ok_all:
        # the lowest worst ratio; on a tie (a data set no configuration changes), the lowest next-worst one
        c = min(ok_all, key=lambda c: sorted((round(agg[ds][baton_key(*c)]["cost"] / agg[ds]["none"]["cost"], 6)
                                             for ds in agg), reverse=True))
        ratios = ", ".join(f"{ds} {agg[ds][baton_key(*c)]['cost'] / agg[ds]['none']['cost']:.3f}" for ds in sorted(agg))
        rows.append(["all (min of max x (a))", "", f"B={c[0]} S={c[1]:,}", ratios, "", ""])
    return header, rows


def summary_cost(a, bare: bool = False) -> float:
    """Input cost of the summary requests alone ($): with the engine's breakpoints, or with the system's only."""
    if bare:
        return PRICE_IN * (a["summary_bare_plain"] + READ_X * a["summary_bare_read"])
    return PRICE_IN * (a["summary_plain"] + WRITE_X * a["summary_write"] + READ_X * a["summary_read"])


def variant_rows(default_key: str) -> list[tuple[str, str, str]]:
    """(label of the thresholds, pinned key, not-pinned key) of the issue-9 tables."""
    return [(f"default ({THRESHOLD:,})", default_key, f"{default_key} no pin"), ("lower", "lower", "lower no pin")]


def summary_cache_rows(agg, default_key: str):
    header = ["data set", "thresholds", "compactions", "summary input tokens", "cache read share: system only / "
              "engine's breakpoints", "input $: system only", "engine's breakpoints", "saving"]
    rows = []
    for ds in sorted(agg):
        for label, key, _ in variant_rows(default_key):
            a = agg[ds].get(key)
            if not a or not a["compactions"]:
                rows.append([ds, label, 0, "–", "–", "–", "–", "–"])
                continue
            bare, cached = summary_cost(a, bare=True), summary_cost(a)
            shares = f"{pct(a['summary_bare_read'], a['summary_input'])} / {pct(a['summary_read'], a['summary_input'])}"
            rows.append([ds, label, int(a["compactions"]), f"{a['summary_input']:,.0f}", shares, f"{bare:.3f}",
                         f"{cached:.3f}", f"{100 * (1 - cached / bare):.0f}%"])
    return header, rows


def pinned_opening_rows(agg, default_key: str):
    header = ["data set", "thresholds", "compactions (not pinned / pinned)", "opening facts", "visible after "
              "compaction: not pinned / pinned", "cost $: not pinned / pinned", "change", "needed-fact recall % "
              "(visible + reachable): not pinned / pinned"]
    rows = []
    for ds in sorted(agg):
        for label, key, off_key in variant_rows(default_key):
            on, off = agg[ds].get(key), agg[ds].get(off_key)
            if not on or not off:
                continue
            rows.append([
                ds, label, f"{int(off['compactions'])} / {int(on['compactions'])}",
                f"{int(off['opening_facts'])} / {int(on['opening_facts'])}",
                " / ".join(pct(x["opening_visible"], x["opening_facts"]) for x in (off, on)),
                f"{off['cost']:.3f} / {on['cost']:.3f}", f"{100 * (on['cost'] / off['cost'] - 1):+.2f}%",
                f"{_recall_of(off):.1f} / {_recall_of(on):.1f}",
            ])
    return header, rows


def recap_rows(agg, default_key: str):
    """The todo recap's cost and effect: policy (d) without it, as recorded (with the recap wherever the run
    kept a plan), and with a recap note of SYNTHETIC_PLAN every recap_every_steps steps."""
    header = ["data set", "recap", "recap notes appended / calls", "tokens per note", "mean input per call",
              "cost $ (without recap: change)", "needed-fact recall % (visible + reachable)"]
    rows = []
    for ds in sorted(agg):
        off = agg[ds].get(f"{default_key} no recap")
        plan = ("a 6-item plan, a note every 8 steps", f"{default_key} plan")
        for label, key in (("as recorded", default_key), plan):
            on = agg[ds].get(key)
            if not on or not off:
                continue
            per_call = on["recap_tokens"] / on["recap_calls"] if on["recap_calls"] else 0.0
            rows.append([ds, label, f"{int(on['recap_calls'])} of {int(on['calls'])}", f"{per_call:.0f}",
                         f"{on['input'] / max(1, on['calls']):,.0f}",
                         f"{on['cost']:.3f} ({off['cost']:.3f}: {100 * (on['cost'] / off['cost'] - 1):+.2f}%)",
                         f"{_recall_of(on):.1f} (without: {_recall_of(off):.1f})"])
    return header, rows


def thinking_rows(agg, order: list[tuple[str, str]], default_key: str):
    """Per policy: prefix breaks per 100 calls (planned / unplanned) and thinking blocks that stay valid
    (bench/prefix_stability.py), with baton's recap on, off and a plan's recap notes, and at the lower thresholds."""
    header = ["data set", "policy", "calls", "compactions", "prefix breaks per 100 calls: planned",
              "unplanned", "all", "thinking sent back valid % (valid / sends)", "produced blocks valid at the next "
              "call %"]
    extra = [(f"{default_key} no recap", "(d) recap off"),
             (f"{default_key} plan", "(d) a 6-item plan's recap note every 8 steps"),
             ("lower", "(d) at the lower thresholds")]
    rows = []
    for ds in sorted(agg):
        for key, label in [*order, *extra]:
            a = agg[ds].get(key)
            if not a:
                continue
            breaks = (a["breaks_planned"], a["breaks_unplanned"], a["breaks_planned"] + a["breaks_unplanned"])
            rows.append([ds, label, int(a["calls"]), int(a["compactions"]),
                         *(f"{100 * n / a['calls']:.1f}" if a["calls"] else "–" for n in breaks),
                         f"{pct(a['valid_sends'], a['sends'])} ({int(a['valid_sends']):,} / {int(a['sends']):,})",
                         pct(a["valid_next"], a["produced"])])
    return header, rows


def cap_rows(agg, default_key: str):
    """The summary cap's effect: each compacting policy against the same policy without the cap."""
    header = ["data set", "thresholds", "compactions: without / with cap", "condensed", "largest summary "
              "(tokens): without / with", "cap (tokens)", "cost $: without / with", "change",
              "needed-fact recall %: without / with"]
    rows = []
    for ds in sorted(agg):
        pairs = [("default", default_key, f"{default_key} no cap"), ("lower", "lower", "lower no cap")]
        for label, key, off_key in pairs:
            on, off = agg[ds].get(key), agg[ds].get(off_key)
            if not on or not off:
                continue
            threshold = LOWER_THRESHOLDS.get(ds, THRESHOLD) if label == "lower" else THRESHOLD
            cap = cap_tokens(Policy().summary_cap_share, threshold)
            rows.append([ds, f"{label} ({threshold:,})", f"{int(off['compactions'])} / {int(on['compactions'])}",
                         int(on["condensed"]), f"{int(off['summary_max']):,} / {int(on['summary_max']):,}",
                         f"{cap:,}", f"{off['cost']:.3f} / {on['cost']:.3f}",
                         f"{100 * (on['cost'] / off['cost'] - 1):+.2f}%",
                         f"{_recall_of(off):.1f} / {_recall_of(on):.1f}"])
    return header, rows


def lookback_rows(agg, unl, start: int, lookback: int):
    header = ["data set"] + [f"B={b}: {lookback} blocks / unlimited" for b in E_BATCHES]
    rows = []
    for ds in sorted(agg):
        a = agg[ds]["none"]["cost"]
        rows.append(
            [ds]
            + [
                f"{agg[ds][baton_key(b, start)]['cost'] / a:.3f} / {unl[ds][baton_key(b, start)]['cost'] / a:.3f}"
                for b in E_BATCHES
            ]
        )
    return header, rows


def sweep_rows(agg):
    header = ["data set", "start S"] + [f"B={b}" for b in SWEEP_BATCHES] + ["recall (B=1..10)"]
    rows = []
    for ds in sorted(agg):
        base_a, base_b = agg[ds]["none"]["cost"], agg[ds]["mask"]["cost"]
        for s in SWEEP_STARTS:
            row, recalls = [ds, f"{s:,}"], []
            for b in SWEEP_BATCHES:
                x = agg[ds][baton_key(b, s)]
                row.append(f"{x['cost'] / base_a:.3f} / {x['cost'] / base_b:.3f}")
                recalls.append(pct(x["visible"] + x["reachable"], x["needed"]))
            row.append(" / ".join(recalls))
            rows.append(row)
    return header, rows


# ---------------------------------------------------------------------------- charts


def chart(dataset: str, run: dict[str, Any], order: list[tuple[str, str]], default_key: str, img_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12.5, 5.5), dpi=110)
    # Policies whose requests are the same size at every call ((b) and (b'), often a baton B and the
    # default) would hide one another: each distinct series is drawn once, labelled with all its policies.
    series: dict[tuple, list[tuple[str, str]]] = {}
    for key, label in order:
        s = run["stats"][key]
        series.setdefault((tuple(s["series"]), tuple(s["compaction_calls"])), []).append((key, label))
    for (sizes, compaction_calls), policies in series.items():
        keys = [key for key, _ in policies]
        base = any(key in ("none", "mask", "mask_1bp", "clear") or key == default_key for key in keys)
        line, = ax.plot(range(len(sizes)), sizes, label=" = ".join(label for _, label in policies),
                        lw=1.8 if base else 1.0, alpha=1.0 if base else 0.75, ls="-" if base else "--")
        if compaction_calls:  # a big marker under a small one: two policies compacting at one call both show
            ax.scatter(compaction_calls, [sizes[x] for x in compaction_calls], marker="v", s=110 if base else 40,
                       color=line.get_color(), zorder=5 if base else 6, edgecolors="black", linewidths=0.5)
    # The threshold is on baton's estimate (Claude's count, ~1.19x cl100k on the claude-code runs); the
    # axis is raw cl100k, so the line is drawn where the estimate reaches it.
    ax.axhline(THRESHOLD / CLAUDE_PER_CL100K, color="black", lw=0.8, ls=":",
               label=f"threshold: estimate {THRESHOLD:,} (≈ {THRESHOLD / CLAUDE_PER_CL100K:,.0f} raw)")
    ax.set_title(f"{dataset}: context size per call, largest run ({run['id']}); ▼ = compaction\n"
                 "policies sending requests of the same size at every call share one line",
                 fontsize=10)
    ax.set_xlabel("call")
    ax.set_ylabel("input tokens per call (raw cl100k, system included)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # outside: hides no data
    fig.tight_layout()
    img_dir.mkdir(parents=True, exist_ok=True)
    path = img_dir / f"context_size_{dataset}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory of *.jsonl.gz trajectories")
    ap.add_argument(
        "--out", type=Path, default=None,
        help="also write the results: this markdown file's context-replay section (e.g. docs/benchmarks.md) and the "
        "charts under img/ beside it; without it nothing is written",
    )
    ap.add_argument("--charts", type=Path, default=None,
                    help="write only the charts, into this folder (e.g. docs/img), and no markdown")
    ap.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        help=f"B of the default baton policy (d) (Policy default {DEFAULT_BATCH})",
    )
    ap.add_argument(
        "--start", type=int, default=DEFAULT_START, help=f"start size S of (d) and (e) (Policy default {DEFAULT_START})"
    )
    ap.add_argument(
        "--payback", type=int, default=PAYBACK, help="payback_calls of every baton policy (default: the Policy default)"
    )
    ap.add_argument("--sweep", action="store_true", help="also sweep S x B and report cost ratios")
    ap.add_argument("--api-table", action="store_true",
                    help="replay and print only the A/B/C table (baton's engine vs the API's compaction and context "
                         "editing); with --out, write only its section")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--limit", type=int, default=0, help="replay at most this many runs per data set (0 = all)")
    ap.add_argument(
        "--lookback",
        type=int,
        default=LOOKBACK_BLOCKS,
        help="cache lookback in content blocks (diagnostic; Anthropic: 20)",
    )
    args = ap.parse_args(argv)
    globals()["PAYBACK"] = args.payback  # read by BatonPolicy in the worker processes (fork)
    started = time.perf_counter()

    default = (args.batch, args.start)
    configs = [default] + [(b, args.start) for b in E_BATCHES]
    if args.sweep:
        configs += [(b, s) for s in SWEEP_STARTS for b in SWEEP_BATCHES]
    configs = list(dict.fromkeys(configs))
    default_key = baton_key(*default)
    order = [("none", "(a) none"), ("mask", f"(b) mask-{MASK_KEEP}"),
             ("mask_1bp", f"(b') mask-{MASK_KEEP}, one breakpoint only"), ("clear", "(c) clear_tool_uses"),
             (default_key, f"(d) baton default B={args.batch} S={args.start:,}")]
    order += [(baton_key(b, args.start), f"(e) baton B={b}") for b in E_BATCHES if (b, args.start) != default]

    files = trajectory_files(require_data(args.data))
    if not files:
        print(f"no *.jsonl.gz under {args.data}", file=sys.stderr)
        return 1
    tasks = []
    for f in files:
        for i, traj in enumerate(iter_runs(f)):
            if args.limit and i >= args.limit:
                break
            tasks.append((dataset_name(f), i, traj, configs, args.lookback))
    tasks.sort(key=lambda t: -len(json.dumps(t[2]["messages"])))  # longest first: better balance
    if args.api_table:
        results = run_all([(*t, True) for t in tasks], args.jobs)
        elapsed, api_tables = time.perf_counter() - started, api_table(results, sys.modules[__name__])
        print(*api_tables, sep="\n\n")
        print(f"\n{len(results)} runs, {sum(r['calls'] for r in results)} calls, {elapsed:.0f} s on {args.jobs} "
              "process(es)")
        if args.out is None:
            print("nothing written; pass --out docs/benchmarks.md to record the table")
            return 0
        write_api_section(args.out, api_tables, results, elapsed, _command(argv), args.jobs)
        return 0
    results = run_all(tasks, args.jobs)
    agg = aggregate(results)
    lookback_agg = None
    if args.sweep and args.lookback < 10**9:
        # Diagnostic: the same B values with an unlimited lookback, to show what the 20-block rule costs.
        unlimited = [(d, i, t, [(b, args.start) for b in E_BATCHES], 10**9) for d, i, t, _, _ in tasks]
        lookback_agg = aggregate(run_all(unlimited, args.jobs))
    elapsed = time.perf_counter() - started

    header, rows = policy_rows(agg, order)
    baton_keys = [(k, lbl.split(" B=")[0] if k == default_key else lbl) for k, lbl in order[4:]]
    t_header, t_rows = target_rows(agg, default_key, baton_keys)
    table = md_table(header, rows, "ll" + "r" * (len(header) - 2))
    targets = md_table(t_header, t_rows, "llrl")
    summaries = md_table(*summary_cache_rows(agg, default_key), "llrrrrrr")
    pinning = md_table(*pinned_opening_rows(agg, default_key), "llrrrrrr")
    recaps = md_table(*recap_rows(agg, default_key), "lrrrrrr")
    caps = md_table(*cap_rows(agg, default_key), "llrrrrrrr")
    thinking = md_table(*thinking_rows(agg, order, default_key), "ll" + "r" * 7)
    print(table)
    print()
    print(thinking)
    print()
    print(targets)
    print()
    print(summaries)
    print()
    print(pinning)
    sweep = best = lookback = None
    if args.sweep:
        s_header, s_rows = sweep_rows(agg)
        sweep = md_table(s_header, s_rows, "lr" + "r" * (len(s_header) - 2))
        print()
        print("Sweep: cost of baton (S, B) as a ratio to (a) none / to (b) mask-5")
        print(sweep)
        best = md_table(*best_rows(agg), "lllrrr")
        print()
        print(best)
        if lookback_agg is not None:
            lookback = md_table(
                *lookback_rows(agg, lookback_agg, args.start, args.lookback), "l" + "r" * len(E_BATCHES)
            )
            print()
            print(lookback)

    images = []
    by_ds: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        by_ds[r["dataset"]].append(r)
    img_dir = args.charts or (args.out.resolve().parent / "img" if args.out else None)
    for ds, runs in sorted(by_ds.items()):
        longest = max(runs, key=lambda r: (r["final_tokens"], r["calls"]))
        if img_dir is not None:
            images.append((ds, chart(ds, longest, order, default_key, img_dir)))
    api_tables = api_table(results, sys.modules[__name__])
    print("", *api_tables, sep="\n\n")
    print(f"\n{len(results)} runs, {sum(r['calls'] for r in results)} calls, {len(configs)} baton configurations, "
          f"{elapsed:.0f} s on {args.jobs} process(es)")

    if args.out is None:
        print("\nnothing written" + (f" but {len(images)} chart(s) under {img_dir}" if images else "")
              + "; pass --out docs/benchmarks.md to record these results")
        return 0
    command = _command(argv)
    doc = [
        "## Context replay",
        "",
        f"Command: `{command}` ({len(results)} runs, {sum(r['calls'] for r in results)} calls, "
        f"{elapsed:.0f} s on {args.jobs} process(es)).",
        "",
        "Each recorded assistant message is one call whose context is the (repaired) log before it. "
        "Requests are priced with a model of Anthropic's prompt cache: prefix order tools, system, messages; "
        "every breakpoint writes an entry; a request reads the longest cached prefix found at one of its "
        f"breakpoints or up to {LOOKBACK_BLOCKS} content blocks before one; tokens from the read point to the "
        "last breakpoint are writes (1.25x), after it plain input (1x), reads 0.1x; no expiry. "
        "Sonnet 4.5 prices ($3/MTok input, $15/MTok output; output = the recorded assistant messages, the same "
        "for every policy). Tokens are raw cl100k counts. Execute thresholds scaled down 10x: window 100,000, "
        f"compaction at an estimated {THRESHOLD:,} (≈ {THRESHOLD / CLAUDE_PER_CL100K:,.0f} raw), "
        f"clear_tool_uses trigger {CLEAR_TRIGGER:,}, keep {CLEAR_KEEP}. Policies: (a) the full log; "
        "(b) SWE-agent-style masking, every step, "
        f"of all but the last {MASK_KEEP} tool results (`{MASK_TEXT.format(n='N')}`); (c) Anthropic's "
        "`clear_tool_uses` defaults whenever the full request passes the trigger; (d) baton's `Assembler` with "
        f"N={KEEP_STEPS}, B={args.batch}, start size S={args.start:,}, compacting (deterministic fallback summary, "
        f"`call=None`) when `Assembler.should_compact` says so (estimate over the threshold and something new to "
        f"cover) and, as the agents' step decides (`agents/step.py`), not within N calls of a compaction that left "
        f"the context over the threshold; after a summary the latest opening is pinned (`opening_cap_chars` "
        f"10,000); the summary call is charged as its input (the step's messages with the engine's cache "
        f"breakpoints, `context.compaction.summary_breakpoints`, plus the compact prompt) "
        f"plus {SUMMARY_OUTPUT:,} output tokens, payback {PAYBACK} calls; (e) baton with other B. "
        "Breakpoints: (a) and (c) one on the last message (as Claude Code does); (b) one at the end of its masked "
        "prefix and one on the last message, the same strategy baton uses and the one the issue's reference numbers "
        "were measured with; (b') only the last message, shown to make the point that per-step masking without a "
        "prefix breakpoint misses the cache every step; baton marks `Assembled.breakpoints` (previous batch end, "
        "stable end, last message).",
        "",
        "Recall: for each tool call, the identifiers in its input (paths, ids, 4+-digit numbers, quoted strings, "
        "short id-like values) that first appeared in an earlier tool result; *visible* = the string occurs in "
        "the request of that call; *reachable* = not visible, but an archive reference "
        f"(`state/{AGENT}/tool_results/<tool_use_id>.txt`) visible in the request names a full result containing it.",
        "",
        "Columns: *mean input/call* = request size (tokens, system included); *cache read share* = cache-read "
        "tokens / all input tokens (summary calls included); *x (a)*, *x (b)* = cost ratio to (a) and (b).",
        "",
        table,
        "",
        "### Thinking and the prefix",
        "",
        "Claude 5.5 binds each thinking block to its prefix (system, tools and every message before it, "
        "`cache_control` aside): a block sent back after anything before it changed fails the prefix check "
        "(issue 22). Measured on the request bodies each policy sends (`bench/prefix_stability.py`; baton's "
        "is `Assembled.to_request`, the todo recap wherever the assembler puts it; the summary requests "
        "are not counted). *Prefix breaks*: calls whose messages "
        "do not start with the previous request's messages plus the recorded reply, exactly (canonical JSON, "
        "`bench/request_prefix.py`); the first call of a run is none. *Planned*: baton's calls where a batch left the "
        "verbatim window compressed or the context was compacted; every other break (masking, clearing, a "
        "per-call recap, a round folded to its opening and answer, emergency trimming) is unplanned. "
        "Thinking: **the recorded runs hold no thinking blocks, so each reply is assumed to have carried "
        "one at its start**, bound to the request it answered. A block is *sent back* at a later call while "
        "its reply is still in the request (a compaction removes it), and *sent back valid* when the "
        "request's prefix before the reply is identical to that of the call that produced it; a change "
        "invalidates only the blocks after it that were produced before it. *Valid at the next call*: the "
        "share of blocks still valid at the call right after the one that produced them. The recorded runs "
        "never call TodoWrite, so baton's recap is absent from them (*recap off* is the same policy with "
        "`todo_recap=False`); *a 6-item plan's recap note every 8 steps* appends the recap of a typical plan "
        "to the log after a step's results, as the step does (see The todo recap below).",
        "",
        thinking,
        "",
        "### Targets",
        "",
        targets,
        "",
        "### Cached summary requests",
        "",
        "A compaction's summary request is the step's assembled messages plus the compact prompt. Its input "
        "(the compact prompt included; output aside), priced with the same cache model, when it marks only the "
        "system prompt (a request built from the messages alone, as before issue 9) and when it carries the engine's "
        "breakpoints (`context.compaction.summary_breakpoints`: where the last step request had them, so the "
        "shared prefix is read at 0.1x; nothing new is written). *default*: policy (d); *lower*: (d) compacting at "
        + ", ".join(f"{ds} {t:,}" for ds, t in LOWER_THRESHOLDS.items())
        + " (about a third to a half of the longer runs), where every data set compacts.",
        "",
        summaries,
        "",
        "### The pinned opening",
        "",
        "After a compaction whose kept steps start mid-round, baton pins the latest opening (the task, a "
        "handoff payload, a human's feedback: the latest user message with text of its own) after the summary, "
        "cut to `opening_cap_chars` (10,000). *opening facts*: the identifiers (as for recall above) of the latest "
        "opening at each compaction; *visible after compaction*: the share of them in the first request after it. "
        "*not pinned* is the same policy with `opening_cap_chars=0` (the request before issue 9). *cost* is the "
        "whole replay (calls and summaries); *needed-fact recall* as in the main table.",
        "",
        pinning,
        "",
        "### The todo recap",
        "",
        "baton brings the agent's current TodoWrite list back into view (`context.todo_recap`: open items "
        "first, a line each, at most 12, then the count of completed ones) as a new message appended to the log "
        "after a step's results, once the plan has been out of view for `recap_every_steps` (8) steps: never an "
        "edit of an earlier message, so the prefix and the thinking after it stay valid. None of the recorded runs "
        "calls TodoWrite, so *as recorded* the recap never appears and costs nothing; *a 6-item plan* prices the "
        "same replay with the recap of a typical plan (two items done, one in progress, three to do) appended "
        "every 8 steps. *cost* is the whole replay of policy (d); the change is against the same policy without "
        "a recap; *needed-fact recall* as in the main table.",
        "",
        recaps,
        "",
        "### The summary cap",
        "",
        "A compaction summarises the previous summary plus the new steps, so a summary can grow with every "
        "compaction. baton asks for a condensed summary once the previous one passes "
        "`summary_cap_share` (15%) of the threshold, and condenses one still over twice that itself "
        "(`context.summary_cap`; key paths are never dropped). The replay's summaries are the deterministic "
        "fallback (no model is called), which carries only the key paths forward, so this measures the cap's "
        "cost where it acts on these runs; tests/test_summary_cap.py checks 20 consecutive compactions with a "
        "summariser that accretes. *condensed*: compactions the cap acted on.",
        "",
        caps,
        "",
    ]
    if sweep:
        doc += [
            "### Sweep of start size S and batch B",
            "",
            "Cost of baton (N=5) as a ratio to (a) none / to (b) mask-5, per data set (lower is better).",
            "",
            sweep,
            "",
            "Cheapest configuration per data set, with and without the recall target "
            f"(visible + reachable ≥ {RECALL_TARGET:.0f}%), and the single configuration with the lowest worst-case "
            "ratio to (a) over the data sets among those meeting the recall target everywhere:",
            "",
            best,
            "",
        ]
        if lookback:
            doc += [
                f"Cost of the 20-block lookback: baton (S={args.start:,}) cost ratio to (a) with Anthropic's "
                "20-block lookback vs an unlimited one (a diagnostic: with unlimited lookback, a shift of the stable "
                "prefix by more than 20 blocks would still find the previous entry).",
                "",
                lookback,
                "",
            ]
    doc += ["### Context size over calls (largest run of each data set)", ""]
    for ds, path in images:
        rel = os.path.relpath(path, args.out.resolve().parent)
        doc += [f"![context size per call, {ds}]({rel})", ""]
    write_section(args.out, "context-replay", "\n".join(doc))
    print(f"wrote {args.out} and {len(images)} chart(s) under {img_dir}")
    write_api_section(args.out, api_tables, results, elapsed, command, args.jobs)
    return 0


def _command(argv: list[str] | None) -> str:
    args = argv if argv is not None else sys.argv[1:]
    return "python bench/context_replay.py" + ("" if not args else " " + " ".join(shlex.quote(a) for a in args))


def write_api_section(doc: Path, api_tables: tuple[str, str], results: list[dict[str, Any]], elapsed: float,
                      command: str, jobs: int) -> None:
    """The A/B/C table's own section of `doc` (bench/replay_api_policies.py)."""
    calls = sum(r["calls"] for r in results)
    section = api_section(*api_tables, command, len(results), calls, elapsed, jobs, sys.modules[__name__])
    write_section(doc, "context-replay-api", section)
    print(f"wrote the A/B/C section of {doc}")


if __name__ == "__main__":
    raise SystemExit(main())

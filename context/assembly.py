"""Assembling the request for one model call.

The request is derived from the log view and the latest compaction event; it
is never stored. Layers, in order:

1. system prompt and tools (static; carried by `StaticPrefix`)
2. the latest compaction summary: [user: compact prompt, assistant: summary], then, when
   the kept steps start mid-round, that round's opening message (pinned, capped) and the bridge
3. earlier rounds since that point: opening user message + final assistant message
4. current round, steps older than the verbatim window: tool results compressed
5. the last steps verbatim (results over the size cap cut to head + tail)

Work per call is proportional to what is sent, not to the log: token counts
are cached on blocks, compressed results are cached by view index, and the
stable prefix (layers 2-4) is memoised until it changes, which with
hysteresis B happens only every B steps.

Two strategies plug in, each chosen by name in `Policy` (``context.strategies``):
the result compressor behind layers 4 and 5 (`ResultCompressor`) and the
compactor that decides when to compact and produces the event (`Compactor`).
Layers 3-5 stay together here: which batch is compressed (the payback rule)
and the memoised prefix both decide what the prompt cache can reuse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from context.cache_rates import CacheRates
from context.compaction_event import CompactionEvent, ViewSpan
from context.compression import archive_ref, log_ref
from context.estimator import TokenEstimator
from context.history import NOTE_PREFIX, History, own_text
from context.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from context.policy import Policy
from context.prefix import PrefixChain, static_digest
from context.reminders import split_reminders, takes_system_messages
from context.strategies import COMPACTORS, COMPRESSORS, instantiate
from context.text import head_tail
from context.tokens import count_text

EPHEMERAL = {"type": "ephemeral"}  # the 5-minute TTL, the API's default
ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}
COMPACT_BETA = "compact-2026-09-04"  # on-demand compaction: the request that asks and every one carrying a block

BRIDGE = (
    f"{NOTE_PREFIX} The conversation above was compacted: the summary stands for everything "
    "before this point. The most recent steps follow verbatim. Continue the task."
)
# The opening of the round the kept steps belong to (the brief, a handoff payload, a human's feedback):
# the summary alone would speak for the task, so it is repeated before the bridge.
PINNED_OPENING = NOTE_PREFIX + (
    " This round's opening message, kept through the compaction:\n<round_opening>\n{text}\n</round_opening>"
)
OPENING_CUT = "\n(cut to {cap:,} characters; the whole message is {ref})"


class TokenEstimate(Protocol):
    def estimate_raw(self, raw_tokens: int, n_messages: int, n_blocks: int) -> int: ...


class ResultCompressor(Protocol):
    """Layers 4 and 5: how older tool results and calls shrink, and how a big verbatim result is capped.

    What it returns sits in the prompt-cache prefix: the same input must always
    give byte-identical blocks. `ref` is where the full result is archived.
    """

    def compress_result(
        self, call: ToolUseBlock | None, result: ToolResultBlock, ref: str, *, read_lines: int
    ) -> ToolResultBlock: ...

    def cap_result(
        self, result: ToolResultBlock, ref: str, *, cap_chars: int, head: int, tail: int
    ) -> ToolResultBlock: ...

    def compress_call(self, call: ToolUseBlock) -> ToolUseBlock: ...

    # False: the client sends its history unchanged and append-only (no older step is compressed, no earlier
    # round cut to its ends); the server does the shrinking (context editing, ``context.api_editing``).
    client_side: bool

    def request_fields(self, assembler: Assembler, assembled: Assembled) -> dict[str, Any]: ...

    def betas(self) -> list[str]: ...


class Compactor(Protocol):
    """When the context is compacted, the event a compaction produces, and what it adds to each request."""

    def should_compact(self, assembler: Assembler, assembled: Assembled, event: CompactionEvent | None) -> bool: ...

    def compact(self, assembler: Assembler, previous: CompactionEvent | None, **inputs: Any) -> CompactionEvent: ...

    def request_fields(self, event: CompactionEvent | None) -> dict[str, Any]: ...


class StaticPrefix(BaseModel):
    """System prompt and tool definitions: byte-identical on every call."""

    model_config = ConfigDict(frozen=True)
    system: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    # Never sent: part of the prefix chain's start, so raising it leaves out every thinking block stamped
    # before (after the API refused one, context.prefix); the blocks produced after are stamped with it.
    thinking_epoch: int = 0

    @cached_property
    def tokens(self) -> int:
        return count_text(self.system) + count_text(json.dumps(self.tools, sort_keys=True))

    @cached_property
    def digest(self) -> str:
        """Where the prefix chain of every request starts (``context.prefix``)."""
        return static_digest(self.system, self.tools, self.thinking_epoch)


@dataclass
class Assembled:
    messages: list[Message]
    # Indices of messages whose last block gets cache_control: the end of the
    # previous stable prefix (so a batch move still reads the cache written before
    # it, whatever the 20-block lookback), the end of this stable prefix, the last message.
    breakpoints: list[int]
    layers: dict[str, int]  # raw tokens per layer
    estimated_input: int  # calibrated, system and tools included
    compressed_steps: int
    verbatim_steps: int
    trimmed_steps: int = 0  # steps emergency-trimmed to fit the window
    managed: bool = True  # False while the context is below the start size
    request_fields: dict[str, Any] = field(default_factory=dict)  # what the compactor adds to the request
    # The prefix chain after the last message (``context.prefix``): a reply is bound to it, and it says
    # how many thinking blocks this request sends back and leaves out.
    chain: PrefixChain | None = None
    # What decides the layout of layers 2-4 (compaction, batches, rounds): when it differs from the
    # previous request's, the view changed where the engine chose to (a planned break of the prefix).
    plan: str = ""
    betas: list[str] = field(default_factory=list)  # beta headers the strategies' fields and blocks need
    # What the emergency's last resorts did to fit the window ("thinking left out", "the newest steps
    # compressed"), "" when none was needed; the step says so once.
    squeezed: str = ""

    @property
    def raw_tokens(self) -> int:
        return sum(self.layers.values())

    @property
    def scale(self) -> float:
        """The API's tokens per raw token of this request (the estimator's calibration), to count a part of it."""
        return self.estimated_input / max(self.raw_tokens, 1)

    def to_request(self, static: StaticPrefix, *, model: str, max_tokens: int, ttl: str = "5m",
                   **extra: Any) -> dict[str, Any]:
        """The Messages API body with cache breakpoints (4 at most, as the API allows).

        The prefix order is tools, system, messages, so a breakpoint on the system
        prompt caches the tools too; the tool list gets its own only when there is
        no system prompt. That leaves three for messages (see `Assembled.breakpoints`). baton's reminders
        go out as system messages when `model` takes them (``context.reminders``). `ttl` "1h" marks every
        breakpoint for an hour (``context.cache_ttl`` decides): the API wants 1-hour entries before 5-minute ones.
        """
        marks = set(self.breakpoints)
        messages = [with_cache_control(m, ttl=ttl) if i in marks else m.api for i, m in enumerate(self.messages)]
        if takes_system_messages(model):
            messages = split_reminders(self.messages, messages)
        body = request_body(static, messages, model=model, max_tokens=max_tokens, ttl=ttl)
        return body | self.request_fields | extra


def cache_marker(ttl: str = "5m") -> dict[str, Any]:
    """A fresh cache_control value (a caller may edit its body): the default 5 minutes, or one hour."""
    return dict(ONE_HOUR if ttl == "1h" else EPHEMERAL)


def with_cache_control(message: Message, block: int = -1, ttl: str = "5m") -> dict[str, Any]:
    """The request form of `message` with a cache breakpoint on one of its blocks (the last by default).
    The message's cached `api` form is left untouched."""
    content = [dict(b) for b in message.api["content"]]
    content[block]["cache_control"] = cache_marker(ttl)
    return {"role": message.role, "content": content}


def request_body(
    static: StaticPrefix, messages: list[dict[str, Any]], *, model: str, max_tokens: int, ttl: str = "5m"
) -> dict[str, Any]:
    """A Messages API body: `messages` as given, the static prefix with its one breakpoint (on the system
    prompt, which covers the tools; on the last tool when there is no system prompt)."""
    tools = [dict(t) for t in static.tools]
    if tools and not static.system:
        tools[-1]["cache_control"] = cache_marker(ttl)
    request: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if static.system:
        request["system"] = [{"type": "text", "text": static.system, "cache_control": cache_marker(ttl)}]
    if tools:
        request["tools"] = tools
    return request


def kept_from(history: History, base: int, keep_steps: int) -> int:
    """Where a compaction's verbatim part starts: the N-th last step since `base`.
    If a round opened right before it, that opening message is kept too (it is the task). Not a note of
    baton's alone ("your reply had no tool call, continue"), which opens a round in form only: kept, it would
    stand where the task belongs, and the task would be pinned nowhere; left out, the steps start mid-round
    and the latest real opening is pinned after the summary."""
    steps = history.steps_in(base)
    if not steps:
        return base
    start = steps[max(0, len(steps) - keep_steps)]
    if start > base and history.rounds_in(start - 1, start) and (
            own_text(history.view[start - 1]) or not history.seqs_at(start)):
        start -= 1  # (a step that begins inside the log message before it, a repaired one, goes with it)
    return start


class ContextOverflow(RuntimeError):
    """Even after emergency trimming (results cut, thinking left out) the request does not fit the window: what is
    left is the system prompt, the tools, the summary, the openings and the newest steps' own text and calls."""

    def __init__(self, message: str, needed: int = 0) -> None:
        super().__init__(message)
        self.needed = needed  # the estimated input of the smallest request assembly could make



@dataclass
class Assembler:
    """Assembles requests for one agent; keeps per-agent caches between calls."""

    history: History
    policy: Policy
    agent: str = "agent"
    static: StaticPrefix = field(default_factory=StaticPrefix)
    estimator: TokenEstimate = field(default_factory=TokenEstimator)
    compressor: ResultCompressor | None = None  # None: the one `policy.compressor` names
    compactor: Compactor | None = None  # None: the one `policy.compactor` names
    rates: CacheRates = field(default_factory=CacheRates)  # the model's cache prices (agents.agent.assembler_for)
    _compressed: dict[int, Message] = field(default_factory=dict, repr=False)
    _capped: dict[tuple[int, int], Message] = field(default_factory=dict, repr=False)
    _prefix_key: tuple | None = field(default=None, repr=False)
    _prefix: tuple[list[Message], dict[str, int], int, int] | None = field(default=None, repr=False)
    _decisions: dict[int, bool] = field(default_factory=dict, repr=False)
    _reopenings: dict[int, Message] = field(default_factory=dict, repr=False)
    # After an API compaction whose kept steps start mid-round: (view index, the pinned opening's block)
    # appended to that message, the last one when it compacted (context.api_compaction).
    _amend: tuple[tuple[int, TextBlock], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if self.compressor is None:
            self.compressor = instantiate("compressor", self.policy.compressor, COMPRESSORS)
        if self.compactor is None:
            self.compactor = instantiate("compactor", self.policy.compactor, COMPACTORS)

    # ---- per-message variants, computed once -------------------------------------

    def at(self, index: int) -> Message:
        """view[index] as requests send it: with the pinned opening appended where an API compaction put it."""
        msg = self.history.view[index]
        pins = [block for at, block in self._amend if at == index]
        return Message(role=msg.role, content=[*msg.content, *pins]) if pins else msg

    def compressed(self, index: int) -> Message:
        """view[index] as an older step shows it: tool results compressed (with an
        archive reference) or, for the assistant message, bulky call inputs cut."""
        msg = self._compressed.get(index)
        if msg is None:
            src, shrink = self.at(index), self.compressor
            if src.role == "assistant":
                blocks = [shrink.compress_call(b) if isinstance(b, ToolUseBlock) else b for b in src.content]
            else:
                uses = {t.id: t for t in self.history.view[index - 1].tool_uses}
                blocks = [
                    shrink.compress_result(uses.get(b.tool_use_id), b, archive_ref(self.agent, b.tool_use_id),
                                           read_lines=self.policy.read_lines)
                    if isinstance(b, ToolResultBlock)
                    else b
                    for b in src.content
                ]
            same = all(a is b for a, b in zip(blocks, src.content))
            msg = src if same else Message(role=src.role, content=blocks)
            self._compressed[index] = msg
        return msg

    def capped(self, index: int, cap: int) -> Message:
        """view[index] with any single result over `cap` characters cut to head + tail."""
        key = (index, cap)
        msg = self._capped.get(key)
        if msg is None:
            src = self.at(index)
            head = min(1_000, cap // 2)
            blocks = [
                self.compressor.cap_result(
                    b, archive_ref(self.agent, b.tool_use_id), cap_chars=cap, head=head, tail=head
                )
                if isinstance(b, ToolResultBlock)
                else b
                for b in src.content
            ]
            msg = src if all(a is b for a, b in zip(blocks, src.content)) else Message(role="user", content=blocks)
            self._capped[key] = msg
        return msg

    def forget_tail(self, index: int) -> None:
        """Drop cached variants at or after `index` (the last view message can change)."""
        for k in [k for k in self._compressed if k >= index]:
            del self._compressed[k]
        for k in [k for k in self._capped if k[0] >= index]:
            del self._capped[k]

    def _reopening(self, base: int) -> Message:
        """The user message between a summary and kept steps that start mid-round at view[base]: the
        latest opening before them (pinned, capped: the summary alone would speak for the task), then the
        bridge. One user message, so roles alternate.

        It depends only on view messages before `base`, which no later message can merge into, so it is
        built once and is byte-identical on every call while the compaction event is the latest.
        """
        msg = self._reopenings.get(base)
        if msg is None:
            opening = self.history.latest_opening(base) if self.policy.opening_cap_chars else None
            pinned = [] if opening is None else [TextBlock(text=PINNED_OPENING.format(text=self._pinned_text(opening)))]
            msg = self._reopenings[base] = Message(role="user", content=[*pinned, TextBlock(text=BRIDGE)])
        return msg

    def _pinned_text(self, opening: int) -> str:
        """The opening's own text (`own_text`: tool results merged before it are left out), cut to head +
        tail with a reference to its log records when over `opening_cap_chars`."""
        text, cap = own_text(self.history.view[opening]), self.policy.opening_cap_chars
        if len(text) <= cap:
            return text
        ref = log_ref(self.agent, self.history.seqs_at(opening))
        return head_tail(text, cap - cap // 4, cap // 4) + OPENING_CUT.format(cap=cap, ref=ref)

    def _api_pin(self, base: int, kept_until: int) -> tuple[int, TextBlock] | None:
        """Where the pinned opening goes after an API compaction, and its block: appended to the last message
        when it compacted (the first new user turn after the kept ones), never between the block and the kept
        turns, which must follow it unchanged for their thinking to stay valid (platform docs, "Compaction and
        preserved thinking")."""
        opening = self.history.latest_opening(base) if self.policy.opening_cap_chars else None
        last = kept_until - 1
        if opening is None or last < base or self.history.view[last].role != "user":
            return None
        return last, TextBlock(text=PINNED_OPENING.format(text=self._pinned_text(opening)))

    def _pins(self, event: CompactionEvent, base: int, kept_until: int, mid_round: bool
              ) -> tuple[tuple[int, TextBlock], ...]:
        """Where pinned openings go after an API compaction: this one's (when its kept steps start mid-round),
        and those of earlier ones that are on a message this one keeps, which must stay as they were sent."""
        pins = [(self.history.view_length(p["seq"]) - 1, TextBlock(text=p["text"])) for p in event.pins]
        own = self._api_pin(base, kept_until) if mid_round else None
        if own is not None and any(block.text == own[1].text for _, block in pins):
            own = None  # an earlier compaction's pin of the same opening is on a kept message: once is enough
        return tuple(sorted([*pins, *([own] if own else [])], key=lambda pin: pin[0]))

    @property
    def pins(self) -> tuple[tuple[int, TextBlock], ...]:
        """The pinned openings the last assembled request appended, by view index."""
        return self._amend

    def _set_amend(self, amend: tuple[tuple[int, TextBlock], ...]) -> None:
        if amend != self._amend:  # the variants cached at the old and the new places are stale
            for index in {at for at, _ in (*amend, *self._amend)}:
                self._compressed.pop(index, None)
                for key in [k for k in self._capped if k[0] == index]:
                    del self._capped[key]
            self._amend = amend

    def should_compact(self, assembled: Assembled, event: CompactionEvent | None) -> bool:
        """Whether to compact before this request: the compactor's decision."""
        return self.compactor.should_compact(self, assembled, event)

    # ---- assembly ----------------------------------------------------------------

    def assemble(self, event: CompactionEvent | None = None) -> Assembled:
        """The request for the next call, given the latest compaction event (if any)."""
        view, pol = self.history.view, self.policy
        if not view:
            raise ValueError("nothing to send: the agent's log is empty; append its opening user message first")
        self.forget_tail(max(0, len(view) - 1))  # the last view message may have been merged since
        span = event.in_view(self.history) if event else ViewSpan(0, 0, 0)
        by_api = event is not None and event.block is not None  # the API's compaction block leads
        # The kept turns after the API's block go out as they were sent: a smaller cap would change them.
        base, cap_until = span.kept_from, 0 if by_api else span.kept_until
        head: list[Message] = list(event.messages) if event else []
        mid_round = event is not None and base < len(view) and view[base].role == "assistant"
        self._set_amend(self._pins(event, base, span.kept_until, mid_round) if by_api else ())
        if mid_round and not by_api:
            head.append(self._reopening(base))  # the kept steps start mid-round
        pinned = sum(b.tokens for b in head[-1].content[:-1]) if len(head) == 3 else 0  # all but the bridge
        pinned += sum(block.tokens for _, block in self._amend)
        # A compressor that leaves the shrinking to the server keeps the client's view unmanaged: append-only.
        managed = getattr(self.compressor, "client_side", True) and \
            sum(m.tokens for m in head) + self.history.tokens(base) >= pol.start_tokens

        # Segments: rounds since the compaction point; steps kept by a compaction
        # that started mid-round form a first segment opened by the bridge.
        starts = self.history.rounds_in(base)
        if not starts or starts[0] != base:
            starts = [base] + starts
        steps = self.history.steps_in(starts[-1])
        n_batches = max(0, (len(steps) - pol.keep_last_steps) // pol.batch) if managed else 0

        verbatim = steps[n_batches * pol.batch :]
        # Emergency, in order: compress the oldest verbatim steps (never below min_verbatim_steps) and cap every
        # result; then leave every thinking block out (kept thinking is billed at its full size, which trimming
        # results does not reduce, and the API takes a request without it); then compress the newest steps too.
        # Each later stage only when the one before did not fit: a late or skipped compaction (its deadline passed
        # under load, the model unavailable) must shrink the request, never end the run. The log keeps it all.
        thinking, squeezed = True, ""
        for shed, floor in ((False, pol.min_verbatim_steps), (True, pol.min_verbatim_steps), (True, 0)):
            if shed and not thinking:  # nothing to leave out: the stage would repeat the one before
                if floor:
                    continue
                shed = False
            prefix, layers, previous_end, n_compressed, chain = self._stable_prefix(
                event, head, pinned, starts, steps, n_batches, managed, cap_until, shed
            )
            build = partial(
                self._build, prefix, layers, verbatim, cap_until, previous_end=previous_end,
                n_compressed=n_compressed, n_kept=n_batches * pol.batch - n_compressed, managed=managed,
                prefix_chain=chain,
            )
            assembled, n_trim = build(n_trim=0), 0
            while self._over_window(assembled) and len(verbatim) - n_trim > floor:
                n_trim += 1  # compress the oldest verbatim step
                assembled = build(n_trim=n_trim)
            if self._over_window(assembled):
                assembled = build(n_trim=n_trim, hard_cap=True)
            below = n_trim > max(0, len(verbatim) - pol.min_verbatim_steps)
            squeezed = "; ".join(what for what, done in (
                ("thinking left out", shed), ("the newest steps compressed", below)) if done)
            if not self._over_window(assembled):
                break
            if not shed:
                thinking = bool(assembled.chain and assembled.chain.sent)
        assembled.squeezed = squeezed
        if self._over_window(assembled):
            raise ContextOverflow(
                f"the request needs ~{assembled.estimated_input} input tokens plus {pol.max_tokens} output, "
                f"over the window of {pol.window}, even with every tool result trimmed and thinking left out; "
                "raise the window", needed=assembled.estimated_input,
            )
        # A compressor of the first protocol (layers 4-5 only) asks nothing of the server.
        asks = getattr(self.compressor, "request_fields", None)
        assembled.request_fields = self.compactor.request_fields(event) | (asks(self, assembled) if asks else {})
        # A request that carries the API's compaction block needs its beta header, whichever compactor runs now.
        betas = getattr(self.compressor, "betas", list)()
        assembled.betas = sorted({*betas, *([COMPACT_BETA] if by_api else [])})
        # An emergency trim changes the view on purpose too (the oldest verbatim steps compressed to fit).
        plan = f"{event.id if event else 0}:{base}:{len(starts)}:{starts[-1]}:{n_batches}:{managed}:{n_trim}"
        assembled.plan = plan + (f":{squeezed}" if squeezed else "")  # so do the last resorts
        return assembled

    def _step(self, s: int, cap_until: int, compress: bool = False, hard_cap: bool = False) -> list[Message]:
        """A step's messages: the assistant message, then its results (compressed or capped)."""
        end = self.history.step_end(s)
        msgs = [self.compressed(s) if compress else self.at(s)]
        if end == s + 2:
            if compress:
                msgs.append(self.compressed(s + 1))
            else:
                small = hard_cap or s + 1 < cap_until
                msgs.append(self.capped(s + 1, self.policy.kept_cap_chars if small else self.policy.result_cap_chars))
        return msgs

    def _worth_compressing(self, steps: list[int], j: int) -> bool:
        """Whether batch j of the current round is compressed (decided once, from the log).

        Moving a batch out of the verbatim window rewrites the cache after it: the
        compressed batch and the N steps that follow it are written again (1.25x).
        The batch is compressed only if the tokens it saves, read at the model's cache
        read price (`rates`: 0.05x on the 5.5 models) on each later call, repay that
        within `payback_calls` calls. The inputs of the
        decision are fixed once the batch becomes eligible, so it never flips.
        """
        pol = self.policy
        if pol.payback_calls == 0:
            return True
        key = steps[j * pol.batch]
        if key not in self._decisions:
            batch = steps[j * pol.batch : (j + 1) * pol.batch]
            tail = steps[(j + 1) * pol.batch : (j + 1) * pol.batch + pol.keep_last_steps]
            raw = sum(m.tokens for s in batch for m in self._step(s, 0))
            small = sum(m.tokens for s in batch for m in self._step(s, 0, compress=True))
            rewrite = small + sum(m.tokens for s in tail for m in self._step(s, 0))
            rates = self.rates
            self._decisions[key] = (raw - small) * rates.read * pol.payback_calls >= rewrite * rates.write
        return self._decisions[key]

    def _stable_prefix(self, event, head, pinned, starts, steps, n_batches, managed, cap_until, shed=False):
        """Layers 2-4, memoised: with hysteresis they change only every B steps.

        Every part passes the prefix chain (``context.prefix``) as it is laid down, so a thinking block
        goes out only while everything before it is what it was produced under."""
        # The current round's opening message may be the last view message, which a
        # following user message can still merge into: its identity is part of the key.
        opening = id(self.history.view[starts[-1]])
        key = (event.id if event else 0, len(head), tuple(starts[-2:]), len(starts), opening, n_batches, managed,
               self._amend, shed)
        if key != self._prefix_key or self._prefix is None:
            view, chain = self.history.view, PrefixChain(self.static.digest, shed=shed)
            if event is not None and event.block is not None:  # the API's block, then the kept turns as sent
                head = [chain.admit_summary(head[0], event.prefix_start, event.prefix_cut), *chain.admit_all(head[1:])]
            else:
                head = chain.admit_all(head)
            layers = {"summary": sum(m.tokens for m in head) - pinned, "pinned_opening": pinned, "earlier_rounds": 0,
                      "compressed": 0, "kept_batches": 0}
            msgs = list(head)
            for start, end in zip(starts, starts[1:]):
                if managed:  # layer 3: the opening user message and the final answer only
                    keep = sorted({i for i in (start, end - 1) if view[i].role == "user" or i == end - 1})
                    part = [self.at(i) for i in keep]
                else:
                    part = [self.at(start)] if view[start].role == "user" else []
                    for s in self.history.steps_in(start, end):
                        part += self._step(s, cap_until)
                part = chain.admit_all(part)
                msgs += part
                layers["earlier_rounds"] += sum(m.tokens for m in part)
            current = starts[-1]
            if view[current].role == "user":
                msgs.append(chain.admit(self.at(current)))  # the current round's opening message
                layers["earlier_rounds"] += msgs[-1].tokens
            batch_ends, n_compressed, b = [len(msgs) - 1], 0, self.policy.batch
            for j in range(n_batches):
                compress = self._worth_compressing(steps, j)
                for s in steps[j * b : (j + 1) * b]:
                    part = chain.admit_all(self._step(s, cap_until, compress=compress))
                    msgs += part
                    layers["compressed" if compress else "kept_batches"] += sum(m.tokens for m in part)
                n_compressed += b if compress else 0
                batch_ends.append(len(msgs) - 1)
            previous_end = batch_ends[-2] if len(batch_ends) > 1 else -1
            self._prefix_key, self._prefix = key, (msgs, layers, previous_end, n_compressed, chain)
        return self._prefix

    def _build(
        self, prefix, layers, verbatim, cap_until, *, previous_end: int, n_compressed: int, n_kept: int,
        n_trim: int, managed: bool, prefix_chain: PrefixChain, hard_cap: bool = False,
    ) -> Assembled:
        out, chain = list(prefix), prefix_chain.copy()
        stable_end = len(out) - 1
        layers = {"system_and_tools": self.static.tokens, **layers, "verbatim": 0}
        for k, s in enumerate(verbatim):
            part = chain.admit_all(self._step(s, cap_until, compress=k < n_trim, hard_cap=hard_cap))
            out += part
            layers["compressed" if k < n_trim else "verbatim"] += sum(m.tokens for m in part)
        breakpoints = sorted({i for i in (previous_end, stable_end, len(out) - 1) if i >= 0})
        raw = sum(layers.values())
        n_blocks = sum(len(m.content) for m in out)
        estimate = self.estimator.estimate_raw(raw, len(out), n_blocks)
        return Assembled(
            out, breakpoints, layers, estimate,
            compressed_steps=n_compressed + n_trim, verbatim_steps=len(verbatim) - n_trim + n_kept,
            trimmed_steps=n_trim, managed=managed, chain=chain,
        )

    def _over_window(self, a: Assembled) -> bool:
        return a.estimated_input + self.policy.max_tokens > self.policy.window

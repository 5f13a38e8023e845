"""What a run spent, read from the disk: tokens by kind and their cost, per agent, iteration and compaction.

Every step event carries the usage of its model call and every compaction event
the usage of its summary call, with the API's compaction iterations when it compacted
(billed, yet not in the usage's top-level counts: ``Tokens.calls``) and the cache writes
split into 5-minute and 1-hour ones; the price is the pinned model's
(``agents.pricing``, overridable in scenario.toml ``[prices.<model id>]``). Each
call is priced on its own and the costs are added, never the summed tokens priced
once: a model priced by prompt size (Haiku 5.5) bills each call at its own tier. With
the simulated model nothing is priced: its tokens are shown, its cost is none.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agents.disk import AgentDisk
from agents.events import (
    CompactionRecord,
    ErrorEvent,
    Event,
    OutputCutEvent,
    PrewarmEvent,
    PromptTooLongEvent,
    StepEvent,
)
from agents.pricing import Price, Tokens, price_for
from agents.settings_layers import scenario_prices
from agents.simulated import LABEL as SIMULATED_LABEL
from proving.evaluation.exported import LOGS
from proving.evaluation.solver import RECORD, SolverRecord
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.run import load_run
from scenarios.store import AGENTS, Layout
from workers.pinning import pins_of


class Spend(BaseModel):
    tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = None
    saved_by_cache_usd: float | None = None  # what the same calls would have cost with no prompt cache, minus cost

    @classmethod
    def of(cls, tokens: Tokens, price: Price | None, calls: int = 1) -> Spend:
        """One call's spend (or nothing yet, with no tokens): priced at its own prompt's tier; ``calls`` calls
        summed, at the tier of their mean prompt (``Tokens.cost``)."""
        cost, uncached = tokens.cost(price, calls), tokens.uncached_cost(price, calls)
        saved = None if cost is None or uncached is None else uncached - cost
        return cls(tokens=tokens, cost_usd=cost, saved_by_cache_usd=saved)

    @classmethod
    def of_usage(cls, usage: Mapping[str, Any] | BaseModel | None, price: Price | None) -> Spend:
        """One response's spend: its top-level counts and each compaction iteration the API ran inside it (not in
        the top level, ``Tokens.calls``), each priced as the request it was, at its own prompt's tier."""
        first, *compactions = Tokens.calls(usage)
        return sum((cls.of(tokens, price) for tokens in compactions), cls.of(first, price))

    def __add__(self, other: Spend) -> Spend:
        return Spend(tokens=self.tokens + other.tokens, cost_usd=_plus(self.cost_usd, other.cost_usd),
                     saved_by_cache_usd=_plus(self.saved_by_cache_usd, other.saved_by_cache_usd))


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


class CompactionSpend(BaseModel):
    id: int
    after_step: int | None
    iteration: int | None
    fallback: bool
    spend: Spend


class AgentSpend(BaseModel):
    role: str
    model: str | None  # the pinned model id; None offline
    priced: bool
    simulated: bool = False  # every step ran on the simulated model, which is not billed
    steps: Spend
    compactions: Spend
    total: Spend
    by_iteration: dict[int, Spend]
    per_compaction: list[CompactionSpend]


class GateSpend(BaseModel):
    """What a proving gate's model spent (the blind solver, a model of the difficulty panel), read from each
    iteration's ``proving_logs/solver.json``. Inspect reports a gate's calls summed, so each iteration is priced
    as that many calls at the tier of their mean prompt: exact for a flat price, an estimate for a tiered one."""

    label: str  # "solver" or "panel"
    model: str  # the Inspect model string
    simulated: bool
    priced: bool
    requests: int
    total: Spend
    by_iteration: dict[int, Spend]


class RunSpend(BaseModel):
    agents: dict[str, AgentSpend]
    proving: dict[str, GateSpend] = Field(default_factory=dict)  # "<label> <model>" -> its spend
    total: Spend


def read_spend(root: Path) -> RunSpend:
    """The spend of the scenario's current run (its events), priced at each agent's pinned model, and of the
    proving gates' models."""
    record, prices = load_run(root), scenario_prices(root)
    pins = pins_of(record)
    agents = {role: _agent_spend(root, role, pins[role].id if role in pins else None, prices) for role in AGENTS}
    proving = _gate_spend(root, prices)
    parts = [a.total for a in agents.values()] + [g.total for g in proving.values()]
    total = sum((p.tokens for p in parts), Tokens())
    # The simulated model (an agent whose steps all ran on it, a simulated gate) is not billed: it costs the total
    # nothing, where a real model without a price leaves the total unknown.
    billed = [a.total for a in agents.values() if not a.simulated] + \
        [g.total for g in proving.values() if not g.simulated]
    costs = [p.cost_usd for p in billed if p.tokens != Tokens()]
    cost = None if not costs or None in costs else sum(c for c in costs if c is not None)
    saved = [p.saved_by_cache_usd for p in billed if p.saved_by_cache_usd is not None]
    return RunSpend(agents=agents, proving=proving, total=Spend(tokens=total, cost_usd=cost,
                                                                saved_by_cache_usd=sum(saved) if cost is not None
                                                                else None))


def _gate_spend(root: Path, prices: dict[str, Price]) -> dict[str, GateSpend]:
    found: dict[str, GateSpend] = {}
    folder = Folder(root)
    for n in folder.iterations("execution_outputs"):
        raw = folder.read_json_or_none(Layout(root).outputs(n) / LOGS / RECORD, RECORD_BYTES)
        try:
            record = SolverRecord.model_validate(raw) if raw is not None else None
        except ValidationError:
            continue  # a record this baton cannot read counts for nothing, and hides nothing else
        if record is None:
            continue
        for label, used in [("solver", record.solver), *(("panel", p) for p in record.panel)]:
            model_id = used.model.split("/", 1)[-1]
            price = None if used.simulated else price_for(model_id, prices)
            tokens = sum((_inspect_tokens(u) for u in used.tokens.values()), Tokens())
            call = Spend.of(tokens, price, calls=used.requests)
            key = f"{label} {used.model}"
            had = found.get(key) or GateSpend(label=label, model=used.model, simulated=used.simulated,
                                              priced=price is not None, requests=0, total=Spend.of(Tokens(), price),
                                              by_iteration={})
            found[key] = had.model_copy(update={
                "requests": had.requests + used.requests, "total": had.total + call,
                "by_iteration": {**had.by_iteration, n: had.by_iteration.get(n, Spend.of(Tokens(), price)) + call}})
    return found


def _inspect_tokens(usage: dict[str, int]) -> Tokens:
    """Inspect's ModelUsage names (its input excludes the cache's reads and writes, as the API's does)."""
    return Tokens(input=usage.get("input_tokens") or 0, cache_write=usage.get("input_tokens_cache_write") or 0,
                  cache_read=usage.get("input_tokens_cache_read") or 0, output=usage.get("output_tokens") or 0)


def _dropped_reply(event: Event) -> bool:
    """A call that was paid for but kept no reply, so no step event counts it: cut and asked again,
    refused, stopped by the window, or a cache pre-warm at a handoff (which samples nothing)."""
    if isinstance(event, PrewarmEvent):
        return True
    if isinstance(event, OutputCutEvent):
        return event.retry_max_tokens is not None  # a cut reply that was kept has its step event
    return isinstance(event, (ErrorEvent, PromptTooLongEvent)) and event.usage is not None


def _agent_spend(root: Path, role: str, model: str | None, overrides: dict[str, Price]) -> AgentSpend:
    price = price_for(model, overrides)
    nothing = Spend.of(Tokens(), price)  # 0 dollars with a price, None without
    events = AgentDisk.load(root, role).events  # type: ignore[arg-type]  # with those a crash left owed
    iteration_of: dict[int, int] = {}  # step -> iteration, to place each compaction
    by_iteration: dict[int, Spend] = {}
    steps, iteration = nothing, 0
    for event in events:
        if isinstance(event, StepEvent):
            iteration = iteration_of[event.step] = event.iteration
        if isinstance(event, StepEvent) or _dropped_reply(event):
            call = Spend.of_usage(event.usage, price)  # type: ignore[union-attr]  # both carry a usage
            steps += call
            at = iteration_of.get(event.step, iteration)  # type: ignore[union-attr]
            by_iteration[at] = by_iteration.get(at, nothing) + call
    compactions, per_compaction = nothing, []
    for event in events:
        if isinstance(event, CompactionRecord):
            call = Spend.of_usage(event.usage, price)  # with the API's compaction iterations, if it ran one
            compactions += call
            iteration = iteration_of.get(event.after_step or 0)
            if iteration is not None:
                by_iteration[iteration] = by_iteration.get(iteration, nothing) + call
            per_compaction.append(CompactionSpend(id=event.id, after_step=event.after_step, iteration=iteration,
                                                  fallback=event.fallback, spend=call))
    models = {event.model for event in events if isinstance(event, StepEvent)}
    return AgentSpend(
        role=role, model=model, priced=price is not None, simulated=model is None and models == {SIMULATED_LABEL},
        steps=steps, compactions=compactions,
        total=steps + compactions, by_iteration=dict(sorted(by_iteration.items())), per_compaction=per_compaction,
    )

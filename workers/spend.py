"""What a run spent, read from the disk: tokens by kind and their cost, per agent, iteration and compaction.

Every step event carries the usage of its model call and every compaction event
the usage of its summary call; the price is the pinned model's
(``agents.pricing``, overridable in scenario.toml ``[prices.<model id>]``). Each
call is priced on its own and the costs are added, never the summed tokens priced
once: a model priced by prompt size (Haiku 5.5) bills each call at its own tier. With
the simulated model nothing is priced: its tokens are shown, its cost is none.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from agents.disk import AgentDisk
from agents.events import (
    CompactionRecord,
    ErrorEvent,
    Event,
    OutputCutEvent,
    PromptTooLongEvent,
    StepEvent,
)
from agents.pricing import Price, Tokens, price_for
from agents.settings_layers import scenario_prices
from scenarios.run import load_run
from scenarios.store import AGENTS
from workers.pinning import pins_of


class Spend(BaseModel):
    tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = None
    saved_by_cache_usd: float | None = None  # what the same calls would have cost with no prompt cache, minus cost

    @classmethod
    def of(cls, tokens: Tokens, price: Price | None) -> Spend:
        """One call's spend (or nothing yet, with no tokens): priced at its own prompt's tier."""
        cost, uncached = tokens.cost(price), tokens.uncached_cost(price)
        saved = None if cost is None or uncached is None else uncached - cost
        return cls(tokens=tokens, cost_usd=cost, saved_by_cache_usd=saved)

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
    steps: Spend
    compactions: Spend
    total: Spend
    by_iteration: dict[int, Spend]
    per_compaction: list[CompactionSpend]


class RunSpend(BaseModel):
    agents: dict[str, AgentSpend]
    total: Spend


def read_spend(root: Path) -> RunSpend:
    """The spend of the scenario's current run (its events), priced at each agent's pinned model."""
    pins, prices = pins_of(load_run(root)), scenario_prices(root)
    agents = {role: _agent_spend(root, role, pins[role].id if role in pins else None, prices) for role in AGENTS}
    total = sum((a.total.tokens for a in agents.values()), Tokens())
    costs = [a.total.cost_usd for a in agents.values() if a.total.tokens != Tokens()]
    cost = None if not costs or None in costs else sum(c for c in costs if c is not None)
    saved = [a.total.saved_by_cache_usd for a in agents.values() if a.total.saved_by_cache_usd is not None]
    return RunSpend(agents=agents, total=Spend(tokens=total, cost_usd=cost,
                                               saved_by_cache_usd=sum(saved) if cost is not None else None))


def _dropped_reply(event: Event) -> bool:
    """A reply that was paid for but not kept, so no step event counts it: cut and asked again,
    refused, or stopped by the window."""
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
            call = Spend.of(Tokens.of(event.usage), price)  # type: ignore[union-attr]  # both carry a usage
            steps += call
            at = iteration_of.get(event.step, iteration)  # type: ignore[union-attr]
            by_iteration[at] = by_iteration.get(at, nothing) + call
    compactions, per_compaction = nothing, []
    for event in events:
        if isinstance(event, CompactionRecord):
            call = Spend.of(Tokens.of(event.usage), price)
            compactions += call
            iteration = iteration_of.get(event.after_step or 0)
            if iteration is not None:
                by_iteration[iteration] = by_iteration.get(iteration, nothing) + call
            per_compaction.append(CompactionSpend(id=event.id, after_step=event.after_step, iteration=iteration,
                                                  fallback=event.fallback, spend=call))
    return AgentSpend(
        role=role, model=model, priced=price is not None, steps=steps, compactions=compactions,
        total=steps + compactions, by_iteration=dict(sorted(by_iteration.items())), per_compaction=per_compaction,
    )

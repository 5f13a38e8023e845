"""What a run spent, read from the disk: tokens by kind and their cost, per agent, iteration and compaction.

Every step event carries the usage of its model call and every compaction event
the usage of its summary call; the price is the pinned model's
(``agents.pricing``, overridable in scenario.toml ``[prices.<model id>]``). With
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
        cost, uncached = tokens.cost(price), tokens.uncached_cost(price)
        saved = None if cost is None or uncached is None else uncached - cost
        return cls(tokens=tokens, cost_usd=cost, saved_by_cache_usd=saved)


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
    events = AgentDisk.load(root, role).events  # type: ignore[arg-type]  # with those a crash left owed
    iteration_of: dict[int, int] = {}  # step -> iteration, to place each compaction
    by_iteration: dict[int, Tokens]
    steps, by_iteration = Tokens(), {}
    iteration = 0
    for event in events:
        if isinstance(event, StepEvent):
            iteration = iteration_of[event.step] = event.iteration
        if isinstance(event, StepEvent) or _dropped_reply(event):
            tokens = Tokens.of(event.usage)  # type: ignore[union-attr]  # both carry a usage
            steps += tokens
            at = iteration_of.get(event.step, iteration)  # type: ignore[union-attr]
            by_iteration[at] = by_iteration.get(at, Tokens()) + tokens
    compactions, per_compaction = Tokens(), []
    for event in events:
        if isinstance(event, CompactionRecord):
            tokens = Tokens.of(event.usage)
            compactions += tokens
            iteration = iteration_of.get(event.after_step or 0)
            if iteration is not None:
                by_iteration[iteration] = by_iteration.get(iteration, Tokens()) + tokens
            per_compaction.append(CompactionSpend(id=event.id, after_step=event.after_step, iteration=iteration,
                                                  fallback=event.fallback, spend=Spend.of(tokens, price)))
    return AgentSpend(
        role=role, model=model, priced=price is not None, steps=Spend.of(steps, price),
        compactions=Spend.of(compactions, price), total=Spend.of(steps + compactions, price),
        by_iteration={n: Spend.of(t, price) for n, t in sorted(by_iteration.items())}, per_compaction=per_compaction,
    )

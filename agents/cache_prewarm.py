"""At a handoff, write the agent's prefix for an hour, so its next request reads it after the other agent's turn.

An agent that hands off idles through the other agent's whole turn, often longer than the five minutes a cache
entry lives: its next request would write its whole prefix again (1.25x) instead of reading it (0.05x on the 5.5
models). The last request of its turn was sent before baton knew the turn would end (the reply called
SubmitHandoff), so that request cannot have asked for an hour. Baton knows it now, and pre-warms (platform docs,
"Prompt caching", "Pre-warming the cache"): one request of the context as it stands, every breakpoint for an hour,
``max_tokens`` 0, which samples nothing. It reads what the last request wrote and writes the rest for an hour.

It is sent only when the next turn's first request will start with the same messages (baton's own
compressor lays a new turn out anew once the context passes its start size: ``next_turn``), and when
the idles measured after this agent's earlier handoffs (start to start; a prior of one in two before there are
any) make it pay:

    P(idle 5-60 minutes) x prefix x (write - read)  >  prefix x read + newest step x write_1h.

It never fails the step: an error is a warning, and the next request just writes its prefix again.
"""

from __future__ import annotations

from dataclasses import replace

from agents.agent import Agent
from agents.conventions import ConventionsError
from agents.disk import AgentDisk
from agents.events import HandoffEvent, PrewarmEvent, WarningEvent
from agents.models import ModelError
from agents.step_request import request_for, step_starts
from agents.thinking import request_of
from context.api_compaction import Unplannable, compaction_request
from context.assembly import Assembled, ContextOverflow
from context.cache_ttl import FIVE_MINUTES_S, ONE_HOUR_S
from context.compaction_event import CompactionEvent
from context.messages import Message, TextBlock

PRIOR, PRIOR_WEIGHT = 0.5, 2.0  # before any handoff was measured: as likely long as short
NEXT_OPENING = "[baton] the next turn's opening"  # a stand-in: only where the prefix ends matters


def idles_after_handoffs(disk: AgentDisk) -> list[float]:
    """Seconds from each earlier handoff step's request to this agent's next request."""
    handoffs = {e.step for e in disk.events if isinstance(e, HandoffEvent)}
    starts = step_starts(disk)
    return [b - a for (step, a), (_, b) in zip(starts, starts[1:]) if step in handoffs and b >= a]


def next_turn(agent: Agent, disk: AgentDisk, assembled: Assembled, event: CompactionEvent | None
              ) -> tuple[bool, bool]:
    """(whether the next turn's first request will start with this request's messages, whether it will be a
    compaction). The first may not hold: baton's own compressor cuts an earlier round to its ends once past the
    start size, so a new turn lays out everything after the system prompt anew. The second is decided as the step
    will decide it, with the next opening as large as this turn's was (its size is measured, its text unknown)."""
    history = disk.history()  # its own: the stand-in opening is appended to it
    opening = history.latest_opening(len(history.view))
    history.append(Message(role="user", content=[TextBlock(text=NEXT_OPENING)]))
    assembler = agent.assembler(disk, history)
    following = assembler.assemble(event)
    n = len(assembled.messages) - 1
    ends, later = assembled.chain.ends if assembled.chain else [], following.chain.ends if following.chain else []
    extends = n <= 0 or (len(later) >= n and later[n - 1] == ends[n - 1])
    scale = following.scale
    expected = following.estimated_input + (round(history.view[opening].tokens * scale) if opening is not None else 0)
    compacts = disk.state.compaction_due is not None or \
        assembler.should_compact(replace(following, estimated_input=expected), event)
    return extends, compacts


def worth_it(idles: list[float], prefix: int, newest: int, read: float, write: float, write_1h: float) -> bool:
    """Whether the expected rewrite the pre-warm saves repays what it costs (see the module docstring)."""
    long = sum(1 for idle in idles if FIVE_MINUTES_S < idle <= ONE_HOUR_S)
    p = (long + PRIOR * PRIOR_WEIGHT) / (len(idles) + PRIOR_WEIGHT)
    return p * prefix * (write - read) > prefix * read + newest * write_1h


def prewarm(disk: AgentDisk, agent: Agent, step: int) -> PrewarmEvent | None:
    """Pre-warm ``agent``'s prefix after its handoff at ``step``, when it pays; the event, or None. When a
    compaction is due, the next request is the compaction: with the API's, its prefix is what is warmed (baton's
    own summary request reads what the steps cached, and nothing new of it could be written for an hour)."""
    if agent.model.label == "simulated":
        return None  # the simulated model in-process has no cache (through `baton fake-api` it has)
    try:
        event = disk.compaction()
        assembler = agent.assembler(disk, disk.history())
        assembled = assembler.assemble(event)
        extends, compacts = next_turn(agent, disk, assembled, event)
        if compacts:
            if agent.config.context.compactor != "api":
                return None
            asked, _, _ = compaction_request(assembler, event, "")
            warmed = asked.messages
            body = asked.to_request(assembler.static, model=agent.config.model.name, max_tokens=0, ttl="1h")
            body.pop("compaction")  # the same messages and breakpoints; nothing is summarised yet
            request = request_of(body, agent.config.model, temperature=agent.config.model.temperature,
                                 betas=assembled.betas)
        elif extends:
            warmed = tuple(assembled.messages)
            request = request_for(agent, assembled, assembler.static, max_tokens=0, ttl="1h")  # samples nothing
        else:
            return None  # the next turn's first request lays its prefix out anew: nothing would read the entry
    except (ConventionsError, ContextOverflow, Unplannable):
        return None  # the next step or compaction meets the same problem and says so
    rates = assembler.rates
    scale = assembled.scale
    prefix = round(sum(m.tokens for m in warmed) * scale) + assembler.static.tokens
    newest = round(sum(m.tokens for m in warmed[-2:]) * scale)
    if not worth_it(idles_after_handoffs(disk), prefix, newest, rates.read, rates.write, rates.write_1h):
        return None
    try:
        response = agent.model.create(request)
    except ModelError as exc:
        disk.event(WarningEvent(after_step=step, code="cache_prewarm", reason=(
            f"the cache pre-warm after the handoff failed ({exc}); the next request writes its prefix again")))
        return None
    event = PrewarmEvent(step=step, usage=response.usage.model_dump(), cost_usd=agent.cost(response.usage))
    disk.event(event)
    return event


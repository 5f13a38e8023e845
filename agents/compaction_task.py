"""The compaction task: summarise an agent's context once, fenced by the step it follows.

It runs apart from the steps (its own Celery queue, docs/deployment.md) so it
never waits behind a long step. The summary call uses the same system prompt and
tools as the steps, so it reads their prompt cache. The event it records is what
the next request is assembled from; the log itself is untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from agents import tracing
from agents.agent import Agent
from agents.config import ConfigError
from agents.conventions import ConventionsError
from agents.disk import AgentDisk, note_discarded
from agents.events import CompactionRecord
from agents.models import ModelError, ModelUnavailable
from agents.outcomes import CompactionOutcome
from agents.prompts import prompt
from agents.settings_layers import load_scenario_config
from agents.step_request import STILL_OVER, say_once
from agents.thinking import request_of
from context.api_compaction import CompactionCall, CompactionReply, CompactionRequest
from context.assembly import COMPACT_BETA, StaticPrefix
from context.compaction import KnownFacts, SummaryCall, SummaryReply, SummaryRequest
from context.messages import CompactionBlock
from context.summary_schemas import SUMMARY_SCHEMAS
from scenarios.folder import RECORD_BYTES
from scenarios.lease import LeaseLost
from scenarios.store import Layout, relative


def run_compaction(root: Path, agent: Agent, after_step: int | None = None, *, force: bool = False
                   ) -> CompactionOutcome:
    """Compact ``agent``'s context once for the state after step ``after_step`` (which task asked).

    Only when a step asked for it (``AgentState.compaction_due``), unless ``force``: duplicate,
    late and stray tasks make no summary call (tests and operators force one).
    """
    skipped = _not_due(AgentDisk.load(root, agent.role), agent, after_step, force)  # strays take no lease
    if skipped is not None:
        return skipped
    disk = AgentDisk.claim(root, agent.role)
    try:
        return _compact(disk, agent, after_step, force)
    except LeaseLost as exc:
        note_discarded(disk.layout, agent.role, after_step or 0, str(exc))
        return CompactionOutcome(agent=agent.role, status="skipped", after_step=after_step or 0,
                                 skip="lease_lost", reason=str(exc))


def _not_due(disk: AgentDisk, agent: Agent, after_step: int | None, force: bool) -> CompactionOutcome | None:
    """Why no compaction should run now (a stale, duplicate or stray task), or None when one is due."""
    last = disk.last_step()
    done = last.step if last else 0
    if disk.pending():
        return CompactionOutcome(agent=agent.role, status="skipped", after_step=done, skip="unfinished_tools",
                                 reason="a step has unfinished tool calls; finish it first")
    if after_step is not None and after_step != done:
        return CompactionOutcome(agent=agent.role, status="skipped", after_step=after_step, skip="stale",
                                 reason=f"stale: the log is at step {done}")
    if disk.compacted_after() == done and not disk.state.force_compaction:
        return CompactionOutcome(agent=agent.role, status="skipped", after_step=done, skip="already_compacted",
                                 reason=f"already compacted after step {done}")
    if disk.state.compaction_due != done and not disk.state.force_compaction and not force:
        return CompactionOutcome(agent=agent.role, status="skipped", after_step=done, skip="not_due",
                                 reason=f"no step asked for a compaction after step {done}")
    return None


def _compact(disk: AgentDisk, agent: Agent, after_step: int | None, force: bool) -> CompactionOutcome:
    skipped = _not_due(disk, agent, after_step, force)  # the log may have moved on between the read and the claim
    if skipped is not None:
        return skipped
    last = disk.last_step()
    done = last.step if last else 0
    history = disk.history()
    try:
        assembler = agent.assembler(disk, history)
    except ConventionsError as exc:  # the next step fails with the same message and the run stops there
        return CompactionOutcome(agent=agent.role, status="skipped", after_step=done, skip="conventions",
                                 reason=str(exc))
    trigger = "prompt_too_long" if disk.state.force_compaction else "forced" if force else "threshold"
    # The compactor the policy names; the role's summary schema is an input, not a branch inside it.
    event = assembler.compactor.compact(
        assembler, disk.compaction(), schema=SUMMARY_SCHEMAS[agent.role], prompt=prompt(agent.role, "compact"),
        call=_summary_call(agent, assembler.static), breaker=disk.state.breaker, facts=_facts(disk),
        timeout_s=agent.config.model.summary_timeout_s, compaction_call=_compaction_call(agent, assembler.static),
    )
    disk.event(CompactionRecord(after_step=done, **event.model_dump(exclude={"kind"})))
    threshold, keep = agent.config.context.threshold, agent.config.context.keep_last_steps
    if event.tokens_after >= threshold:  # said once per agent: it holds for every compaction after it too
        say_once(disk, done, STILL_OVER, (
            f"after compaction {event.id} the context is still ~{event.tokens_after} tokens, over the threshold of "
            f"{threshold}: the last {keep} steps alone are that large; "
            "raise the window and threshold or lower keep_last_steps"))
    if disk.state.force_compaction:
        disk.state.too_long_after_compaction += 1
    disk.state.force_compaction = False
    disk.state.compaction_due = None
    disk.save_state()
    return CompactionOutcome(agent=agent.role, status="compacted", after_step=done, event_id=event.id,
                             fallback=event.fallback, trigger=trigger, tokens_before=event.tokens_before,
                             tokens_after=event.tokens_after, usage=event.usage.model_dump() if event.usage else None)


def _budget(budget_s: float, what: str, clock: Callable[[], float]) -> Callable[[float], float]:
    """Seconds a call may take now: its own timeout, within what is left of the whole budget (wall clock); past
    the budget, ModelUnavailable, so the compactor falls back."""
    deadline = clock() + budget_s

    def time_left(timeout_s: float) -> float:
        left = min(timeout_s, deadline - clock())
        if left <= 0:
            raise ModelUnavailable(f"the {what}'s {budget_s:g}s deadline has passed")
        return left

    return time_left


def _summary_call(agent: Agent, static: StaticPrefix, clock: Callable[[], float] = time.monotonic) -> SummaryCall:
    """The compactor's model call. ``summary_timeout_s`` is the whole compaction's budget, wall clock:
    the compactor's retry with the error and the model's own retries all fit in it, and what is left
    is each call's deadline (``ModelRequest.deadline_s``). Past it, the compactor falls back."""
    config = agent.config
    time_left = _budget(config.model.summary_timeout_s, "summary", clock)

    def call(summary: SummaryRequest, timeout_s: float) -> SummaryReply:
        left = time_left(timeout_s)
        # Same system prompt, tools, tool_choice, thinking and effort as the steps, and their message
        # breakpoints, so it reads their cache: a change of tool_choice or of the thinking parameters would
        # invalidate every cached message block (the prompt-caching page's table).
        body = summary.to_request(static, model=config.model.name, max_tokens=config.model.summary_max_tokens)
        # The API's block of an earlier compaction may lead the messages: it needs its beta header.
        led = any(isinstance(b, CompactionBlock) for m in summary.messages for b in m.content)
        request = request_of(body, config.model, temperature=config.model.summary_temperature,
                             betas=[COMPACT_BETA] if led else [], timeout_s=left, deadline_s=left, purpose="summary")
        with tracing.chat(request, agent.model.label) as traced:
            response = agent.model.create(request)
            tracing.reply(traced, response, cost=agent.cost)
        if response.stop_reason in ("refusal", "model_context_window_exceeded"):
            # Asking again with the parse error cannot help: the fallback summary, at once.
            raise ModelError(f"the summary call stopped with {response.stop_reason}")
        message = response.message()
        return SummaryReply(text=message.text, usage=response.usage, tool_uses=message.tool_uses)

    return call


def _compaction_call(agent: Agent, static: StaticPrefix, clock: Callable[[], float] = time.monotonic
                     ) -> CompactionCall | None:
    """The API's on-demand compaction for ``agent``'s model (``context.api_compaction``), within the same
    budget as a summary; None for the simulated model in-process, which has none (a run through
    ``baton fake-api`` talks to the double, which has it)."""
    if agent.model.label == "simulated":
        return None
    config = agent.config
    time_left = _budget(config.model.summary_timeout_s, "compaction", clock)

    def call(asked: CompactionRequest, timeout_s: float) -> CompactionReply:
        left = time_left(timeout_s)
        # The steps' system, tools and thinking fields: the kept turns' thinking stays valid only when they
        # are the same as when it was produced, and the prefix the steps cached is read again.
        body = asked.to_request(static, model=config.model.name, max_tokens=config.model.summary_max_tokens)
        request = request_of(body, config.model, temperature=config.model.summary_temperature, betas=[COMPACT_BETA],
                             timeout_s=left, deadline_s=left, purpose="compaction", compaction=body["compaction"])
        with tracing.chat(request, agent.model.label) as traced:
            response = agent.model.create(request)
            tracing.reply(traced, response, cost=agent.cost)
        block = next((b for b in response.content if isinstance(b, CompactionBlock)), None)
        return CompactionReply(block=block, stop_reason=response.stop_reason, usage=response.usage)

    return call


def _facts(disk: AgentDisk) -> KnownFacts:
    """What baton knows for a fallback summary: the design, the latest evaluation report, the target."""
    layout, iteration = disk.layout, disk.iteration()
    out_dir = layout.outputs(iteration)
    folder = disk.folder
    if disk.agent == "init" and iteration > 1 and not folder.exists(out_dir / "report.json"):
        out_dir = layout.outputs(iteration - 1)  # Init redesigns from Execute's report of the iteration before
    report = folder.read_json_or_none(out_dir / "report.json", RECORD_BYTES)
    design = sorted(f"design/{name}" for name in folder.names(layout.design, kinds=("file",)))
    return KnownFacts(
        scenario=layout.name, iteration=iteration, design_files=design,
        last_report=report if isinstance(report, dict) else None,
        execution_output_dir=relative(layout.root, out_dir) if folder.is_dir(out_dir) else None,
        target_success_rate=_target(layout),
    )


def _target(layout: Layout) -> float | None:
    try:
        return load_scenario_config(layout.toml).target_success_rate
    except ConfigError:  # a broken scenario.toml costs the fallback its "stop" decision, never the compaction
        return None

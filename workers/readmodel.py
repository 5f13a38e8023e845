"""What the CLI knows about a scenario, read back from its folder only.

run.json, each agent's events.jsonl (and, in detail, its log and agent.json) and
scenario.toml are the whole truth: ``status`` works while workers run or after
they died, and a distributed run is followed the same way as an embedded one.
Every command and view reads the disk through here, nowhere else.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agents.agent import static_prefix
from agents.catalogue import PinnedModel, apply_pin
from agents.config import AgentConfig, ConfigError
from agents.disk import AgentDisk
from agents.events import (
    CompactionRecord,
    ErrorEvent,
    OutputCutEvent,
    PrewarmEvent,
    PromptTooLongEvent,
    StepEvent,
    WarningEvent,
)
from agents.settings_layers import load_scenario_config, resolve_agents
from context.assembly import Assembled
from proving.evaluation.report_file import ReportFile, read_report
from proving.export.tryout import read_tryout
from scenarios.folder import scenario_folders
from scenarios.run import RunRecord, load_run
from scenarios.store import AGENTS, Layout
from workers.app import broker_url, mask_secrets
from workers.pinning import pins_of
from workers.scenario_lock import Holder, holder
from workers.spend import read_spend

SIMULATED = "simulated"  # the model label of the offline simulated model
PING_TIMEOUT_S = 1.0  # how long `baton status` waits for workers to answer a ping
HANDOFF_TOOL = "SubmitHandoff"  # the tool that ends a turn (agents/tools/handoff.py)


@dataclass
class StepPoint:
    """One step of the context timeline. ``estimated`` is baton's calibrated estimate of the request's input,
    the number compaction decides on and ``status`` shows; ``measured`` is what the API's usage reported
    for it (input + cache writes + cache reads; the simulated model's usage is itself an estimate)."""

    step: int
    iteration: int
    estimated: int
    measured: int | None
    handoff: bool
    at: str


def measured_input(usage: dict[str, Any]) -> int | None:
    parts = [usage.get(key) for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    return sum(p for p in parts if isinstance(p, int)) if isinstance(parts[0], int) else None


@dataclass
class ThinkingTally:
    """What the steps did with preserved thinking (agents/events.StepEvent; docs/agents.md, "Thinking and the
    prefix"): blocks sent back valid, left out by baton, produced, dropped by the API after all; requests that
    extended the previous one exactly, and breaks of the prefix the engine did not plan."""

    sent: int = 0
    left_out: int = 0
    produced: int = 0
    dropped: int = 0
    compared: int = 0  # requests with a previous one to compare with
    extended: int = 0
    unplanned: int = 0

    def add(self, event: StepEvent) -> None:
        self.sent += event.thinking_sent
        self.left_out += event.thinking_left_out
        self.produced += event.thinking_produced
        self.dropped += event.thinking_dropped
        if event.prefix_extends is not None:
            self.compared += 1
            self.extended += event.prefix_extends
            self.unplanned += not event.prefix_extends and not event.view_changed

    def line(self) -> str | None:
        if not self.produced:
            return None
        share = f"{self.extended}/{self.compared} requests extended the previous one exactly" if self.compared else ""
        planned = f" ({self.unplanned} unplanned break(s))" if self.compared else ""
        dropped = f", {self.dropped} dropped by the API (baton's check missed them)" if self.dropped else ""
        return (f"thinking: {self.produced} block(s) produced, {self.sent} sent back valid, {self.left_out} left out "
                f"(prefix changed){dropped}; {share}{planned}")


@dataclass
class ContextTally:
    """Which context strategies ran (issue 32): compactions by the API or by baton, requests that asked the server
    for context editing and what it cleared, 1-hour breakpoints and pre-warms at handoffs."""

    api_compactions: int = 0
    own_compactions: int = 0
    fell_back: list[str] = field(default_factory=list)  # why an API compaction was not used, by event
    edited: int = 0  # requests that asked for context editing (compressor "api")
    cleared: int = 0  # input tokens the server cleared from them
    one_hour: int = 0
    prewarms: int = 0

    def add(self, event: Any) -> None:
        if isinstance(event, StepEvent):
            self.edited += event.cleared_input is not None
            self.cleared += event.cleared_input or 0
            self.one_hour += event.cache_ttl == "1h"
        elif isinstance(event, CompactionRecord):
            api = getattr(event, "strategy", "summary") == "api"
            self.api_compactions += api
            self.own_compactions += not api
            if not api and event.error and "API's compaction was not used" in event.error:
                self.fell_back.append(event.error)
        elif isinstance(event, PrewarmEvent):
            self.prewarms += 1

    def line(self) -> str | None:
        """The strategies that ran, in words; None when only baton's defaults did, with nothing to say."""
        parts = []
        if self.api_compactions or self.fell_back:
            parts.append(f"compactor api: {self.api_compactions} compaction(s) by the API"
                         + (f", {len(self.fell_back)} fell back to baton's own summary" if self.fell_back else ""))
        elif self.own_compactions:
            parts.append(f"compactor summary: {self.own_compactions} compaction(s) by baton's own summary")
        if self.edited:
            parts.append(f"compressor api: context editing asked on {self.edited} request(s), "
                         f"{self.cleared:,} input tokens cleared by the server")
        if self.one_hour or self.prewarms:
            parts.append(f"cache: {self.one_hour} request(s) with 1-hour breakpoints, {self.prewarms} pre-warm(s) "
                         "at a handoff")
        return "context: " + "; ".join(parts) if parts else None


@dataclass
class AgentView:
    """What one agent's events.jsonl (and, in detail, its log and state) say."""

    role: str
    steps: int = 0
    estimated: int | None = None
    threshold: int | None = None
    model: str = ""
    points: list[tuple[int, int]] = field(default_factory=list)  # (step, estimated input)
    timeline: list[StepPoint] = field(default_factory=list)
    last_step_at: str | None = None  # when the last step's call ended (its event's time)
    compactions: list[CompactionRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    breaker: str = "ok"
    thinking: ThinkingTally = field(default_factory=lambda: ThinkingTally())
    context: ContextTally = field(default_factory=lambda: ContextTally())

    @property
    def fallbacks(self) -> int:
        return sum(c.fallback for c in self.compactions)

    @property
    def api_compactions(self) -> int:
        """Compactions the API wrote (on-demand compaction, ``context.api_compaction``); events written before
        the strategy was recorded are baton's own summaries."""
        return sum(getattr(c, "strategy", "summary") == "api" for c in self.compactions)


def read_agent(root: Path, role: str, detailed: bool = False) -> AgentView:
    # The events with those a crash left owed (derived from the log), so no step goes uncounted.
    disk = AgentDisk.load(root, role)  # type: ignore[arg-type]
    view = AgentView(role, problems=disk.problems)
    for event in disk.events:
        view.context.add(event)
        if isinstance(event, StepEvent):
            view.steps += 1
            view.estimated, view.threshold = event.estimated_input, event.threshold
            view.model = event.model or view.model
            view.points.append((event.step, event.estimated_input))
            view.timeline.append(StepPoint(event.step, event.iteration, event.estimated_input,
                                           measured_input(event.usage), HANDOFF_TOOL in event.tools, event.at))
            view.last_step_at = event.at
            view.thinking.add(event)
        elif isinstance(event, CompactionRecord):
            view.compactions.append(event)
        elif isinstance(event, WarningEvent):
            view.warnings.append(f"step {event.after_step}: {event.reason}")
        elif isinstance(event, PromptTooLongEvent):
            view.warnings.append(f"step {event.step}: {event.detail}")
        elif isinstance(event, OutputCutEvent):
            then = f"asked again with max_tokens {event.retry_max_tokens}" if event.retry_max_tokens else \
                "its tool calls did not run; the agent was told to split the work"
            view.warnings.append(f"step {event.step}: the reply was cut at max_tokens {event.max_tokens}; {then}")
        elif isinstance(event, ErrorEvent):
            view.errors.append(f"step {event.step}: {event.reason}")
    if detailed:
        view.breaker = disk.state.breaker.status
        for note in disk.folder.read_jsonl(disk.layout.state(role) / "discarded.jsonl").records:  # scenarios.lease
            view.warnings.append(f"step {note.get('step')}: a writer that lost its lease was stopped, its work "
                                 f"discarded ({note.get('at')}); the newer writer went on")
    return view


@dataclass
class Snapshot:
    """One look at a scenario: its run record and both agents."""

    root: Path
    record: RunRecord | None
    agents: dict[str, AgentView]

    @classmethod
    def read(cls, root: Path, detailed: bool = False) -> Snapshot:
        return cls(root, load_run(root), {role: read_agent(root, role, detailed) for role in AGENTS})

    @property
    def simulated(self) -> bool:
        return any(a.model == SIMULATED for a in self.agents.values())

    @property
    def pins(self) -> dict[str, PinnedModel]:
        """Each agent's model on the real API, as pinned in run.json."""
        return pins_of(self.record)


@dataclass
class Activity:
    """Whether anything is moving a scenario on: when its last step ran and who is alive to run the next.

    ``workers`` is None when no broker is configured (nothing to ask), else the names of the workers
    that answered a ping (any scenario's workers: a ping does not say what a worker is doing);
    ``broker_problem`` says why they could not be asked."""

    last_step_at: str | None
    last_step: str | None  # e.g. "execute step 12"
    embedded: Holder | None
    workers: list[str] | None
    broker_problem: str | None = None

    @property
    def seconds_since_last_step(self) -> float | None:
        if self.last_step_at is None:
            return None
        return (datetime.now(timezone.utc) - datetime.fromisoformat(self.last_step_at)).total_seconds()

    @property
    def alive(self) -> bool:
        return self.embedded is not None or bool(self.workers)

    def as_json(self) -> dict[str, Any]:
        return {"last_step_at": self.last_step_at, "last_step": self.last_step,
                "seconds_since_last_step": self.seconds_since_last_step,
                "embedded_run": None if self.embedded is None else self.embedded.__dict__,
                "workers": self.workers, "broker_problem": self.broker_problem, "alive": self.alive}


def read_activity(snap: Snapshot, workers: list[str] | None | str = "ask") -> Activity:
    """``snap``'s activity; ``workers`` already asked (one ping serves every row of ``status``) or "ask"."""
    latest: tuple[str, str] | None = None
    for view in snap.agents.values():
        marks = [(p.at, f"{view.role} step {p.step}") for p in view.timeline[-1:]]
        marks += [(c.at, f"{view.role} compaction #{c.id}") for c in view.compactions[-1:]]
        for at, what in marks:
            if parse_time(at) is not None and (latest is None or parse_time(at) > parse_time(latest[0])):
                latest = (at, what)
    problem = None
    if workers == "ask":
        workers, problem = ping_workers()
    return Activity(latest[0] if latest else None, latest[1] if latest else None, holder(snap.root),
                    workers if not isinstance(workers, str) else None, problem)


def parse_time(at: str) -> datetime | None:
    """An event's time; None when it has none or an unreadable one (a hand-edited or foreign line)."""
    try:
        return datetime.fromisoformat(at)
    except (TypeError, ValueError):
        return None


def ping_workers() -> tuple[list[str] | None, str | None]:
    """The workers answering a ping (None without a broker), and why they could not be asked."""
    if broker_url() is None:
        return None, None
    from workers.app import app  # Celery: only when a broker is configured

    try:
        replies = app.control.inspect(timeout=PING_TIMEOUT_S).ping() or {}
    except Exception as exc:  # noqa: BLE001 - any broker failure means "could not ask", never a failed status
        return [], mask_secrets(f"{exc.__class__.__name__}: {exc}")
    return sorted(replies), None


def scenario_roots(folder: Path) -> list[Path]:
    """The scenario folders in ``folder``: those with a scenario.toml."""
    return scenario_folders(folder)


def status_json(root: Path) -> dict[str, Any]:
    """``baton status --json``: what status shows, as data (the spend in ``workers.spend``'s shape)."""
    snap = Snapshot.read(root, detailed=True)
    agents = {role: {"model": view.model, "steps": view.steps, "estimated_input": view.estimated,
                     "threshold": view.threshold, "compactions": len(view.compactions), "fallbacks": view.fallbacks,
                     "api_compactions": view.api_compactions,
                     "breaker": view.breaker, "warnings": view.warnings, "errors": view.errors,
                     "problems": view.problems, "thinking": asdict(view.thinking)}
              for role, view in snap.agents.items()}
    return {"scenario": root.name, "run": snap.record.model_dump(mode="json") if snap.record else None,
            "agents": agents, "models": {role: pin.model_dump(mode="json") for role, pin in snap.pins.items()},
            "spend": read_spend(root).model_dump(mode="json"), "scenario_toml_problem": toml_problem(root),
            "activity": read_activity(snap).as_json(), "tryouts": tryouts_json(root, snap.record),
            "reports": {str(n): found.as_json() for n, found in read_reports(root, snap.record).items()}}


def read_reports(root: Path, record: RunRecord | None) -> dict[int, ReportFile]:
    """Each judged iteration's report.json as it is now (missing, damaged or read): what status shows of it."""
    return {r.iteration: read_report(root, r.iteration) for r in (record.results if record else [])}


def tryouts_json(root: Path, record: RunRecord | None) -> dict[str, Any]:
    """Each iteration's last ``baton try``, by iteration number."""
    found = {r.iteration: read_tryout(root, r.iteration) for r in (record.results if record else [])}
    return {str(n): t.model_dump(mode="json") for n, t in found.items() if t is not None}


def context_json(root: Path, role: str, assembled: Any, policy: Any, view: AgentView) -> dict[str, Any]:
    """``baton context --json``: the next request by layer, and the timeline behind the PNG.

    Every size is in tokens. ``next_request.estimated_input`` is the calibrated estimate of the call the agent
    would make now; ``last_step.estimated_input`` is the one its last call was decided on (what ``status``
    shows); ``measured_input`` is the API's usage for a call (input + cache writes + cache reads)."""
    last = view.timeline[-1] if view.timeline else None
    return {
        "scenario": root.name, "agent": role, "threshold": policy.threshold, "window": policy.window,
        "next_request": {"layers": dict(assembled.layers), "raw_tokens": assembled.raw_tokens,
                         "estimated_input": assembled.estimated_input,
                         "steps": {"compressed": assembled.compressed_steps, "verbatim": assembled.verbatim_steps,
                                   "trimmed": assembled.trimmed_steps}},
        "last_step": None if last is None else {"step": last.step, "at": last.at, "threshold": view.threshold,
                                                "estimated_input": last.estimated, "measured_input": last.measured},
        "timeline": [{"step": p.step, "iteration": p.iteration, "estimated_input": p.estimated,
                      "measured_input": p.measured, "handoff": p.handoff} for p in view.timeline],
        "compactions": [{"number": c.id, "after_step": c.after_step, "tokens_before": c.tokens_before,
                         "tokens_after": c.tokens_after, "fallback": c.fallback} for c in view.compactions],
    }


def reading_config(root: Path, role: str, profile: str | None = None) -> AgentConfig:
    """An agent's settings as its run resolves them (the run's profile, its pinned model), without building a
    model: what read-only commands show, offline or not, whatever the brief."""
    record = load_run(root)
    config = resolve_agents(root, profile=profile or (record.profile if record else None))[role]
    pin = pins_of(record).get(role)
    return apply_pin(config, pin) if pin else config


def first_request(config: AgentConfig, root: Path) -> Assembled:
    """What an agent that has not run yet would send before its opening: its system prompt and tools."""
    tokens = static_prefix(config, root).tokens
    return Assembled(messages=[], breakpoints=[], layers={"system_and_tools": tokens}, estimated_input=tokens,
                     compressed_steps=0, verbatim_steps=0)


def toml_problem(root: Path) -> str | None:
    """Why scenario.toml does not load, or None when it does."""
    try:
        load_scenario_config(Layout(root).toml)
    except ConfigError as exc:
        return str(exc)
    return None

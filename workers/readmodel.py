"""What the CLI knows about a scenario, read back from its folder only.

run.json, each agent's events.jsonl (and, in detail, its log and agent.json) and
scenario.toml are the whole truth: ``status`` works while workers run or after
they died, and a distributed run is followed the same way as an embedded one.
Every command and view reads the disk through here, nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.catalogue import PinnedModel
from agents.config import ConfigError
from agents.disk import AgentDisk
from agents.events import (
    CompactionRecord,
    ErrorEvent,
    OutputCutEvent,
    PromptTooLongEvent,
    StepEvent,
    WarningEvent,
    read_events,
)
from agents.settings_layers import load_scenario_config
from scenarios.run import RunRecord, load_run
from scenarios.store import AGENTS, Layout
from workers.pinning import pins_of
from workers.spend import read_spend

SIMULATED = "simulated"  # the model label of the offline simulated model


@dataclass
class AgentView:
    """What one agent's events.jsonl (and, in detail, its log and state) say."""

    role: str
    steps: int = 0
    estimated: int | None = None
    threshold: int | None = None
    model: str = ""
    points: list[tuple[int, int]] = field(default_factory=list)  # (step, estimated input)
    compactions: list[CompactionRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    breaker: str = "ok"

    @property
    def fallbacks(self) -> int:
        return sum(c.fallback for c in self.compactions)


def read_agent(root: Path, role: str, detailed: bool = False) -> AgentView:
    events, problems = read_events(Layout(root).events(role))
    view = AgentView(role, problems=problems)
    for event in events:
        if isinstance(event, StepEvent):
            view.steps += 1
            view.estimated, view.threshold = event.estimated_input, event.threshold
            view.model = event.model or view.model
            view.points.append((event.step, event.estimated_input))
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
    if detailed:  # the log and agent.json: only status needs them, and the log can be large
        disk = AgentDisk.load(root, role)  # type: ignore[arg-type]
        view.problems += disk.problems
        view.breaker = disk.state.breaker.status
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


def scenario_roots(folder: Path) -> list[Path]:
    """The scenario folders in ``folder``: those with a scenario.toml."""
    return sorted(p for p in folder.glob("*") if (p / "scenario.toml").is_file()) if folder.is_dir() else []


def status_json(root: Path) -> dict[str, Any]:
    """``baton status --json``: what status shows, as data (the spend in ``workers.spend``'s shape)."""
    snap = Snapshot.read(root, detailed=True)
    agents = {role: {"model": view.model, "steps": view.steps, "estimated_input": view.estimated,
                     "threshold": view.threshold, "compactions": len(view.compactions), "fallbacks": view.fallbacks,
                     "breaker": view.breaker, "warnings": view.warnings, "errors": view.errors,
                     "problems": view.problems} for role, view in snap.agents.items()}
    return {"scenario": root.name, "run": snap.record.model_dump(mode="json") if snap.record else None,
            "agents": agents, "models": {role: pin.model_dump(mode="json") for role, pin in snap.pins.items()},
            "spend": read_spend(root).model_dump(mode="json"), "scenario_toml_problem": toml_problem(root)}


def toml_problem(root: Path) -> str | None:
    """Why scenario.toml does not load, or None when it does."""
    try:
        load_scenario_config(Layout(root).toml)
    except ConfigError as exc:
        return str(exc)
    return None

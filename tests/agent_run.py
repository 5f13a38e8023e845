"""Helpers to run the simulated agents on a copy of the example scenario."""

from __future__ import annotations

import json
from pathlib import Path

from agents.agent import Agent
from agents.disk import AgentDisk, open_turn
from agents.openings import execute_opening, init_opening
from agents.outcomes import StepOutcome
from agents.payloads import parse_payload_dict
from agents.settings_layers import resolve_config
from agents.simulated import SimulatedModel
from agents.step import Fault, run_turn
from context.protocol import validate
from scenarios.run import RunRecord, copy_scenario, save_run

EXAMPLE = Path(__file__).resolve().parent.parent / "scenarios" / "refund_desk"


def copy_example(tmp_path: Path) -> Path:
    return copy_scenario(EXAMPLE, tmp_path / "refund_desk")


def started_example(tmp_path: Path, toml_extra: str = "") -> Path:
    """A copy of the example with ``toml_extra`` appended to its scenario.toml and a run.json, as a run begins."""
    root = copy_example(tmp_path)
    if toml_extra:
        (root / "scenario.toml").write_text((root / "scenario.toml").read_text() + toml_extra)
    save_run(root, RunRecord(scenario=root.name))
    return root


def agents(root: Path, model: SimulatedModel | None = None, profile: str = "demo") -> dict[str, Agent]:
    model = model or SimulatedModel()
    return {
        role: Agent(resolve_config(role, scenario_toml=root / "scenario.toml", env={}, profile=profile), model)
        for role in ("init", "execute")
    }


def handoff(root: Path, iteration: int, kind: str):
    path = root / "handoffs" / f"iteration_{iteration}" / f"{kind}_context.json"
    return parse_payload_dict(kind, json.loads(path.read_text()))


class Crash(Exception):
    """Stands for the process dying at a fault point."""


def crash_once_per_step(point: str):
    """A fault that crashes the first time each step reaches ``point``."""
    crashed: set[int] = set()

    def fault(at: str, step: int) -> None:
        if at == point and step not in crashed:
            crashed.add(step)
            raise Crash(f"{at} in step {step}")

    fault.crashed = crashed  # type: ignore[attr-defined]
    return fault


def turn_surviving_crashes(root: Path, agent: Agent, fault: Fault | None) -> StepOutcome:
    """run_turn, restarted from disk after every crash (what a re-delivered task does)."""
    for _ in range(500):
        try:
            return run_turn(root, agent, **({"fault": fault} if fault else {}))
        except Crash:
            continue
    raise AssertionError("the turn never finished")


def run_iteration(
    root: Path, team: dict[str, Agent], iteration: int, fault: Fault | None = None
) -> tuple[StepOutcome, StepOutcome]:
    """Init designs (from the brief, or from Execute's last report), then Execute evaluates."""
    report = handoff(root, iteration - 1, "execute_to_init") if iteration > 1 else None
    open_turn(root, "init", iteration, init_opening(root.name, iteration, report=report), key=f"iteration-{iteration}")
    init_out = turn_surviving_crashes(root, team["init"], fault)
    assert init_out.status == "handoff", init_out
    open_turn(
        root,
        "execute",
        iteration,
        execute_opening(handoff(root, iteration, "init_to_execute")),
        key=f"iteration-{iteration}",
    )
    execute_out = turn_surviving_crashes(root, team["execute"], fault)
    assert execute_out.status == "handoff", execute_out
    return init_out, execute_out


def assert_log_consistent(root: Path, role: str) -> AgentDisk:
    """The log replays into a valid view; steps are numbered 1..n with one response and at most one
    results record each."""
    disk = AgentDisk.load(root, role)
    assert not disk.problems, disk.problems
    validate(disk.history().view, allow_pending=False)
    steps = [r.step for r in disk.steps]
    assert steps == list(range(1, len(steps) + 1)), steps
    results = [r.step for r in disk.records if r.kind == "results"]
    assert len(results) == len(set(results)), "a step's results were persisted twice"
    return disk

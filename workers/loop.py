"""The iteration loop (docs/architecture.md) as a state machine over the scenario folder.

No Celery here: every function reads the disk, does one thing, writes the disk
and returns the ``Task``s that should run next. The Celery tasks and the
embedded runner only execute those tasks and dispatch what they return, so
both run exactly the same loop.

designing (Init) -> awaiting_approval (HITL-1; skipped with auto_approve)
-> executing (Execute) -> proving (the gates of proving.evaluation.gates, a task of
its own on the execute queue: they may take tens of seconds) -> done when every
target is met (workers.targets), else back to designing with Execute's report and
the gates' findings, until max_iterations.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.agent import Agent, check_threshold
from agents.backends import check_model, model_for, scenario_brief
from agents.catalogue import apply_pin
from agents.compaction_task import run_compaction
from agents.config import BUILT_IN, ConfigError
from agents.conventions import conventions_for
from agents.disk import AgentDisk, open_turn
from agents.handoff_figures import figure_differences, report_figures
from agents.mentions import mention_note
from agents.models import Model
from agents.openings import execute_opening, init_opening
from agents.outcomes import CompactionOutcome, StepOutcome
from agents.payloads import ExecuteToInit, InitToExecute, parse_payload_dict
from agents.pricing import price_for
from agents.role import Role
from agents.settings_layers import (
    load_scenario_config,
    proving_settings,
    resolve_agents,
    scenario_prices,
    setting_sources,
)
from agents.step import compaction_before, run_step
from agents.tools.handoff import KIND, handoff_path
from proving.evaluation.gate_shards import prove_in_shards
from proving.evaluation.gates import ProvingSettings
from proving.evaluation.quality import Quality
from proving.evaluation.report_file import raw_report  # noqa: F401 - also the loop's to its callers
from scenarios.folder import EVERY, RECORD_BYTES, Folder
from scenarios.lease import Lease, LeaseLost
from scenarios.run import IterationResult, RunRecord, archive_run, claim_run, example_copied, load_run, save_run
from scenarios.store import Layout, StoreError, check_name
from workers.pinning import pin_models
from workers.targets import figure_summary, unmet_targets
from workers.task_spec import Task  # noqa: F401 - the loop's unit of work, named here by its callers

SCENARIOS_ENV = "BATON_SCENARIOS_DIR"
REQUIRED = ("totals.samples", "totals.passed", "success_rate")  # report.json figures "done" is decided on
log = logging.getLogger(__name__)


def scenarios_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(SCENARIOS_ENV) or "scenarios").resolve()


def scenario_root(name: str, env: Mapping[str, str] | None = None) -> Path:
    root = scenarios_dir(env) / check_name(name)
    if not Folder(root).is_file("scenario.toml"):
        raise StoreError(f"unknown scenario {name!r}: no {root}/scenario.toml; create it with `baton new {name}`")
    return root


class Team:
    """The two agents of one scenario, built once per process from its settings."""

    def __init__(
        self, root: Path, model: Model | None = None, profile: str | None = None, env: Mapping[str, str] | None = None
    ):
        if profile is None:  # the run keeps its profile: a resumed or approved run must not change windows
            record = load_run(root)
            profile = record.profile if record else None
        configs = resolve_agents(root, env=env, profile=profile)
        brief = scenario_brief(root)  # offline, the simulated model plays the script of this brief, or refuses it
        # A model someone named is never replaced by the simulated one (model_for): where the setting came from.
        named = {role: setting_sources(root, role, env, profile).get("model") for role in configs} \
            if model is None else {}
        models = {role: model or model_for(config, env, brief, named[role]) for role, config in configs.items()}
        # On the real API each agent runs on the model pinned for this run (resolved from its line once).
        pins = pin_models(root, configs, models, os.environ if env is None else env)
        configs = {role: apply_pin(config, pins[role]) if role in pins else config for role, config in configs.items()}
        prices = scenario_prices(root)  # read once here, not on every step
        self.agents: dict[str, Agent] = {
            role: Agent(config, models[role], price_for(config.model.name, prices)) for role, config in configs.items()
        }

    def __getitem__(self, role: str) -> Agent:
        return self.agents[role]


# ---- starting, approving, resuming ------------------------------------------------------


def check_settings(root: Path, profile: str | None = None, env: Mapping[str, str] | None = None) -> None:
    """Resolve every setting the run will use (scenario.toml, profile, environment), so a bad one stops a
    command with ConfigError before it has written anything (run.json, state/); likewise a model that
    cannot drive this brief (ModelError: offline, a brief the simulated model has no script for)."""
    record = load_run(root)
    toml = Layout(root).toml
    if (named := load_scenario_config(toml).name) != root.name:
        raise ConfigError(f"{toml}: name = {named!r} is not the folder's name {root.name!r}, which is the scenario's "
                          f"name everywhere (commands, workers, openings); set name = {root.name!r}")
    chosen = profile or (record.profile if record else None)
    configs = resolve_agents(root, env=env, profile=chosen)
    brief = scenario_brief(root)
    for role, config in configs.items():
        sources = setting_sources(root, role, env, chosen)
        check_model(config, brief, env, f"{root.name}/brief.md", sources.get("model"))
        check_threshold(config, root, sources.get("threshold", BUILT_IN))
    conventions_for(root)  # a CONVENTIONS.md that exists but cannot be used stops here, naming the file


def start(root: Path, *, auto_approve: bool = False, profile: str | None = None) -> list[Task]:
    """Begin a run, or continue an unfinished one (an error included) from disk."""
    record = load_run(root)
    if record is not None and record.phase != "done":
        lease, record = _claimed(root)
        assert record is not None
        update = {"auto_approve": record.auto_approve or auto_approve, "profile": profile or record.profile}
        save_run(root, record.model_copy(update=update), lease)
        return resume(root)
    settings = load_scenario_config(Layout(root).toml)
    archive_run(root)  # a finished run, or leftovers without a run.json, move aside whole
    save_run(root, RunRecord(scenario=root.name, auto_approve=auto_approve, profile=profile,
                             max_iterations=settings.max_iterations, target_success_rate=settings.target_success_rate,
                             target_floor=settings.target_floor, target_solvable_share=settings.target_solvable_share,
                             target_coverage=settings.target_coverage),
             claim_run(root))
    return resume(root)


def _claimed(root: Path) -> tuple[Lease, RunRecord | None]:
    """The run's lease, then run.json as it is now: whatever is written from it lands only while the lease holds
    (a phase task frozen between its read and its write must not put an old run.json back)."""
    lease = claim_run(root)
    return lease, load_run(root)


def resume(root: Path) -> list[Task]:
    """What should run now, derived from the disk alone (after a crash or a stop)."""
    record = load_run(root)
    if record is None:
        raise StoreError(f"{root.name} has never run; start it with `baton run {root.name}`")
    if record.status == "error":
        lease, record = _claimed(root)
        assert record is not None
        record = save_run(root, record.model_copy(update={"status": "running", "last_error": None}), lease)
    if record.phase == "proving":
        return [Task(kind="proving", scenario=root.name)]  # gates cut short run again (or decide on what they wrote)
    agent: Role | None = {"designing": "init", "executing": "execute"}.get(record.phase)  # type: ignore[assignment]
    if agent is None:
        return []
    _ensure_opening(root, record)
    disk = AgentDisk.load(root, agent)
    if disk.turn_over():
        return [Task(kind="phase", scenario=root.name)]
    return [Task(kind="step", scenario=root.name, agent=agent, number=disk.due())]


def _ensure_opening(root: Path, record: RunRecord) -> None:
    """Open the current phase's turn unless it is open already (idempotent by key), so a
    crash between saving run.json and opening the turn is repaired by resume."""
    n, example = record.iteration, example_copied(root)
    if record.phase == "executing":
        payload = handoff_payload(root, n, "init")
        assert isinstance(payload, InitToExecute)
        open_turn(root, "execute", n, execute_opening(payload, example), key=f"iteration-{n}")
        return
    if record.feedback is not None:
        rejections = len(Folder(root).names(Layout(root).handoffs(n), "rejection_*.json", kinds=EVERY))
        text = init_opening(root.name, n, feedback=record.feedback, note=mention_note(root, record.feedback),
                            example=example)
        open_turn(root, "init", n, text, key=f"iteration-{n}-rejection-{rejections}")
        return
    report = handoff_payload(root, n - 1, "execute") if n > 1 else None
    assert report is None or isinstance(report, ExecuteToInit)
    # The brief is Init's to read (the opening names it); the files it mentions are noted here.
    note = mention_note(root, _brief_text(root)) if report is None else None
    gates = _gates_for_init(root, record, n - 1) if report is not None else None
    text = init_opening(root.name, n, report=report, note=note, example=example, gates=gates)
    open_turn(root, "init", n, text, key=f"iteration-{n}")


def _gates_for_init(root: Path, record: RunRecord, iteration: int) -> dict[str, Any] | None:
    """What the gates said of ``iteration`` for Init's next opening: its findings (each with its class), the
    figures and the targets missed; None when no gate ran on it (a run from before the gates)."""
    try:
        report = raw_report(root, iteration)
        quality = Quality.model_validate(report["quality"]) if "quality" in report else None
    except (StoreError, ValueError):
        quality = None
    result = next((r for r in record.results if r.iteration == iteration), None)
    if quality is None:
        return None
    return {"quality": {"figures": figure_summary(quality), "unmet_targets": result.unmet if result else []},
            "findings": [finding.as_json() for finding in quality.findings]}


def _brief_text(root: Path) -> str | None:
    try:
        return Folder(root).read_text(Layout(root).brief, RECORD_BYTES)
    except (OSError, StoreError):
        return None  # Init reads the brief itself and meets the problem there


def approve(root: Path) -> list[Task]:
    lease, record = _expect_phase(root, "awaiting_approval", "approve")
    Folder(root).write_json(
        Layout(root).handoffs(record.iteration) / "approval.json", {"approved": True, "iteration": record.iteration},
        lease,
    )
    return _open_execute(root, record, lease)


def reject(root: Path, feedback: str) -> list[Task]:
    if not feedback.strip():
        raise StoreError("a rejection needs feedback for Init: pass --feedback 'what to change'")
    lease, record = _expect_phase(root, "awaiting_approval", "reject")
    rejections = len(Folder(root).names(Layout(root).handoffs(record.iteration), "rejection_*.json", kinds=EVERY)) + 1
    Folder(root).write_json(
        Layout(root).handoffs(record.iteration) / f"rejection_{rejections}.json",
        {"approved": False, "feedback": feedback}, lease,
    )
    save_run(root, record.model_copy(update={"phase": "designing", "status": "running", "feedback": feedback}), lease)
    return resume(root)


def _expect_phase(root: Path, phase: str, verb: str) -> tuple[Lease, RunRecord]:
    record = load_run(root)
    if record is None or record.phase != phase:  # checked before claiming: a refused command takes nothing
        now = record.phase if record else "not started"
        raise StoreError(f"cannot {verb} {root.name}: it is {now}, not {phase}")
    lease, record = _claimed(root)
    if record is None or record.phase != phase:
        raise StoreError(f"cannot {verb} {root.name}: it moved on meanwhile; see `baton status {root.name}`")
    return lease, record


# ---- the tasks ---------------------------------------------------------------------------


def do_step(root: Path, team: Team, agent: Role, number: int | None) -> tuple[StepOutcome, list[Task]]:
    outcome = run_step(root, team[agent], number)
    return outcome, after_step(root, agent, outcome)


def after_step(root: Path, agent: Role, outcome: StepOutcome) -> list[Task]:
    name = root.name
    if outcome.status == "continue":
        return [Task(kind="step", scenario=name, agent=agent, number=outcome.step + 1)]
    if outcome.status == "compaction_needed":
        return [Task(kind="compaction", scenario=name, agent=agent, number=outcome.step - 1)]
    if outcome.status == "handoff":
        return [Task(kind="phase", scenario=name)]
    if outcome.status == "failed":
        lease, record = _claimed(root)
        if record is not None:
            update = {"status": "error", "last_error": f"{agent}: {outcome.reason}"}
            save_run(root, record.model_copy(update=update), lease)
    return []  # skipped (a duplicate) or idle: nothing follows


def record_failure(root: Path, error: str) -> None:
    """A run that could not go on (its models could not be built, say): run.json says so, so that it does
    not look alive; ``baton resume`` re-opens it."""
    lease, record = _claimed(root)
    if record is not None and not record.finished:
        save_run(root, record.model_copy(update={"status": "error", "last_error": error}), lease)


def do_compaction(root: Path, team: Team, agent: Role, after: int | None) -> tuple[CompactionOutcome, list[Task]]:
    outcome = run_compaction(root, team[agent], after)
    if outcome.skip in ("stale", "lease_lost"):
        return outcome, []  # a newer task owns this agent now
    return outcome, [Task(kind="step", scenario=root.name, agent=agent, number=outcome.after_step + 1)]


def do_phase(root: Path, team: Team | None = None) -> list[Task]:
    """Move to the next phase once the current agent's handoff is on disk (idempotent). With the ``team``, the
    first step of the turn that opens is sent as the compaction it must wait for, if it must (``first_steps``)."""
    record = load_run(root)
    if record is None or record.finished:
        return []  # a duplicate after the end: answered from a plain read, claiming nothing
    lease, record = _claimed(root)
    try:
        following = _next_phase(root, record, lease) if record is not None and not record.finished else []
    except LeaseLost as exc:  # a newer writer (a command, another phase task) moved the run on meanwhile
        log.warning("%s: phase change discarded: %s", root.name, exc)
        return []
    return following if team is None else first_steps(root, team, following)


def first_steps(root: Path, team: Team, tasks: list[Task]) -> list[Task]:
    """``tasks``, each step that must wait for a compaction replaced by that compaction (the step follows it).

    Every later step is decided for by the step before it (``agents.step_request.compaction_first``); the first
    step of a turn has none, and its turn's opening may be what tips its context over the threshold. Without
    this, that step would be sent, ask for the compaction, and be sent again after it."""
    out: list[Task] = []
    for task in tasks:
        asked = None
        if task.kind == "step":
            assert task.agent is not None and task.number is not None  # a step task has both (Task._complete)
            asked = compaction_before(root, team[task.agent], task.number)
        out += [task] if asked is None else after_step(root, asked.agent, asked)
    return out


def _next_phase(root: Path, record: RunRecord, lease: Lease) -> list[Task]:
    if (
        record.phase == "designing"
        and Folder(root).is_file(handoff_file(root, record.iteration, "init"))
        and AgentDisk.load(root, "init").turn_over()
    ):
        if record.auto_approve:
            return _open_execute(root, record, lease)
        save_run(root, record.model_copy(update={"phase": "awaiting_approval", "status": "waiting"}), lease)
        return []
    if record.phase == "executing" and Folder(root).is_file(handoff_file(root, record.iteration, "execute")):
        return _after_execute(root, record, lease)
    return []


def _after_execute(root: Path, record: RunRecord, lease: Lease) -> list[Task]:
    payload = handoff_payload(root, record.iteration, "execute")
    assert isinstance(payload, ExecuteToInit)
    # "Done" is decided on the evaluation's own figures (report.json), never on the payload's claim; the two
    # agreed when SubmitHandoff accepted it, so a difference now means a file was changed after the handoff.
    report = _report(root, record.iteration)
    differences = figure_differences(payload, report)
    if differences or report.get("only"):
        why = "; ".join(differences) or "report.json covers a re-run of some samples only"
        error = (f"execute: the handoff of iteration {record.iteration} does not match "
                 f"execution_outputs/iteration_{record.iteration}/report.json ({why}); the run did not decide "
                 "on it. Re-run the evaluation so the report is current, then `baton resume`")
        save_run(root, record.model_copy(update={"status": "error", "last_error": error}), lease)
        return []
    rate = float(report["success_rate"])
    result = IterationResult(iteration=record.iteration, success_rate=rate,
                             passed=report["passed"], total=report["total"])
    results = [r for r in record.results if r.iteration != record.iteration] + [result]
    save_run(root, record.model_copy(update={"phase": "proving", "results": results}), lease)
    return resume(root)


def do_proving(root: Path, team: Team | None = None, env: Mapping[str, str] | None = None,
               split: bool = False) -> list[Task]:
    """Run the gates on the iteration Execute handed off, write their ``quality`` into its report.json and decide:
    done when every target is met, else the next design (with the findings) or the end at max_iterations.

    The gates run by shard (workers/gate_loop.py): ``split``, the gate tasks of the shards not done are returned
    to be run by any worker (each sends this task again when the last is done); otherwise they run here first.
    Either way the decision is made on the merge of the shards' files. The gates run before the run's lease is
    claimed (they may take tens of seconds, and only read); the write and the decision happen under it. A
    report that already carries ``quality`` (a task cut short after writing it, or a duplicate) is decided on
    as it is."""
    from workers.gate_loop import plan_or_quality  # it imports this module
    record = load_run(root)
    if record is None or record.finished or record.phase != "proving":
        return []  # a duplicate, or a run that moved on: answered from a plain read, claiming nothing
    n = record.iteration
    try:
        settings = proving_settings(root, env)
        raw = raw_report(root, n)
        if "quality" in raw:
            quality = Quality.model_validate(raw["quality"])
        elif split:
            shards, merged = plan_or_quality(root, n, settings)
            if merged is None:
                return shards
            quality = merged
        else:
            quality = prove_in_shards(root, n, settings)
    except (ConfigError, StoreError, ValueError) as exc:
        lease, record = _claimed(root)
        if record is not None and record.phase == "proving":
            save_run(root, record.model_copy(update={"status": "error", "last_error": f"proving: {exc}"}), lease)
        return []
    lease, record = _claimed(root)
    if record is None or record.finished or record.phase != "proving" or record.iteration != n:
        return []
    try:
        if "quality" not in raw:
            write_quality(root, n, raw, quality, lease)
        following = _decide(root, record, lease, quality, settings)
    except LeaseLost as exc:
        log.warning("%s: proving's decision discarded: %s", root.name, exc)
        return []
    return following if team is None else first_steps(root, team, following)


def _decide(root: Path, record: RunRecord, lease: Lease, quality: Quality, settings: ProvingSettings) -> list[Task]:
    report = _report(root, record.iteration)
    rate = float(report["success_rate"])
    unmet = unmet_targets(record, rate, quality, list(settings.gates))
    result = IterationResult(iteration=record.iteration, success_rate=rate, passed=report["passed"],
                             total=report["total"], figures=figure_summary(quality), unmet=unmet)
    results = [r for r in record.results if r.iteration != record.iteration] + [result]
    if not unmet:
        save_run(root, record.model_copy(update={"phase": "done", "status": "succeeded", "results": results}), lease)
        return []
    if record.iteration >= record.max_iterations:
        save_run(root, record.model_copy(update={"phase": "done", "status": "failed_target", "results": results}),
                 lease)
        return []
    save_run(root, record.model_copy(update={"phase": "designing", "iteration": record.iteration + 1,
                                             "results": results, "feedback": None}), lease)
    return resume(root)


def write_quality(root: Path, iteration: int, report: dict[str, Any], quality: Quality, lease: Lease) -> None:
    """report.json with the gates' ``quality`` added: baton's write, under the run's lease."""
    Folder(root).write_json(Layout(root).outputs(iteration) / "report.json",
                            {**report, "quality": quality.model_dump(mode="json", by_alias=True)}, lease)


def _report(root: Path, iteration: int) -> dict[str, Any]:
    """The iteration's evaluation report, with every figure the decision needs (StoreError if not)."""
    path = Layout(root).outputs(iteration) / "report.json"
    report = Folder(root).read_json(path, f"iteration {iteration}'s evaluation report", RECORD_BYTES)
    figures = report_figures(report) if isinstance(report, dict) else {}
    if not isinstance(report, dict) or not all(isinstance(figures.get(k), (int, float)) for k in REQUIRED):
        raise StoreError(f"{path} lacks the figures a decision needs ({', '.join(REQUIRED)}); re-run the "
                         "evaluation (RunEvaluation) so it is written again, then `baton resume`")
    return {**report, "success_rate": figures["success_rate"]}


def _open_execute(root: Path, record: RunRecord, lease: Lease) -> list[Task]:
    save_run(root, record.model_copy(update={"phase": "executing", "status": "running"}), lease)
    return resume(root)


def handoff_file(root: Path, iteration: int, agent: str) -> Path:
    return handoff_path(root, iteration, KIND[agent])


def handoff_payload(root: Path, iteration: int, agent: str) -> InitToExecute | ExecuteToInit:
    path, kind = handoff_file(root, iteration, agent), KIND[agent]
    try:
        return parse_payload_dict(kind, Folder(root).read_json(path, f"the {kind} handoff", RECORD_BYTES))
    except ValueError as exc:
        raise StoreError(
            f"{path} is not a valid {kind} payload ({exc}); restore it or let the agent hand off again"
        ) from None


def run_task(task: Task, team: Team, root: Path) -> tuple[StepOutcome | CompactionOutcome | None, list[Task]]:
    """Execute one task in this process (``root`` is its scenario's folder); returns its outcome (None for a
    phase) and what comes next."""
    if task.kind == "step":
        return do_step(root, team, task.agent, task.number)
    if task.kind == "compaction":
        return do_compaction(root, team, task.agent, task.number)
    if task.kind == "proving":
        return None, do_proving(root, team, split=True)
    if task.kind == "gate":
        from workers.gate_loop import do_gate

        assert task.gate is not None and task.number is not None  # a gate task has both (Task._complete)
        return None, do_gate(root, task.gate, task.number)
    return None, do_phase(root, team)

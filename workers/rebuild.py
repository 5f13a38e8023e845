"""``baton resume NAME --rebuild``: run.json inferred from what the scenario folder holds.

run.json is the one file of a run that is not append-only; everything it says can be read back
from the files the run wrote: the agents' logs (which iteration each turn opened), the handoffs
(designs, reports, approvals, rejections), the step events (the thresholds a profile gives, the
model each call used) and scenario.toml (target, iterations). The loop's own rules then say which
phase the run was in (``workers.loop._next_phase``, ``_after_execute``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from rich.text import Text

from agents.catalogue import PinnedModel
from agents.config import ConfigError
from agents.disk import AgentDisk
from agents.events import StepEvent, read_events
from agents.payloads import ExecuteToInit
from agents.settings_layers import PROFILES, load_scenario_config, proving_settings, resolve_agents
from proving.evaluation.quality import Quality
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.run import IterationResult, RunRecord, claim_run, load_run, now, save_run
from scenarios.store import AGENTS, Layout, StoreError
from workers.dispatch import busy_error
from workers.loop import handoff_file, handoff_payload, raw_report
from workers.render import say
from workers.scenario_lock import ScenarioBusy, scenario_lock
from workers.targets import figure_summary, unmet_targets


class Rebuilt(BaseModel):
    record: RunRecord
    inferred: list[str]  # one line per field: its value and what it was read from


def rebuild_run(root: Path, profile: str | None = None) -> Rebuilt:
    """What run.json would say, from the folder alone (nothing is written)."""
    layout = Layout(root)
    settings = load_scenario_config(layout.toml)
    disks = {role: AgentDisk.load(root, role) for role in AGENTS}
    last_steps = {role: _last_step(layout, role) for role in AGENTS}
    folder = Folder(root)
    finished = [k for k in folder.iterations("handoffs") if folder.is_file(handoff_file(root, k, "execute"))]
    targets = RunRecord(scenario=root.name, target_success_rate=settings.target_success_rate,
                        target_floor=settings.target_floor, target_solvable_share=settings.target_solvable_share,
                        target_coverage=settings.target_coverage)
    gates = list(proving_settings(root).gates)
    results = [_result(root, k, targets, gates) for k in finished]
    n = max(disks["init"].iteration(), disks["execute"].iteration(), 1)
    executed = disks["execute"].iteration()  # the last iteration Execute opened (0: none yet)
    approved = [k for k in range(1, executed + 1) if folder.is_file(layout.handoffs(k) / "approval.json")]
    auto = executed > len(approved)  # an iteration reached Execute with no approval written
    inferred = [f"iterations with a report: {', '.join(map(str, finished)) or 'none'}; "
                f"success rates: {', '.join(f'it{r.iteration} {r.success_rate:.0%}' for r in results) or '-'} "
                "(handoffs/iteration_<n>/execute_to_init_context.json)",
                f"iteration {n} (the last turn an agent opened, state/<agent>/log.jsonl)",
                f"auto-approve {'on' if auto else 'off'} ("
                + ("an iteration reached Execute without handoffs/.../approval.json" if auto else
                   "every iteration that reached Execute was approved" if approved else
                   "no iteration reached Execute yet: `baton run NAME --auto-approve` turns it on") + ")"]
    phase, status = _phase(root, n, disks, results, settings.target_success_rate, settings.max_iterations, auto)
    if phase == "designing" and results and results[-1].iteration == n:
        n += 1  # Execute's report is in and the target missed: the next design is due
    inferred.insert(2, f"phase {phase}, status {status} (the handoffs and turns of iteration {n})")
    rejections = sorted((p for p in folder.glob(layout.handoffs(n), "rejection_*.json", kinds=("file",))
                         if p.stem.split("_")[1].isdigit()), key=lambda p: int(p.stem.split("_")[1]))
    last = folder.read_json_or_none(rejections[-1], RECORD_BYTES) if rejections else None
    feedback = last.get("feedback") if isinstance(last, dict) else None
    if feedback:
        inferred.append(f"the last rejection's feedback ({rejections[-1].relative_to(root)})")
    chosen, why = _profile(root, profile, last_steps)
    inferred.append(f"profile {chosen or 'none'} ({why})")
    models = {role: PinnedModel(asked=model, id=model).model_dump(mode="json")
              for role, model in ((r, e.model) for r, e in last_steps.items() if e is not None) if model != "simulated"}
    if models:
        inferred.append("models " + ", ".join(f"{r} {m['id']}" for r, m in models.items())
                        + " (the model of each agent's last call, state/<agent>/events.jsonl)")
    starts = [r.at for d in disks.values() for r in d.records[:1] if r.at]
    record = RunRecord(scenario=root.name, phase=phase, iteration=n, status=status, auto_approve=auto,
                       profile=chosen, max_iterations=settings.max_iterations,
                       target_success_rate=settings.target_success_rate, target_floor=settings.target_floor,
                       target_solvable_share=settings.target_solvable_share,
                       target_coverage=settings.target_coverage, results=results, feedback=feedback,
                       models=models, started_at=min(starts, default=now()))
    return Rebuilt(record=record, inferred=inferred)


def rebuild_and_show(root: Path, profile: str | None) -> None:
    """The command's part: refuse a readable run.json, else infer, show what was inferred, write, keep the old;
    under the scenario lock, so no other command or embedded run writes the folder meanwhile."""
    try:
        with scenario_lock(root, f"baton resume {root.name} --rebuild"):
            _rebuild_and_show(root, profile)
    except ScenarioBusy as busy:
        raise busy_error(busy) from None


def _rebuild_and_show(root: Path, profile: str | None) -> None:
    if _readable(root):
        raise StoreError(f"{Layout(root).run_json} is readable: nothing to rebuild; `baton resume {root.name}` "
                         "continues from it (--rebuild replaces a corrupted or missing run.json)")
    if not any(Folder(root).is_dir(Layout(root).state(role)) for role in AGENTS):
        raise StoreError(f"{root.name} has never run: there is nothing to rebuild from; start it with "
                         f"`baton run {root.name}`")
    rebuilt = rebuild_run(root, profile)
    say(Text(f"rebuilt {root.name}/run.json from the folder:"))
    for line in rebuilt.inferred:
        say(Text(f"  {line}"))
    kept = replace_run_json(root, rebuilt)
    if kept is not None:
        say(Text(f"the broken file is kept as {kept}"))


def replace_run_json(root: Path, rebuilt: Rebuilt) -> Path | None:
    """Write the rebuilt run.json; the file it replaces is kept beside it as run.json.broken-<timestamp>."""
    path = Layout(root).run_json
    lease = claim_run(root)
    kept = None
    if Folder(root).exists(path):  # whatever is there (a link too) is moved aside, never followed
        kept = path.with_name(f"run.json.broken-{now().replace(':', '').replace('+0000', 'Z')}")
        path.rename(kept)
    save_run(root, rebuilt.record, lease)
    return kept


def _readable(root: Path) -> bool:
    try:
        return load_run(root) is not None
    except StoreError:
        return False


def _result(root: Path, iteration: int, targets: RunRecord, gates: list[str]) -> IterationResult:
    """The iteration's figures as the loop recorded them; ``unmet`` None-like (no figures) when its gates never
    wrote ``quality`` into report.json: the run was proving it."""
    report = handoff_payload(root, iteration, "execute")
    assert isinstance(report, ExecuteToInit)
    result = IterationResult(iteration=iteration, success_rate=report.success_rate, passed=report.totals.passed,
                             total=report.totals.samples)
    try:
        quality = Quality.model_validate(raw_report(root, iteration)["quality"])
    except (StoreError, ValueError, KeyError):
        return result
    return result.model_copy(update={"figures": figure_summary(quality),
                                     "unmet": unmet_targets(targets, report.success_rate, quality, gates)})


def _phase(root: Path, n: int, disks: dict[str, AgentDisk], results: list[IterationResult], target: float,
           max_iterations: int, auto: bool) -> tuple[str, str]:
    """The loop's rules, read backwards: where iteration ``n`` stands."""
    if disks["execute"].iteration() == n:
        done = next((r for r in results if r.iteration == n), None)
        if done is None:
            return "executing", "running"
        if not done.figures:  # handed off, its gates' quality not written yet
            return "proving", "running"
        if not done.unmet:
            return "done", "succeeded"
        return ("done", "failed_target") if n >= max_iterations else ("designing", "running")
    folder = Folder(root)
    if folder.is_file(handoff_file(root, n, "init")) and disks["init"].turn_over():
        approved = folder.is_file(Layout(root).handoffs(n) / "approval.json")
        return ("executing", "running") if approved or auto else ("awaiting_approval", "waiting")
    return "designing", "running"


def _last_step(layout: Layout, role: str) -> StepEvent | None:
    events, _ = read_events(layout.events(role))
    return next((e for e in reversed(events) if isinstance(e, StepEvent)), None)


def _profile(root: Path, given: str | None, last_steps: dict[str, StepEvent | None]) -> tuple[str | None, str]:
    if given is not None:
        return given, "--profile"
    seen = {role: e.threshold for role, e in last_steps.items() if e is not None}
    if not seen:
        return None, "no step yet to tell it from"
    for candidate in (None, *PROFILES):
        try:
            configs = resolve_agents(root, profile=candidate)
        except ConfigError:
            continue
        if all(configs[role].context.threshold == threshold for role, threshold in seen.items()):
            said = ", ".join(f"{role} {t:,}" for role, t in seen.items())
            return candidate, f"the thresholds of the last steps ({said}) are what it gives"
    return None, "no profile gives the thresholds of the last steps; pass --profile if the run used one"

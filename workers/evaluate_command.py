"""``baton evaluate NAME [--iteration N]``: an iteration's evaluation run again from what is on
disk, without a model: a person who fixed a checker by hand re-checks it (docs/evaluation.md). Then the
gates that prove the scenario run again on it (the scenario's ``[proving]`` settings; ``--no-gates`` skips
them), their ``quality`` is written into report.json and their figures and findings are printed.
The same sandbox and limits as the run's own evaluations (the execute agent's settings, under
the run's profile). Registered on the CLI by ``workers/cli.py``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from agents.config import ConfigError
from agents.settings_layers import proving_settings, resolve_config
from proving.evaluation.gates import ProvingSettings, prove
from proving.evaluation.quality import Quality
from proving.evaluation.report_file import KEPT, KEPT_RUN, ReportFile, read_report
from proving.evaluation.run import EvaluationError, run_evaluation
from scenarios.folder import Folder
from scenarios.run import IterationResult, Judged, claim_run, load_run, now, save_run
from scenarios.store import Layout
from workers import loop
from workers.errors import CliError, guarded
from workers.gate_progress import EvaluateLine
from workers.render import figures_line, moving, new_table, out, say
from workers.targets import figure_summary, unmet_targets

LABEL = "baton evaluate"
REASON_CHARS = 160


def evaluate(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the scenario")],
    iteration: Annotated[int | None, typer.Option(
        min=1, help="which iteration [default: the last one with outputs]")] = None,
    profile: Annotated[str | None, typer.Option(help="settings profile [default: the run's]")] = None,
    gates: Annotated[bool, typer.Option(
        "--gates/--no-gates", help="run the gates (coverage, duplicates, floors...) after the evaluation; "
        "--no-gates keeps the figures of the report it replaces")] = True,
) -> None:
    """Run an iteration's evaluation again from disk (no model) and print the report."""
    root = loop.scenario_root(name)
    record = load_run(root)
    if moving(record):
        phase = record.phase if record else ""
        raise CliError(f"{name} is {phase} (run.json): its agents may be writing the iteration now",
                       f"wait until it stops or finishes (`baton status {name}`), then evaluate again")
    chosen = iteration or last_iteration(root)
    if not Folder(root).is_dir(Layout(root).outputs(chosen)):
        have = ", ".join(map(str, iterations(root))) or "none"
        raise CliError(f"{name} has no execution_outputs/iteration_{chosen}/ (iterations with outputs: {have})",
                       "pass one of those to --iteration, or leave it out for the last one")
    before = read_report(root, chosen)
    if before.problem:  # replacing it would lose its evaluation-run count, its earlier runs and the gates' figures
        raise CliError(f"{before.damage()}; evaluating again would replace it and lose what it recorded",
                       before.remedy(name))
    try:
        settings = proving_settings(root)
        config = resolve_config("execute", scenario_toml=Layout(root).toml,
                                profile=profile or (record.profile if record else None))
        report = run_evaluation(root, chosen, timeout_s=config.tools.eval_timeout_s,
                                memory_mb=config.tools.eval_memory_mb, disk_mb=config.tools.eval_disk_mb,
                                model_label=LABEL)
    except (EvaluationError, ConfigError) as exc:
        raise CliError(str(exc)) from None
    show(root, report)
    if gates:
        quality: Quality | None = run_gates(root, chosen, settings)
        quality_run = report["run"]
        show_quality(root, chosen, quality)
    else:
        quality, quality_run = keep_quality(root, chosen, before)
    judge_again(root, chosen, report, quality, quality_run, list(settings.gates))


def run_gates(root: Path, iteration: int, settings: ProvingSettings) -> Quality:
    """The configured gates on the iteration just evaluated; their quality written into its report.json."""
    quality = prove(root, iteration, settings, on_progress=EvaluateLine())
    report = loop.raw_report(root, iteration)
    loop.write_quality(root, iteration, {k: v for k, v in report.items() if k != "quality"}, quality, claim_run(root))
    return quality


def keep_quality(root: Path, iteration: int, before: ReportFile) -> tuple[Quality | None, int | None]:
    """``--no-gates``: the gates' figures of the report just replaced, carried into the new one as
    ``kept_quality`` with the evaluation run they were measured on (the proving phase measures again: it decides
    on ``quality`` alone); none when it had none."""
    if before.quality is None or before.quality_run is None:
        say(Text("the gates did not run (--no-gates), and the report replaced had no figures of theirs to keep",
                 style="yellow"))
        return None, None
    report = loop.raw_report(root, iteration)
    kept = {KEPT: before.quality.model_dump(mode="json", by_alias=True), KEPT_RUN: before.quality_run}
    Folder(root).write_json(Layout(root).outputs(iteration) / "report.json", {**report, **kept}, claim_run(root))
    say(Text(f"kept the gates' figures of evaluation run {before.quality_run}, not measured again (--no-gates): "
             + figures_line(figure_summary(before.quality))))
    return before.quality, before.quality_run


def judge_again(root: Path, iteration: int, report: dict[str, Any], quality: Quality | None,
                quality_run: int | None, gates: list[str]) -> None:
    """The run's record of the iteration judged on the report just written, as the proving phase judges (the
    targets, ``workers.targets``); a finished run's status follows: succeeded when an iteration meets every
    target. An iteration the run has not judged yet is left to `baton resume`, which decides on this report."""
    lease = claim_run(root)
    record = load_run(root)
    if record is None or not any(r.iteration == iteration for r in record.results):
        return
    rate = float(report["success_rate"])
    unmet = unmet_targets(record, rate, quality or Quality(), gates)
    if quality is None and gates:
        unmet.append(f"the gates did not run on it: `baton evaluate {root.name} --iteration {iteration}` runs them")
    result = IterationResult(iteration=iteration, success_rate=rate, passed=report["passed"], total=report["total"],
                             figures=figure_summary(quality) if quality else {}, unmet=unmet,
                             judged_again=Judged(run=report["run"], at=now(), quality_run=quality_run))
    results = [result if r.iteration == iteration else r for r in record.results]
    status = record.status
    if record.phase == "done" and status in ("succeeded", "failed_target"):
        status = "succeeded" if any(not r.unmet for r in results) else "failed_target"
    save_run(root, record.model_copy(update={"results": results, "status": status}), lease)
    verdict = "every target met" if not unmet else "missed: " + "; ".join(unmet)
    change = f"{record.status} -> {status}" if status != record.status else f"still {status}"
    say(Text(f"run.json: iteration {iteration} judged again on evaluation run {report['run']}: {verdict}; "
             f"the run: {change}"))


def show_quality(root: Path, iteration: int, quality: Quality) -> None:
    summary = figure_summary(quality)
    say(Text(f"gates: {', '.join(quality.ran) or 'none ran'}; " + figures_line(summary)))
    stopped: dict[str, list[str]] = {}
    for gate, why in quality.skipped.items():  # one reason (Inspect missing) often stops several gates
        stopped.setdefault(why, []).append(gate)
    for why, names in stopped.items():
        say(Text(f"  {', '.join(names)} did not run: {why}", style="yellow"))
    if quality.findings:
        table = new_table("gate", "defect", "class", "sample", "rule", "finding")
        for finding in quality.findings:
            detail = finding.detail + (f" [evidence: {finding.evidence}]" if finding.evidence else "")
            table.add_row(finding.gate, finding.defect, finding.class_, finding.sample or "-", finding.rule or "-",
                          detail if len(detail) <= REASON_CHARS else detail[: REASON_CHARS - 3] + "...")
        out.print(table)
    else:
        say(Text("no findings"))
    say(Text(f"written: {Layout(root).outputs(iteration)}/report.json (quality)"))


def iterations(root: Path) -> list[int]:
    """Every ``execution_outputs/iteration_<n>`` that holds anything, in order."""
    folder = Folder(root)
    return sorted(int(m.group(1)) for name in folder.names("execution_outputs", kinds=("folder",))
                  if (m := re.fullmatch(r"iteration_(\d+)", name))
                  and folder.names(f"execution_outputs/{name}", kinds=("file", "folder", "link", "special")))


def last_iteration(root: Path) -> int:
    found = iterations(root)
    if not found:
        raise CliError(f"{root.name} has no execution outputs yet: no {root}/execution_outputs/iteration_<n>/",
                       f"run the scenario first (`baton run {root.name}`)")
    return found[-1]


def show(root: Path, report: dict[str, Any]) -> None:
    if report.get("sandbox") == "none":
        say(Text("samples ran UNCONFINED (BATON_EVAL_SANDBOX=none)", style="bold red"))
    failures = report["failures"]
    if failures:
        table = new_table("sample", "layer", "reason")
        for failure in failures:
            reason = failure["reason"]
            table.add_row(failure["sample"], failure["layer"],
                          reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3] + "...")
        out.print(table)
    layers = ", ".join(f"{layer} {count}" for layer, count in report["failures_per_layer"].items())
    where = Layout(root).outputs(report["iteration"])
    say(Text(f"{root.name} iteration {report['iteration']} (evaluation run {report['run']}): "
             f"{report['passed']}/{report['total']} passed, success rate {report['success_rate']:.0%}; "
             f"failures by layer: {layers}; {report['duration_s']:.1f} s"))
    say(Text(f"written: {where}/report.json, results.jsonl and traces/"))


def register(cli: typer.Typer, cls: type) -> None:
    """Add the command to the ``baton`` app (``cls``: its usage formatting)."""
    cli.command("evaluate", cls=cls)(guarded(evaluate))

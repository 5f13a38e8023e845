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
from proving.evaluation.gates import prove
from proving.evaluation.quality import Quality
from proving.evaluation.run import EvaluationError, run_evaluation
from scenarios.folder import Folder
from scenarios.run import claim_run, load_run
from scenarios.store import Layout
from workers import loop
from workers.errors import CliError, guarded
from workers.render import figures_line, moving, new_table, out, say
from workers.targets import figure_summary

LABEL = "baton evaluate"
REASON_CHARS = 160


def evaluate(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the scenario")],
    iteration: Annotated[int | None, typer.Option(
        min=1, help="which iteration [default: the last one with outputs]")] = None,
    profile: Annotated[str | None, typer.Option(help="settings profile [default: the run's]")] = None,
    gates: Annotated[bool, typer.Option(
        "--gates/--no-gates", help="run the gates (coverage, duplicates, floors...) after the evaluation")] = True,
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
    try:
        config = resolve_config("execute", scenario_toml=Layout(root).toml,
                                profile=profile or (record.profile if record else None))
        report = run_evaluation(root, chosen, timeout_s=config.tools.eval_timeout_s,
                                memory_mb=config.tools.eval_memory_mb, disk_mb=config.tools.eval_disk_mb,
                                model_label=LABEL)
    except (EvaluationError, ConfigError) as exc:
        raise CliError(str(exc)) from None
    show(root, report)
    if gates:
        show_quality(root, chosen, run_gates(root, chosen))


def run_gates(root: Path, iteration: int) -> Quality:
    """The configured gates on the iteration just evaluated; their quality written into its report.json."""
    try:
        settings = proving_settings(root)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    quality = prove(root, iteration, settings)
    report = loop.raw_report(root, iteration)
    loop.write_quality(root, iteration, {k: v for k, v in report.items() if k != "quality"}, quality, claim_run(root))
    return quality


def show_quality(root: Path, iteration: int, quality: Quality) -> None:
    summary = figure_summary(quality)
    say(Text(f"gates: {', '.join(quality.ran) or 'none ran'}; " + figures_line(summary)))
    for gate, why in quality.skipped.items():
        say(Text(f"  {gate} did not run: {why}", style="yellow"))
    if quality.findings:
        table = new_table("gate", "class", "sample", "rule", "finding")
        for finding in quality.findings:
            detail = finding.detail
            table.add_row(finding.gate, finding.class_, finding.sample or "-", finding.rule or "-",
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

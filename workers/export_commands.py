"""``baton export`` and ``baton try``: a scenario in the harness its users run
(docs/export.md). Registered on the CLI by ``workers/cli.py``."""

from __future__ import annotations

import enum
import importlib.util
import os
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from agents.scenario_facts import scenario_facts
from proving.export.build import ExportError, export_inspect
from proving.export.tryout import NO_INSPECT, run_tryout, tryout_path
from workers import loop
from workers.dispatch import check_sandbox_here
from workers.errors import CliError, guarded
from workers.render import new_table, out, say

Harness = enum.Enum("Harness", {"inspect": "inspect"}, type=str)  # shown as <inspect>; more may follow

Iteration = Annotated[int | None, typer.Option(
    min=1, help="which iteration [default: the latest that reached the target]")]


def export(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the scenario")],
    out_dir: Annotated[Path, typer.Option("--out", help="the folder to write (new, empty, or an earlier export)")],
    to: Annotated[Harness, typer.Option(help="the harness to export to")] = Harness.inspect,
    iteration: Iteration = None,
) -> None:
    """A scenario's passing iteration as an Inspect AI task: `inspect eval OUT/task.py --model M`."""
    root = loop.scenario_root(name)
    try:
        done = export_inspect(root, out_dir, scenario_facts(root), iteration)
    except ExportError as exc:
        raise CliError(str(exc)) from None
    if done.warning:
        say(Text(f"warning: {done.warning}", style="yellow"))
    say(Text(f"exported {done.scenario} iteration {done.iteration} ({done.samples} samples, tools: "
             f"{', '.join(done.tools)}) to {done.folder}/"))
    if importlib.util.find_spec("inspect_ai") is None:
        say(Text(f"note: {NO_INSPECT}, or pip install inspect-ai where you run the task", style="yellow"))
    # Relative to where the user is: Inspect cannot glob an absolute task path (its issue 5267).
    task = shlex.quote(os.path.relpath(done.folder / "task.py"))
    say(Text(f"next: inspect eval {task} --model <provider/model>"))


def try_(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the scenario")],
    model: Annotated[str | None, typer.Option(
        help="the model under test, as Inspect names it (anthropic/<id>, openai/<id>...) "
             "[default: mockllm/model when no ANTHROPIC_API_KEY is set]")] = None,
    epochs: Annotated[int, typer.Option(min=1, help="trials per sample; pass^k is reported for k up to this")] = 1,
    iteration: Iteration = None,
    user: Annotated[str | None, typer.Option(
        help="who plays the user of conversational samples: 'scripted' (deterministic, offline) or an Inspect "
             "model string (docs/conversations.md) [default: scripted]")] = None,
) -> None:
    """A model under test on the exported scenario, through Inspect AI: pass rate and pass^k per sample; trials
    the user simulator spoiled are counted apart."""
    check_sandbox_here()  # the export's tool calls run model-written code here, as the evaluations do
    root = loop.scenario_root(name)
    try:
        tryout = run_tryout(root, scenario_facts(root), model, epochs, iteration, user=user)
    except ExportError as exc:
        raise CliError(str(exc)) from None
    if tryout.note:
        say(Text(f"note: {tryout.note}", style="yellow"))
    table = new_table("sample", "rules", "passed", *(f"pass^{k}" for k in tryout.pass_hat))
    for sample in tryout.samples:
        table.add_row(sample.id, ",".join(sample.rules), f"{sample.passes}/{sample.trials}",
                      *(f"{v:.2f}" for v in sample.pass_hat.values()))
    out.print(table)
    say(Text(f"tryout: {tryout.summary()}"))
    say(Text(f"written: {tryout_path(root, tryout.iteration)}; transcripts: inspect view --log-dir "
             f"{Path(tryout.log).parent}"))


def register(cli: typer.Typer, cls: type) -> None:
    """Add the commands to the ``baton`` app (``cls``: its usage formatting)."""
    cli.command("export", cls=cls)(guarded(export))
    cli.command("try", cls=cls)(guarded(try_))

"""``baton import tau2 CHECKOUT --domain NAME [--name SCENARIO]``: a benchmark users already run, as a baton
scenario with one iteration (docs/import.md). Registered on the CLI by ``workers/cli.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from importers.tau2.checkout import Tau2ImportError
from importers.tau2.scenario import import_domain
from scenarios.store import check_name
from workers import loop
from workers.errors import CliError, guarded
from workers.render import say


def tau2(
    checkout: Annotated[Path, typer.Argument(metavar="CHECKOUT", help="a tau2-bench checkout (its top folder)")],
    domain: Annotated[str, typer.Option(help="the domain to import, e.g. retail")],
    name: Annotated[str | None, typer.Option(help="the scenario's name [default: tau2_DOMAIN]")] = None,
) -> None:
    """A tau2-bench domain (tasks, policy, database, toolkit) as a scenario: iteration 1, ready for `baton evaluate`."""
    scenario = check_name(name or f"tau2_{domain}")
    root = loop.scenarios_dir() / scenario
    try:
        report = import_domain(checkout, domain, root)
    except Tau2ImportError as exc:
        raise CliError(str(exc), exc.hint) from None
    say(Text(f"imported tau2-bench {domain} as {root}/: {report.samples} samples of {report.tasks} tasks, "
             f"{len(report.tools)} tools, {report.rules} numbered rules"))
    if report.skipped:
        say(Text(f"{len(report.skipped)} task(s) not imported: "
                 + "; ".join(f"task {s.task}: {s.why}" for s in report.skipped[:5])
                 + (" ..." if len(report.skipped) > 5 else "")))
    if report.failing_gold or report.lookups_omitted:
        say(Text(f"{len(report.failing_gold)} sample(s) with an expected action that fails in the domain's own code "
                 f"(left out when it changed nothing); {len(report.lookups_omitted)} whose expected actions leave out "
                 "the lookups that find an id they pass"))
    say(Text(f"by tau2's own reward a run that does nothing passes {len(report.do_nothing_passes)} of "
             f"{report.samples} samples"))
    say(Text(f"what was and was not carried over: {root}/design/import_report.md"))
    say(Text(f"next: `baton evaluate {scenario}`"))


def register(cli: typer.Typer, cls: type) -> None:
    """Add ``baton import`` (its importers as subcommands) to the ``baton`` app (``cls``: usage formatting)."""
    group = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Bring in a benchmark users already run as a scenario (docs/import.md).")
    group.command("tau2", cls=cls)(guarded(tau2))
    cli.add_typer(group, name="import")

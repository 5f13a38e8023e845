"""The ``baton`` command line (SPEC §9).

Every command reads and writes the scenario folder through ``workers.loop``;
progress and status are read back from the disk (run.json and the agents'
events.jsonl), so ``status`` works while workers run or after they died, and
``run`` follows a distributed run the same way it follows an embedded one.

Exit codes: 0 the command completed (a scenario that succeeded, or one that
stopped to wait for approval), 1 the scenario finished below its target,
2 an error; errors print what went wrong and what to do, never a traceback.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NoReturn, Self, TypeVar

import click
import kombu.exceptions
import redis
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agents.config import ConfigError, load_scenario_config
from agents.models import ModelError
from agents.step import AgentDisk
from scenarios.run import RunRecord, load_run
from scenarios.store import (
    AGENTS,
    Layout,
    StoreError,
    check_name,
    read_jsonl,
    write_atomic,
)
from workers import loop
from workers.app import BROKER_ENVS, QUEUES, broker_url

SIMULATED = "simulated"
ACTORS = {"designing": " (Init)", "executing": " (Execute)", "awaiting_approval": " (your turn)"}
POLL_S = 1.0
QUIET_HINT_S = 30.0  # in broker mode, say how to start workers after this long without progress

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)
cli = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="baton: two Claude agents build agent-evaluation scenarios.")


# ---- errors --------------------------------------------------------------------------------


class CliError(Exception):
    """A failure the user can act on: what went wrong, then what to do."""

    def __init__(self, message: str, hint: str = "", code: int = 2):
        super().__init__(message)
        self.hint, self.code = hint, code


def broker_help(url: str, detail: str) -> CliError:
    return CliError(
        f"the broker at {url} is unreachable ({detail})",
        "start Redis (`redis-server` or `docker compose up redis`), or unset "
        f"{' and '.join(BROKER_ENVS)} to run embedded in this process",
    )


def fail(exc: CliError) -> NoReturn:
    # Text objects, not markup: messages quote TOML tables such as [agents.init].
    err.print(Text.assemble(("error: ", "bold red"), str(exc)), soft_wrap=True)
    if exc.hint:
        err.print(Text.assemble(("what to do: ", "bold"), exc.hint), soft_wrap=True)
    raise typer.Exit(exc.code)


F = TypeVar("F", bound=Callable[..., Any])


def guarded(command: F) -> F:
    """Turn the errors a user can cause into a message and exit code 2."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except CliError as exc:
            fail(exc)
        except ConfigError as exc:
            fail(CliError(str(exc), "fix scenario.toml or the BATON_* environment variable named above"))
        except StoreError as exc:  # its message already says what to do
            fail(CliError(str(exc)))
        except (redis.exceptions.RedisError, kombu.exceptions.OperationalError) as exc:
            fail(broker_help(broker_url() or "?", str(exc)))
        except ModelError as exc:
            fail(CliError(f"model: {exc}"))
        except (ValueError, OSError) as exc:
            fail(CliError(f"{exc.__class__.__name__}: {exc}"))
        except (typer.Exit, typer.Abort, click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise  # typer's and click's own exits and usage errors (both are RuntimeErrors)
        except Exception as exc:  # a bug: still no traceback by default, and the disk is left as it was
            if os.environ.get("BATON_DEBUG"):
                raise
            fail(CliError(f"unexpected {exc.__class__.__name__}: {exc}",
                          "the scenario folder is intact; `baton status` shows where it stands. "
                          "Rerun with BATON_DEBUG=1 for the traceback and report it"))

    return wrapper  # type: ignore[return-value]


# ---- global options ------------------------------------------------------------------------


@cli.callback()
def options(
    scenarios_dir: Annotated[Path | None, typer.Option(
        "--scenarios-dir", help=f"folder of scenarios [default: ${loop.SCENARIOS_ENV} or ./scenarios]")] = None,
) -> None:
    # Exported so the loop (and any worker started from here) resolves the same folder.
    chosen = scenarios_dir or Path(os.environ.get(loop.SCENARIOS_ENV) or "scenarios")
    os.environ[loop.SCENARIOS_ENV] = str(chosen.resolve())
    for console in (out, err):
        if not console.is_terminal and "COLUMNS" not in os.environ:
            console.width = 120  # piped or captured: rich's default of 80 columns squeezes the tables


# ---- reading progress from disk ------------------------------------------------------------


@dataclass
class AgentView:
    """What one agent's events.jsonl (and, in detail, its log and state) say."""

    role: str
    steps: int = 0
    estimated: int | None = None
    threshold: int | None = None
    model: str = ""
    points: list[tuple[int, int]] = field(default_factory=list)  # (step, estimated input)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    breaker: str = "ok"

    @property
    def fallbacks(self) -> int:
        return sum(bool(c.get("fallback")) for c in self.compactions)


def read_agent(root: Path, role: str, detailed: bool = False) -> AgentView:
    layout = Layout(root)
    events = read_jsonl(layout.events(role))
    view = AgentView(role, problems=[f"{layout.events(role).name} {p}" for p in events.problems])
    for event in events.records:
        kind = event.get("kind") if isinstance(event, dict) else None
        if kind == "step":
            view.steps += 1
            view.estimated, view.threshold = event.get("estimated_input"), event.get("threshold")
            view.model = event.get("model") or view.model
            view.points.append((event.get("step", view.steps), event.get("estimated_input") or 0))
        elif kind == "compaction":
            view.compactions.append(event)
        elif kind in ("warning", "prompt_too_long"):
            view.warnings.append(f"step {event.get('after_step', event.get('step', '?'))}: "
                                 f"{event.get('reason') or event.get('detail', '')}")
        elif kind == "error":
            view.errors.append(f"step {event.get('step', '?')}: {event.get('reason', '')}")
    if detailed:  # the log and agent.json: only status needs them, and the log can be large
        disk = AgentDisk.load(root, role)  # type: ignore[arg-type]
        view.problems += disk.problems
        view.breaker = disk.state.breaker.status
    return view


@dataclass
class Snapshot:
    root: Path
    record: RunRecord | None
    agents: dict[str, AgentView]

    @classmethod
    def read(cls, root: Path, detailed: bool = False) -> Snapshot:
        return cls(root, load_run(root), {role: read_agent(root, role, detailed) for role in AGENTS})

    @property
    def simulated(self) -> bool:
        return any(a.model == SIMULATED for a in self.agents.values())


def gauge(view: AgentView, compact: bool = False) -> Text:
    """The context gauge: the last step's estimated input against the compaction threshold."""
    if view.estimated is None or not view.threshold:
        return Text("-" if compact else "no steps yet", style="dim")
    share = view.estimated / view.threshold
    style = "green" if share < 0.7 else "yellow" if share < 1 else "red"
    if compact:
        return Text(f"{kilo(view.estimated)}/{kilo(view.threshold)} {share:.0%}", style=style)
    filled = min(10, round(share * 10))
    return Text.assemble(("█" * filled + "░" * (10 - filled), style),
                         f" {view.estimated:,}/{view.threshold:,} ({share:.0%})")


def kilo(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k" if tokens < 100_000 else f"{tokens // 1000}k"


def rates(record: RunRecord | None) -> str:
    if record is None or not record.results:
        return "-"
    return ", ".join(f"it{r.iteration} {r.success_rate:.0%}" for r in record.results)


def simulated_banner() -> Panel:
    return Panel(Text("SIMULATED model: offline and deterministic, not Claude. "
                      "Set ANTHROPIC_API_KEY to run the real agents.", style="bold"),
                 title="SIMULATED", border_style="bold magenta")


# ---- rendering -----------------------------------------------------------------------------


def where(record: RunRecord | None) -> str:
    if record is None:
        return "not started"
    return f"{record.phase}, iteration {record.iteration}/{record.max_iterations}, {record.status}"


def agents_table(snap: Snapshot, detailed: bool = False) -> Table:
    table = Table(title=None, expand=False)
    for column in ("agent", "model", "steps", "context (last step vs threshold)", "compactions"):
        table.add_column(column)
    if detailed:
        table.add_column("circuit breaker")
    for view in snap.agents.values():
        model = Text("SIMULATED", style="bold magenta") if view.model == SIMULATED else Text(view.model or "-")
        compactions = f"{len(view.compactions)}" + (f" ({view.fallbacks} fallback)" if view.fallbacks else "")
        row: list[Any] = [view.role, model, str(view.steps), gauge(view), compactions]
        if detailed:
            row.append(view.breaker)
        table.add_row(*row)
    return table


def progress_view(snap: Snapshot) -> Group:
    name = snap.root.name
    head = Text.assemble((f"{name}: ", "bold"), where(snap.record), f"   success rates: {rates(snap.record)}")
    if snap.simulated:
        head.append("   SIMULATED", style="bold reverse magenta")
    return Group(head, agents_table(snap))


class Progress:
    """Status lines for what changed since the last look, plus a live table on a terminal."""

    def __init__(self, root: Path, simulated: bool):
        self.root = root
        self.live: Live | None = None
        self.seen: dict[str, int] = {}
        self.phase = ""
        self.results = 0
        self.simulated = simulated
        if simulated:
            out.print(simulated_banner())

    def __enter__(self) -> Self:
        self.baseline(Snapshot.read(self.root))
        if out.is_terminal:
            self.live = Live(console=out, refresh_per_second=4, transient=True)
            self.live.__enter__()
        self.refresh()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def baseline(self, snap: Snapshot) -> None:
        """Mark what is already on disk as seen: a resumed run reports only what it adds."""
        self.results = len(snap.record.results) if snap.record else 0
        for view in snap.agents.values():
            for kind, entries in (("compaction", view.compactions), ("warning", view.warnings), ("error", view.errors)):
                self.seen[f"{view.role}:{kind}"] = len(entries)

    def refresh(self, *_: object) -> Snapshot:
        snap = Snapshot.read(self.root)
        self.lines(snap)
        if self.live is not None:
            self.live.update(progress_view(snap))
        return snap

    def lines(self, snap: Snapshot) -> None:
        if snap.simulated and not self.simulated:  # broker mode learns the model from the first step event
            self.simulated = True
            out.print(simulated_banner())
        record = snap.record
        if record is not None:
            for result in record.results[self.results:]:
                say(Text(f"» iteration {result.iteration}: success rate {result.success_rate:.0%} "
                         f"({result.passed}/{result.total}), target {record.target_success_rate:.0%}"))
            self.results = len(record.results)
            phase = f"iteration {record.iteration}: {record.phase}"
            if phase != self.phase:
                self.phase = phase
                label = " SIMULATED" if self.simulated or snap.simulated else ""
                say(Text.assemble(("» ", "cyan"), phase, ACTORS.get(record.phase, ""), (label, "bold magenta")))
        for view in snap.agents.values():
            self.new_events(view)

    def new_events(self, view: AgentView) -> None:
        # Count-based: print only the entries past what was already shown.
        for kind, entries in (("compaction", view.compactions), ("warning", view.warnings), ("error", view.errors)):
            key = f"{view.role}:{kind}"
            for entry in entries[self.seen.get(key, 0):]:
                say(event_line(view.role, kind, entry))
            self.seen[key] = len(entries)


def event_line(role: str, kind: str, entry: Any) -> Text:
    if kind == "compaction":
        fallback = " (fallback summary)" if entry.get("fallback") else ""
        return Text(f"  {role}: compaction #{entry.get('id')} after step {entry.get('after_step')}: "
                    f"~{entry.get('tokens_before', 0):,} -> ~{entry.get('tokens_after', 0):,} tokens{fallback}")
    style = "yellow" if kind == "warning" else "red"
    return Text.assemble((f"  {role} {kind}: ", style), str(entry))


def say(text: Text) -> None:
    out.print(text, soft_wrap=True)


def iterations_table(root: Path, record: RunRecord) -> Table:
    table = Table("iteration", "success rate", "passed", "report")
    for r in record.results:
        report = Layout(root).outputs(r.iteration) / "report.json"
        table.add_row(str(r.iteration), f"{r.success_rate:.0%} (target {record.target_success_rate:.0%})",
                      f"{r.passed}/{r.total}", str(report) if report.exists() else "-")
    return table


def summary(root: Path) -> None:
    snap = Snapshot.read(root)
    record = snap.record
    out.print(Text.assemble(("\nsummary ", "bold"), (root.name, "bold"), f": {where(record)}",
                            ("   SIMULATED" if snap.simulated else "", "bold reverse magenta")))
    if record is not None and record.results:
        out.print(iterations_table(root, record))
    out.print(agents_table(snap))
    if record is not None and record.last_error:
        say(Text.assemble(("last error: ", "bold red"), record.last_error))
    say(Text(f"scenario folder: {root}  (design/, handoffs/, execution_outputs/, state/)"))


# ---- running tasks ---------------------------------------------------------------------------


def choose_mode(embedded: bool | None) -> str | None:
    """None for embedded, else the broker URL (checked to answer before anything is written)."""
    url = broker_url()
    if embedded or (embedded is None and url is None):
        return None
    if url is None:
        raise CliError("--broker needs a broker, and none is configured",
                       "export BATON_BROKER_URL=redis://127.0.0.1:6379/0 (and start Redis and `baton worker` for each "
                       f"queue: {', '.join(QUEUES)}), or run embedded")
    check_broker(url)
    return url


def check_broker(url: str) -> None:
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return  # another transport: kombu reports its own errors when sending
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except redis.exceptions.RedisError as exc:
        raise broker_help(url, str(exc)) from None


def execute(root: Path, tasks: list[loop.Task], url: str | None, profile: str | None, follow: bool = True) -> int:
    """Run (embedded) or dispatch (broker) ``tasks``, show progress, and return the exit code."""
    if url is None:
        if not run_here(root, tasks, profile):
            say(Text(f"interrupted: everything finished so far is on disk; continue with `baton resume {root.name}`"))
            summary(root)
            return 130
    else:
        dispatch_to(url, tasks, profile)
        if not follow or not follow_disk(root):
            return 0  # not following, or the user stopped following: the workers keep going
    summary(root)
    return outcome(root)


def run_here(root: Path, tasks: list[loop.Task], profile: str | None) -> bool:
    """Embedded: run the tasks in this process, refreshing progress after each; False if interrupted."""
    from workers.embedded import run_embedded

    team = loop.Team(root, profile=profile)
    simulated = any(team[role].model.label == SIMULATED for role in AGENTS)
    with Progress(root, simulated) as progress:
        try:
            run_embedded(tasks, team, on_task=progress.refresh)
        except KeyboardInterrupt:
            return False
    return True


def dispatch_to(url: str, tasks: list[loop.Task], profile: str | None) -> None:
    if profile is not None:
        say(Text(f"note: --profile applies to embedded runs; start the workers with `baton worker ROLE --profile "
                 f"{profile}` (or BATON_PROFILE={profile}), or set profile in scenario.toml"))
    # Imported here: the Celery app reads the broker URL when imported, and embedded runs need no Celery.
    from workers.tasks import dispatch

    dispatch(tasks)
    say(Text(f"dispatched {len(tasks)} task(s) to {url}"))


def follow_disk(root: Path) -> bool:
    """Poll the disk until the run stops; False if the user stopped following (Ctrl-C)."""
    with Progress(root, simulated=False) as progress:  # the first step event tells whether it is simulated
        last, quiet_since, hinted = None, time.monotonic(), False
        try:
            while True:
                snap = progress.refresh()
                record = snap.record
                if record is None or record.finished or record.phase == "awaiting_approval":
                    return True
                mark = (record.updated_at, *(a.steps + len(a.compactions) for a in snap.agents.values()))
                if mark != last:
                    last, quiet_since = mark, time.monotonic()
                elif not hinted and time.monotonic() - quiet_since > QUIET_HINT_S:
                    hinted = True
                    say(Text("no progress for a while: are workers running? start them with "
                             "`baton worker init`, `baton worker execute` and `baton worker compaction`"))
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            say(Text(f"stopped following; the workers keep going. Check with `baton status {root.name}`"))
            return False


def outcome(root: Path) -> int:
    record = load_run(root)
    name = root.name
    if record is None:
        raise CliError(f"{name} has no run.json after running", f"start it with `baton run {name}`")
    if record.status == "error":
        raise CliError(f"{name} stopped with an error: {record.last_error}",
                       f"see `baton status {name}`, fix the cause, then `baton resume {name}`")
    if record.phase == "awaiting_approval":
        say(Text(f"waiting for approval of iteration {record.iteration}'s design (design/, handoffs/iteration_"
                 f"{record.iteration}/): `baton approve {name}` or `baton reject {name} --feedback '...'`"))
        return 0
    if record.status == "succeeded":
        return 0
    if record.status == "failed_target":
        last = record.results[-1].success_rate if record.results else 0.0
        say(Text(f"{name} finished below its target: {last:.0%} < {record.target_success_rate:.0%} after "
                 f"{record.iteration} iteration(s); raise max_iterations in scenario.toml and run again, or revise brief.md",
                 style="yellow"))
        return 1
    raise CliError(f"{name} stopped while {record.phase} with nothing left to run",
                   f"continue it with `baton resume {name}`; `baton status {name}` shows the agents' errors")


# ---- commands ------------------------------------------------------------------------------

Embedded = Annotated[bool | None, typer.Option(
    "--embedded/--broker", help="run in this process, or dispatch to workers [default: broker if configured]")]
Profile = Annotated[str | None, typer.Option(help="settings profile, e.g. demo (small windows, early compaction)")]
Follow = Annotated[bool, typer.Option(help="broker mode: follow progress until the run stops")]

TOML_TEMPLATE = '''# {name}: see brief.md.
name = "{name}"
description = ""
target_success_rate = 0.85
max_iterations = 3

# Small context windows so compaction happens early (offline demos):
# profile = "demo"

# Per-agent overrides, e.g.:
# [agents.execute]
# threshold = 700000
'''

BRIEF_TEMPLATE = """# Brief: {name}

Describe the agent to evaluate. Init reads this file to design the scenario.

## What the agent does
Who writes to it, what it must decide, what a correct outcome looks like.

## Tools the agent should have
One line per tool: name(arguments) and what it returns or changes.

## Data
What initial data the tools work on (how many records, which fields, which edge cases).

## Rules
The policy the agent must follow, precisely enough that every sample has one right answer.

## What to measure
What counts as a pass; which mistakes matter most.
"""


def exit_with(code: int) -> None:
    if code:
        raise typer.Exit(code)


@cli.command()
@guarded
def new(
    name: str,
    brief: Annotated[Path | None, typer.Option(help="a Markdown file to use as brief.md")] = None,
    from_: Annotated[str | None, typer.Option("--from", help="copy brief.md from this scenario (name or folder)")] = None,
) -> None:
    """Create scenarios/NAME with scenario.toml and brief.md."""
    root = loop.scenarios_dir() / check_name(name)
    if root.exists():
        raise CliError(f"{root} already exists", "pick another name, or delete the folder to start over")
    if brief is not None and from_ is not None:
        raise CliError("--brief and --from both give brief.md", "pass only one of them")
    text = brief_text(name, brief, from_)
    write_atomic(root / "brief.md", text)  # creates the folder
    write_atomic(root / "scenario.toml", TOML_TEMPLATE.format(name=name))
    say(Text(f"created {root}/ (scenario.toml, brief.md)"))
    after = "edit brief.md, then" if brief is None and from_ is None else "next:"
    say(Text(f"{after} `baton run {name}`"))


def brief_text(name: str, brief: Path | None, source: str | None) -> str:
    if brief is not None:
        if not brief.is_file():
            raise CliError(f"brief file not found: {brief}", "pass the path of a Markdown file")
        return brief.read_text(encoding="utf-8")
    if source is not None:
        folder = Path(source) if Path(source).is_dir() else loop.scenarios_dir() / check_name(source)
        if not (folder / "brief.md").is_file():
            raise CliError(f"no brief.md in {folder}", "give the name or folder of an existing scenario, e.g. --from refund_desk")
        return (folder / "brief.md").read_text(encoding="utf-8")
    return BRIEF_TEMPLATE.format(name=name)


@cli.command()
@guarded
def run(
    name: str,
    auto_approve: Annotated[bool, typer.Option(help="skip the human approval of each design")] = False,
    profile: Profile = None,
    embedded: Embedded = None,
    follow: Follow = True,
) -> None:
    """Launch (or continue) the iterations and follow progress."""
    root = loop.scenario_root(name)
    url = choose_mode(embedded)
    record = load_run(root)
    if record is not None and record.phase == "done":
        say(Text(f"{name} finished before ({record.status}); starting a new run, the previous one moves to {name}/runs/"))
    tasks = loop.start(root, auto_approve=auto_approve, profile=profile)
    record = load_run(root)
    if auto_approve and record is not None and record.phase == "awaiting_approval":
        tasks = loop.approve(root)  # the design already waits: --auto-approve approves it
    exit_with(execute(root, tasks, url, profile, follow))


@cli.command()
@guarded
def approve(name: str, profile: Profile = None, embedded: Embedded = None, follow: Follow = True) -> None:
    """Approve the design waiting for review; Execute starts."""
    root = loop.scenario_root(name)
    url = choose_mode(embedded)
    exit_with(execute(root, loop.approve(root), url, profile, follow))


@cli.command()
@guarded
def reject(
    name: str,
    feedback: Annotated[str, typer.Option(help="what Init should change")],
    profile: Profile = None,
    embedded: Embedded = None,
    follow: Follow = True,
) -> None:
    """Send the design back to Init with feedback."""
    root = loop.scenario_root(name)
    url = choose_mode(embedded)
    exit_with(execute(root, loop.reject(root, feedback), url, profile, follow))


@cli.command()
@guarded
def resume(name: str, profile: Profile = None, embedded: Embedded = None, follow: Follow = True) -> None:
    """Continue from what is on disk (after a crash, a stop or an error)."""
    root = loop.scenario_root(name)
    url = choose_mode(embedded)
    exit_with(execute(root, loop.resume(root), url, profile, follow))


@cli.command()
@guarded
def status(name: Annotated[str | None, typer.Argument(help="one scenario; all when omitted")] = None) -> None:
    """Where each scenario stands, read from disk only."""
    if name is None:
        status_all(loop.scenarios_dir())
        return
    root = loop.scenario_root(name)
    snap = Snapshot.read(root, detailed=True)
    record = snap.record
    if snap.simulated:
        out.print(simulated_banner())
    out.print(Text.assemble((name, "bold"), f": {where(record)}"))
    if record is not None:
        say(Text(f"target {record.target_success_rate:.0%}, success rates: {rates(record)}, "
                 f"auto-approve {'on' if record.auto_approve else 'off'}, updated {record.updated_at}"))
        if record.last_error:
            say(Text.assemble(("last error: ", "bold red"), record.last_error))
        if record.results:
            out.print(iterations_table(root, record))
    out.print(agents_table(snap, detailed=True))
    problem = toml_problem(root)
    if problem:
        say(Text.assemble(("scenario.toml: ", "bold red"), problem))
    for view in snap.agents.values():
        for kind, entries in (("error", view.errors), ("warning", view.warnings), ("log problem", view.problems)):
            for entry in entries:
                say(event_line(view.role, kind, entry))
    if record is not None and record.phase == "awaiting_approval":
        say(Text(f"next: `baton approve {name}` or `baton reject {name} --feedback '...'`"))


def status_all(folder: Path) -> None:
    roots = sorted(p for p in folder.glob("*") if (p / "scenario.toml").is_file()) if folder.is_dir() else []
    if not roots:
        say(Text(f"no scenarios in {folder}; create one with `baton new NAME`"))
        return
    table = Table("scenario", "phase", "iter", "status", "success rates", "init context", "execute context",
                  "compactions init/execute", "notes")
    for root in roots:
        table.add_row(*status_row(root))
    out.print(table)


def status_row(root: Path) -> list[Any]:
    try:
        snap = Snapshot.read(root)
    except StoreError:  # one broken folder must not hide the others
        note = Text(f"run.json is corrupted: `baton status {root.name}` says how to fix it", style="red")
        return [root.name, "?", "?", Text("unreadable", style="red"), "-", "-", "-", "-", note]
    record, agents = snap.record, snap.agents
    notes = [record.last_error] if record is not None and record.last_error else []
    notes += [f"{len(a.problems)} torn/bad log line(s) ({a.role})" for a in agents.values() if a.problems]
    notes += [f"{len(a.warnings)} warning(s) ({a.role})" for a in agents.values() if a.warnings]
    if toml_problem(root):
        notes.append("invalid scenario.toml")
    if snap.simulated:
        notes.insert(0, "SIMULATED")
    return [
        root.name, record.phase if record else "not started", str(record.iteration) if record else "-",
        record.status if record else "-", rates(record), gauge(agents["init"], True), gauge(agents["execute"], True),
        " / ".join(str(len(a.compactions)) for a in agents.values()), "; ".join(notes),
    ]


def toml_problem(root: Path) -> str | None:
    try:
        load_scenario_config(Layout(root).toml)
    except ConfigError as exc:
        return str(exc)
    return None


@cli.command()
@guarded
def context(
    name: str,
    agent: Annotated[str | None, typer.Option(help="init or execute [default: the agent of the current phase]")] = None,
    png: Annotated[Path | None, typer.Option(help="timeline image [default: state/<agent>/context.png]")] = None,
    profile: Profile = None,
) -> None:
    """What the agent's next call would send, by layer, and a timeline of its context size."""
    root = loop.scenario_root(name)
    role = agent or current_agent(load_run(root))
    if role not in AGENTS:
        raise CliError(f"unknown agent {role!r}", f"use --agent {' or --agent '.join(AGENTS)}")
    disk = AgentDisk.load(root, role)  # type: ignore[arg-type]
    if not disk.records:
        raise CliError(f"{role} has no log yet in {root}", f"start the scenario with `baton run {name}`")
    member = loop.Team(root, profile=profile)[role]
    assembled = member.assembler(disk, disk.history()).assemble(disk.compaction())
    out.print(layers_table(role, assembled, member.config))
    view = read_agent(root, role)
    if view.threshold and view.threshold != member.config.threshold:
        say(Text(f"note: {role}'s last step ran with a threshold of {view.threshold:,}, these settings say "
                 f"{member.config.threshold:,}; pass the run's --profile (e.g. --profile demo) to see its layers",
                 style="yellow"))
    path = png or Layout(root).state(role) / "context.png"
    plot_timeline(view, member.config.threshold, path)
    say(Text(f"timeline of {role}'s context: {path}"))


def current_agent(record: RunRecord | None) -> str:
    return "execute" if record is not None and record.phase == "executing" else "init"


def layers_table(role: str, assembled: Any, config: Any) -> Table:
    table = Table("layer", "tokens", title=f"{role}: the next request")
    for layer, tokens in assembled.layers.items():
        table.add_row(layer, f"{tokens:,}")
    table.add_row(Text("raw total", style="bold"), f"{assembled.raw_tokens:,}")
    table.add_row(Text("estimated input (calibrated)", style="bold"), f"{assembled.estimated_input:,}")
    table.add_row("threshold / window", f"{config.threshold:,} / {config.window:,}")
    table.add_row("steps compressed / verbatim / trimmed",
                  f"{assembled.compressed_steps} / {assembled.verbatim_steps} / {assembled.trimmed_steps}")
    return table


def plot_timeline(view: AgentView, threshold: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and in tests
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps, sizes = zip(*view.points) if view.points else ((), ())
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(steps, sizes, marker="o", markersize=3, label="estimated input")
    ax.axhline(view.threshold or threshold, color="red", linestyle="--", label="threshold")
    for i, c in enumerate(view.compactions):
        ax.axvline(c.get("after_step", 0) + 0.5, color="grey", linestyle=":", label="compaction" if i == 0 else None)
    ax.set(xlabel="step", ylabel="tokens (estimated input)", title=f"{view.role}: context size per step")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not view.points:
        ax.text(0.5, 0.5, "no steps yet", transform=ax.transAxes, ha="center")
    ax.legend(loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


@cli.command()
@guarded
def worker(
    role: Annotated[str, typer.Argument(help=f"the queue to serve: {', '.join(QUEUES)}")],
    pool: Annotated[str, typer.Option(help="Celery pool: prefork, solo or threads")] = "prefork",
    profile: Profile = None,
) -> None:
    """Start a Celery worker for one queue (needs BATON_BROKER_URL)."""
    if role not in QUEUES:
        raise CliError(f"unknown worker role {role!r}", f"use one of: {', '.join(QUEUES)}")
    url = broker_url()
    if url is None:
        raise CliError("no broker configured: workers take their tasks from Redis",
                       "export BATON_BROKER_URL=redis://127.0.0.1:6379/0 (start Redis with `redis-server` or "
                       "`docker compose up redis`); without a broker, `baton run` runs embedded and needs no workers")
    check_broker(url)
    if profile is not None:
        os.environ["BATON_PROFILE"] = profile  # the tasks build each scenario's agents from the environment
    from workers.app import app

    # One task at a time per worker process: a step holds its agent's lock for its whole duration.
    app.worker_main(["worker", "-Q", role, "-n", f"{role}@%h", "-c", "1", "-E", "--loglevel", "INFO", "--pool", pool])


def main() -> None:
    """The ``baton`` entry point."""
    cli()

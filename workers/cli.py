"""The ``baton`` command line: the typer app and its commands.

Every command reads and writes the scenario folder through ``workers.loop``;
progress and status are read back from the disk (``workers.readmodel``), so
``status`` works while workers run or after they died, and ``run`` follows a
distributed run the same way it follows an embedded one (``workers.dispatch``).

Exit codes (``EXIT_CODES``, also in ``baton --help``): 0 the command completed
(a scenario that succeeded), 1 the scenario finished below its target, 2 an
error, 3 the run stopped to wait for a human's approval, 130 interrupted
(Ctrl-C); errors print what went wrong and what to do, never a traceback
(``workers.errors``).
"""

from __future__ import annotations

import enum
import importlib.metadata
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from agents.agent import assembler_for
from agents.config import AgentConfig
from agents.conventions import FILE
from agents.disk import AgentDisk
from context.assembly import ContextOverflow
from proving import startup
from proving.priority import lower_priority
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.run import RunRecord, add_shipped_example, copy_scenario, load_run, shipped_example
from scenarios.store import AGENTS, Layout, check_name
from workers import evaluate_command, export_commands, gc_pauses, import_command, loop
from workers.app import QUEUES, broker_url
from workers.dispatch import check_broker, choose_mode, execute
from workers.errors import CliError, guarded
from workers.interrupt import EXIT_INTERRUPTED, end_interrupted, say_interrupted
from workers.overview import status_overview
from workers.readmodel import context_json, first_request, read_agent, reading_config, scenario_roots, status_json
from workers.rebuild import rebuild_and_show
from workers.render import err, layers_table, out, say
from workers.status_view import status_report
from workers.timeline import plot_timeline

EXIT_WAITING = 3  # the run stopped to wait for `baton approve` or `baton reject`: not a success, not an error
EXIT_CODES = ("0 done (the scenario succeeded, or the command completed), 1 the scenario finished below its target, "
              f"2 an error (the message says what to do), {EXIT_WAITING} the run waits for your approval, "
              "130 interrupted (Ctrl-C)")
SCENARIOS_DIR_OPTION = "--scenarios-dir"


class HoistingGroup(TyperGroup):
    """Accepts ``--scenarios-dir`` after the command too (``baton status --scenarios-dir X``): it is moved
    in front of the command, where the group's own option parses it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, hoist(args, SCENARIOS_DIR_OPTION))
        except KeyboardInterrupt:
            raise interrupted() from None

    def invoke(self, ctx: click.Context):  # noqa: ANN201
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # Ctrl-C exits 130 by convention, saying so in one line (no "Aborted!")
            raise interrupted() from None


def interrupted() -> typer.Exit:
    """Ctrl-C inside a command: one line, then exit 130 the ordinary way (what the command was doing has
    unwound, its files closed); ``baton run`` says more and exits 130 itself (workers.dispatch)."""
    say_interrupted()
    return typer.Exit(EXIT_INTERRUPTED)


def hoist(args: list[str], option: str) -> list[str]:
    end = args.index("--") if "--" in args else len(args)  # after "--" every word is an argument
    head, moved, i = [], [], 0
    while i < end:
        word = args[i]
        if word == option and i + 1 < end:
            moved += args[i:i + 2]
            i += 2
        elif word.startswith(option + "="):
            moved.append(word)
            i += 1
        else:
            head.append(word)
            i += 1
    return moved + head + args[end:]


class PlainUsage(TyperCommand):
    """Usage and help that name arguments like the docs do (``baton new NAME``), without click 8.5's
    ``{NAME}`` for a required argument and typer's ``NAME <str>`` type suffix."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [re.sub(r"^\{(.+)\}$", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]

    def get_help(self, ctx: click.Context) -> str:
        return re.sub(r"^(  [A-Z_]+) <str>", r"\1      ", super().get_help(ctx), flags=re.MULTILINE)


cli = typer.Typer(cls=HoistingGroup, no_args_is_help=True, rich_markup_mode=None, epilog=f"Exit codes: {EXIT_CODES}.",
                  help="baton: two Claude agents build agent-evaluation scenarios.")
command = cli.command  # every command below: ``@command(cls=PlainUsage)``

Agent = enum.Enum("Agent", {role: role for role in AGENTS}, type=str)  # choices shown as <init|execute>
WorkerRole = enum.Enum("WorkerRole", {queue: queue for queue in QUEUES}, type=str)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"baton {importlib.metadata.version('baton')}")
        raise typer.Exit()


@cli.callback()
def options(
    scenarios_dir: Annotated[Path | None, typer.Option(
        SCENARIOS_DIR_OPTION, help=f"folder of scenarios, before or after the command "
                                   f"[default: ${loop.SCENARIOS_ENV} or ./scenarios]")] = None,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True,
                                         help="more log lines on stderr: -v info, -vv debug")] = 0,
    log_level: Annotated[str | None, typer.Option(
        help=f"log level on stderr: {', '.join(LOG_LEVELS)} [default: WARNING, or as -v says]")] = None,
    version: Annotated[bool, typer.Option("--version", callback=show_version, is_eager=True,
                                          help="print baton's version and exit")] = False,
) -> None:
    configure_logging(log_level or ("DEBUG" if verbose > 1 else "INFO" if verbose else "WARNING"))
    startup.fix()  # settings are this start's environment: nothing read later (a .env) changes them (SPEC §8)
    # Exported so the loop (and any worker started from here) resolves the same folder.
    chosen = scenarios_dir or Path(os.environ.get(loop.SCENARIOS_ENV) or "scenarios")
    os.environ[loop.SCENARIOS_ENV] = str(chosen.resolve())
    columns = os.environ.get("COLUMNS", "")
    for console in (out, err):
        if not console.is_terminal:
            # Piped or captured: rich's default of 80 columns squeezes the tables, whose rows must stay one
            # line each (render.new_table); 200 fits the widest (status). Set on every call, since the
            # consoles live as long as the process (tests invoke the CLI many times).
            console.width = int(columns) if columns.isdigit() else 200


class CurrentStderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a line is logged (tests swap it for every invocation)."""

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def configure_logging(level: str) -> None:
    """One stderr handler on the root logger, however often the CLI is invoked in one process."""
    if level.upper() not in LOG_LEVELS:
        raise typer.BadParameter(f"use one of {', '.join(LOG_LEVELS)}", param_hint="--log-level")
    root = logging.getLogger()
    if not any(isinstance(h, CurrentStderr) for h in root.handlers):
        handler = CurrentStderr()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(level.upper())
    # Each agent's model backend warns that it is simulated; the CLI says it once, in its SIMULATED
    # banner and status lines, so those warnings show only at -v (a worker's log keeps them).
    logging.getLogger("agents.backends").setLevel("INFO" if level.upper() in ("DEBUG", "INFO") else "ERROR")


Embedded = Annotated[bool | None, typer.Option(
    "--embedded/--broker", help="run in this process, or dispatch to workers [default: broker if configured]")]
Profile = Annotated[str | None, typer.Option(help="settings profile, e.g. demo (small windows, early compaction)")]
Follow = Annotated[bool, typer.Option(help="broker mode: follow progress until the run stops")]

Name = Annotated[str, typer.Argument(metavar="NAME", help="the scenario: a folder in the scenarios folder")]

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


# ---- new -----------------------------------------------------------------------------------


@command(cls=PlainUsage)
@guarded
def new(
    name: Name,
    brief: Annotated[Path | None, typer.Option(help="a Markdown file to use as brief.md")] = None,
    from_: Annotated[str | None, typer.Option(
        "--from", metavar="SCENARIO",
        help="copy this scenario (name or folder): its brief, scenario.toml and files, not its runs")] = None,
) -> None:
    """Create scenarios/NAME with scenario.toml and brief.md."""
    root = loop.scenarios_dir() / check_name(name)
    if root.exists() or root.is_symlink():
        raise CliError(f"{root} already exists", "pick another name, or delete the folder to start over")
    if brief is not None and from_ is not None:
        raise CliError("--brief and --from both give brief.md", "pass only one of them")
    source = source_folder(from_) if from_ is not None else None
    if source is not None and Folder(source).is_file("scenario.toml"):
        copy_scenario(source, root)  # its settings, comments and any other file, renamed; not run.json, state/, runs/
        say(Text(f"created {root}/ as a copy of {source} (without its runs)"))
    else:
        text = brief_text(name, brief, source)
        root.mkdir(parents=True)
        Folder(root).write_atomic("brief.md", text)
        Folder(root).write_atomic("scenario.toml", TOML_TEMPLATE.format(name=name))
        say(Text(f"created {root}/ (scenario.toml, brief.md)"))
    after = "edit brief.md, then" if brief is None and from_ is None else "next:"
    say(Text(f"{after} `baton run {name}`"))
    shared = root.parent / FILE
    say(Text(f"house rules for every scenario go in {shared} ({'found' if shared.is_file() else 'optional'}), "
             f"this scenario's own in {root / FILE} (optional); both agents get them (docs/agents.md, "
             "\"Conventions\")"))


def source_folder(source: str) -> Path:
    folder = Path(source) if Path(source).is_dir() else loop.scenarios_dir() / check_name(source)
    if not Folder(folder).is_file("brief.md"):
        folder = shipped_example(source) or folder  # `--from refund_desk` from any folder
    if not Folder(folder).is_file("brief.md"):
        raise CliError(f"no brief.md in {folder}",
                       "give the name or folder of an existing scenario, e.g. --from refund_desk")
    return folder


def brief_text(name: str, brief: Path | None, source: Path | None) -> str:
    if brief is not None:
        if not brief.is_file():
            raise CliError(f"brief file not found: {brief}", "pass the path of a Markdown file")
        return brief.read_text(encoding="utf-8")
    if source is not None:
        return Folder(source).read_text("brief.md", RECORD_BYTES)
    return BRIEF_TEMPLATE.format(name=name)


# ---- run, approve, reject, resume: move the run on, then execute what follows ----------------


def advance(name: str, move: Callable[[Path], list[loop.Task]], profile: str | None, url: str | None,
            follow: bool) -> None:
    """The one path of the commands that move a run on: ``move`` changes run.json and returns the tasks to run
    where ``choose_mode`` said (``url``: None here, else that broker), which each command asks first."""
    root = loop.scenario_root(name)
    # Before ``move``: a bad setting must leave the disk as it was.
    loop.check_settings(root, profile)
    code = execute(root, move, url, profile, follow)  # the move is made under the scenario lock
    if code == 0 and waiting_for_approval(root):
        code = EXIT_WAITING  # scripts tell "done" from "a human must look at the design now"
    if code:
        raise typer.Exit(code)


def waiting_for_approval(root: Path) -> bool:
    record = load_run(root)
    return record is not None and not record.finished and record.phase == "awaiting_approval"


def start_run(root: Path, auto_approve: bool, profile: str | None) -> list[loop.Task]:
    """``baton run``'s move: start a run (a finished one is archived first) or continue the current one."""
    record = load_run(root)
    if record is not None and record.phase == "done":
        say(Text(f"{root.name} finished before ({record.status}); starting a new run, "
                 f"the previous one moves to {root.name}/runs/"))
    tasks = loop.start(root, auto_approve=auto_approve, profile=profile)
    record = load_run(root)
    if auto_approve and record is not None and record.phase == "awaiting_approval":
        tasks = loop.approve(root)  # the design already waits: --auto-approve approves it
    return tasks


@command(cls=PlainUsage)
@guarded
def run(
    name: Name,
    auto_approve: Annotated[bool, typer.Option(help="skip the human approval of each design")] = False,
    profile: Profile = None,
    embedded: Embedded = None,
    follow: Follow = True,
) -> None:
    """Launch (or continue) the iterations and follow progress."""
    url = choose_mode(embedded)  # a broker or sandbox that cannot be had: refused before the example is copied
    copied = add_shipped_example(loop.scenarios_dir(), check_name(name))  # the example, from any folder
    if copied is not None:
        say(Text(f"copied the example {name} that ships with baton to {copied}/"))
    advance(name, lambda root: start_run(root, auto_approve, profile), profile, url, follow)


@command(cls=PlainUsage)
@guarded
def approve(name: Name, profile: Profile = None, embedded: Embedded = None, follow: Follow = True) -> None:
    """Approve the design waiting for review; Execute starts."""
    advance(name, loop.approve, profile, choose_mode(embedded), follow)


@command(cls=PlainUsage)
@guarded
def reject(
    name: Name,
    feedback: Annotated[str, typer.Option(help="what Init should change")],
    profile: Profile = None,
    embedded: Embedded = None,
    follow: Follow = True,
) -> None:
    """Send the design back to Init with feedback."""
    advance(name, lambda root: loop.reject(root, feedback), profile, choose_mode(embedded), follow)


@command(cls=PlainUsage)
@guarded
def resume(name: Name, profile: Profile = None, embedded: Embedded = None, follow: Follow = True,
           rebuild: Annotated[bool, typer.Option(
               help="first rebuild a corrupted run.json from the folder (iterations, handoffs, reports, logs); "
                    "the broken file is kept beside it")] = False) -> None:
    """Continue from what is on disk (after a crash, a stop or an error)."""
    url = choose_mode(embedded)  # before the rebuild writes
    if rebuild:
        rebuild_and_show(loop.scenario_root(name), profile)
    advance(name, loop.resume, profile, url, follow)


# ---- reading: status, context --------------------------------------------------------------


@command(cls=PlainUsage)
@guarded
def status(
    name: Annotated[str | None, typer.Argument(metavar="NAME", help="one scenario; all when omitted")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable: run, agents, models and spend")] = False,
) -> None:
    """Where each scenario stands, read from disk only."""
    if as_json:
        roots = [loop.scenario_root(name)] if name else scenario_roots(loop.scenarios_dir())
        reports = [status_json(root) for root in roots]
        typer.echo(json.dumps(reports[0] if name else reports, indent=2))
    elif name is None:
        status_overview(loop.scenarios_dir())
    else:
        status_report(loop.scenario_root(name))


@command(cls=PlainUsage)
@guarded
def context(
    name: Name,
    agent: Annotated[Agent | None, typer.Option(help="whose context [default: the agent of the current phase]")] = None,
    png: Annotated[Path | None, typer.Option(help="timeline image [default: state/<agent>/context.png]")] = None,
    profile: Profile = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable: layers, timeline, compactions")] = False,
) -> None:
    """What the agent's next call would send, by layer, and a timeline of its context size."""
    root = loop.scenario_root(name)
    role = agent.value if agent is not None else current_agent(load_run(root))
    disk = AgentDisk.load(root, role)  # type: ignore[arg-type]
    config = reading_config(root, role, profile)  # no model: works offline, with any brief, before any run
    if not disk.records:  # nothing to plot, and a read-only command must not create state/ before a run
        context_before_any_step(root, role, config, as_json)
        return
    view, threshold = read_agent(root, role), config.context.threshold
    path = png or Layout(root).state(role) / "context.png"
    plot_timeline(view, config.context, path)
    try:
        assembled = assembler_for(config, disk, disk.history()).assemble(disk.compaction())
    except ContextOverflow as exc:  # settings smaller than the run's: what the next step does about it
        say(Text(f"{role}'s next request does not fit these settings' window of {config.context.window:,} ({exc}); "
                 "its next step compacts first. Pass the run's --profile to see the layers it sends", style="yellow"))
        say(Text(f"timeline of {role}'s context: {path}"))
        return
    if as_json:
        typer.echo(json.dumps(context_json(root, role, assembled, config.context, view) | {"png": str(path)},
                              indent=2))
        return
    out.print(layers_table(role, assembled, config, view))
    if view.threshold and view.threshold != threshold:
        say(Text(f"note: {role}'s last step ran with a threshold of {view.threshold:,}, these settings say "
                 f"{threshold:,}; pass the run's --profile (e.g. --profile demo) to see its layers", style="yellow"))
    say(Text(f"timeline of {role}'s context: {path}"))


def context_before_any_step(root: Path, role: str, config: AgentConfig, as_json: bool) -> None:
    assembled, view = first_request(config, root), read_agent(root, role)
    if as_json:
        typer.echo(json.dumps(context_json(root, role, assembled, config.context, view) | {"png": None}, indent=2))
        return
    out.print(layers_table(role, assembled, config, view))
    say(Text(f"{role} has not run yet: its first request sends the system prompt and tools above, then its "
             "opening; no timeline yet"))


def current_agent(record: RunRecord | None) -> str:
    return "execute" if record is not None and record.phase == "executing" else "init"


# ---- worker --------------------------------------------------------------------------------


# On a busy machine the compaction worker is served first: a compaction holds its agent's next step,
# while a step worker's many threads mostly wait on the model anyway (docs/deployment.md, "Sizing").
WORKER_NICE = {"init": 10, "execute": 10, "compaction": 0}
# The compaction worker's consumer thread takes each message off Redis between its task threads' turns on the
# GIL, and waits up to a turn each time it comes back from a socket. Traced at S=100 in bench/scale.py, a reply
# already waiting on the socket was read up to 438 ms after the request went out. Shorter turns shorten those
# waits; alone the effect was within the spread between runs (compaction wait p99 61 and 312 ms at 1 ms,
# 196 and 272 ms at 5 ms; docs/deployment.md "Sizing").
SWITCH_INTERVAL_S = {"compaction": 0.001}


def check_worker_env() -> None:
    """The settings a worker reads from its environment, checked before it takes a task."""
    try:
        from proving.cpu_slots import slots_from_env  # its import reads BATON_CPU_SLOTS already
        from proving.evaluation import fork_server
        from proving.sandbox.policy import evaluation_sandbox
        from workers.reaper import ReaperSettings  # with the agent lock's TTL it must outlast

        slots_from_env()
        ReaperSettings.from_env()
        fork_server.enabled()
        evaluation_sandbox()
        gc_pauses.enabled()
    except ValueError as exc:
        raise CliError(str(exc), "correct or unset that variable, then start the worker again") from None


@command(cls=PlainUsage)
@guarded
def worker(
    queue: Annotated[WorkerRole, typer.Argument(metavar="ROLE", help="the queue to serve")],
    concurrency: Annotated[int, typer.Option(
        min=1, help="steps served at once; above 1 they share one process as threads, since a step mostly "
                    "waits on the model (CPU-heavy work is bounded by BATON_CPU_SLOTS, default the cores)")] = 1,
    pool: Annotated[str | None, typer.Option(
        help="Celery pool: prefork, solo or threads [default: prefork for one step at a time, else threads]")] = None,
    profile: Profile = None,
    name: Annotated[str | None, typer.Option(
        help="Celery node name, unique per worker process; for a second process of a role on one host, e.g. "
             "execute-2@%h [default: ROLE@%h]")] = None,
    nice: Annotated[int | None, typer.Option(
        min=0, max=19, help="CPU niceness this worker adds to its own; its evaluation samples add 5 more "
                            f"[default: {', '.join(f'{r} {n}' for r, n in WORKER_NICE.items())}]")] = None,
) -> None:
    """Start a Celery worker for one queue (needs BATON_BROKER_URL)."""
    role = queue.value
    pool = pool or ("prefork" if concurrency == 1 else "threads")
    if pool == "solo" and concurrency > 1:
        raise CliError("the solo pool runs one task at a time", "use --pool threads with --concurrency above 1")
    url = broker_url()
    if url is None:
        raise CliError("no broker configured: workers take their tasks from Redis",
                       "export BATON_BROKER_URL=redis://127.0.0.1:6379/0 (start Redis with `redis-server` or "
                       "`docker compose up redis`); without a broker, `baton run` runs embedded and needs no workers")
    check_worker_env()
    check_broker(url)
    if profile is not None:
        os.environ["BATON_PROFILE"] = profile  # the tasks build each scenario's agents from the environment
    lower_priority(WORKER_NICE[role] if nice is None else nice)  # its session's autogroup too, if it leads one
    if pool == "threads" and role in SWITCH_INTERVAL_S:
        sys.setswitchinterval(SWITCH_INTERVAL_S[role])
    gc_pauses.install()
    from workers.app import app

    logging.getLogger("agents.backends").setLevel(logging.NOTSET)  # a worker's log says which model it runs

    # Each step holds its agent's lock for its whole duration, so one agent never runs two steps at once
    # however many a worker serves; with threads, the steps of many scenarios wait on the model together.
    # Without gossip and mingle: baton's workers never consult each other (the agent locks, leases and step
    # numbers coordinate them), and gossip costs every worker a message for each other worker's heartbeat.
    # Heartbeats stay on: Flower shows a worker online by them.
    app.worker_main(["worker", "-Q", role, "-n", name or f"{role}@%h", "-c", str(concurrency), "-E", "--loglevel",
                     "INFO", "--pool", pool, "--without-gossip", "--without-mingle"])


@command("fake-api", cls=PlainUsage)
@guarded
def fake_api(
    port: Annotated[int, typer.Option(help="port to listen on")],
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    catalogue: Annotated[Path | None, typer.Option(help="a JSON model catalogue instead of the built-in one")] = None,
    fault: Annotated[list[str] | None, typer.Option(
        help="queue a model fault at start: KIND or KIND:COUNT (repeatable)")] = None,
    hang_seconds: Annotated[float, typer.Option(help="how long a hang fault waits")] = 30.0,
    latency: Annotated[str | None, typer.Option(
        help="time to first token of a message reply: BASE[,JITTER], e.g. 2s, 1500ms or 2s,0.5s")] = None,
    output_speed: Annotated[str | None, typer.Option(
        help="output tokens/s: N for every model, or MODEL=N,... e.g. claude-sonnet-5-5=80")] = None,
    seed: Annotated[int, typer.Option(help="seed of the latency jitter")] = 0,
    play: Annotated[str | None, typer.Option(
        metavar="EXAMPLE", help="answer every request with this example's script, whatever scenario it names "
                                "(copies of the example under other names, e.g. for bench/scale.py)")] = None,
) -> None:
    """A local Anthropic-compatible API answered by the simulated model (docs/fake-api.md)."""
    from workers.fake_api.command import serve

    serve(port, host, catalogue, fault or [], hang_seconds, lambda line: say(Text(line)),
          latency=latency, output_speed=output_speed, seed=seed, play=play)


export_commands.register(cli, PlainUsage)
evaluate_command.register(cli, PlainUsage)
import_command.register(cli, PlainUsage)


def main() -> None:
    """The ``baton`` entry point."""
    try:
        cli()
    except KeyboardInterrupt:  # before or after a command (building the click app, its exit)
        end_interrupted()

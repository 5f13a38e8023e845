"""Running a scenario's tasks: here (embedded) or on the workers (broker), following progress on disk.

Either way the progress shown and the exit code come from the disk, so a
distributed run is followed like an embedded one. Exit codes: 0 the run
succeeded or stopped to wait for approval, 1 it finished below its target,
130 interrupted; an error raises ``CliError`` (exit code 2).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from rich.text import Text

from agents import tracing
from agents.models import API_KEY_ENV, ModelError
from proving.evaluation.run import EvaluationError, check_sandbox
from scenarios.run import load_run
from scenarios.store import AGENTS
from workers import loop
from workers.app import BROKER_ENVS, QUEUES, broker_url, broker_variable, mask_url, url_problem
from workers.errors import CliError, broker_help
from workers.exclusion import workers_excluded
from workers.gate_progress import GateLine
from workers.interrupt import EXIT_INTERRUPTED
from workers.readmodel import SIMULATED
from workers.render import Progress, say, summary
from workers.scenario_lock import ScenarioBusy, scenario_lock, shared_scenario_lock

POLL_S = 1.0
QUIET_HINT_S = 30.0  # in broker mode, say how to start workers after this long without progress


def choose_mode(embedded: bool | None) -> str | None:
    """None for embedded, else the broker URL; either way checked before anything is written: the broker
    answers, or (embedded) the sandbox the evaluations need can be made here."""
    url = broker_url()
    if embedded or (embedded is None and url is None):
        check_sandbox_here()
        return None
    if url is None:
        raise CliError("--broker needs a broker, and none is configured",
                       "export BATON_BROKER_URL=redis://127.0.0.1:6379/0 (and start Redis and `baton worker` for each "
                       f"queue: {', '.join(QUEUES)}), or run embedded")
    check_broker(url)
    return url


def check_broker(url: str) -> None:
    """A URL baton can use (``url_problem``) of a Redis that answers, or CliError: before anything is written."""
    variable = broker_variable() or BROKER_ENVS[0]
    problem = url_problem(url)
    try:
        if problem is None:
            redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except redis.exceptions.RedisError as exc:
        raise broker_help(url, exc) from None
    except ValueError as exc:  # a URL redis-py cannot read (a database that is no number)
        problem = f"it cannot be read as a Redis URL ({exc})"
    if problem is not None:
        raise CliError(f"{variable}={mask_url(url)} cannot be baton's broker: {problem}",
                       f"set {variable}=redis://[:PASSWORD@]HOST:PORT/DB (rediss:// for TLS), e.g. "
                       f"redis://127.0.0.1:6379/0, or unset {' and '.join(BROKER_ENVS)} to run embedded in this "
                       "process")


def check_sandbox_here() -> None:
    """Embedded, Execute's evaluations and the gates run their samples in this process's sandbox. One that cannot
    be made here stops the command now with the install hint; found by the tool instead, it was an error the
    agent retried until its turn ended ("replied 4 times in a row without a tool call that ran")."""
    try:
        check_sandbox()  # the evaluation's own check: bwrap works here, or a person chose BATON_EVAL_SANDBOX=none
    except EvaluationError as exc:
        raise CliError(str(exc), "this command runs them in this process: install bubblewrap here, or export "
                                 "BATON_EVAL_SANDBOX=none to run them unconfined on purpose") from None


Move = Callable[[Path], list[loop.Task]]  # a command's change to run.json, returning what runs next


def execute(root: Path, move: Move, url: str | None, profile: str | None, follow: bool = True) -> int:
    """Make ``move`` under the scenario lock, run (embedded) or dispatch (broker) the tasks it returns, show
    progress, and return the exit code. A busy scenario exits 2 before any change."""
    if url is None:
        if not run_here(root, move, profile):
            say(Text(f"interrupted: everything finished so far is on disk; continue with `baton resume {root.name}`"))
            summary(root)
            return EXIT_INTERRUPTED
    else:
        try:
            with shared_scenario_lock(root):  # beside the workers, never beside an embedded run
                tasks = move(root)
                if os.environ.get(API_KEY_ENV):
                    # Pin the models now: a retired or unknown one stops the run before anything is dispatched.
                    with failure_recorded(root):
                        loop.Team(root, profile=profile)
                dispatch_to(url, tasks, profile)
        except ScenarioBusy as busy:
            raise busy_error(busy) from None
        if not follow:
            return 0  # the workers go on
        if not follow_disk(root):
            return EXIT_INTERRUPTED  # Ctrl-C while following: the workers go on, but this command did not finish
    summary(root)
    return outcome(root)


def run_here(root: Path, move: Move, profile: str | None) -> bool:
    """Embedded: make the move and run the tasks in this process, refreshing progress after each; False if
    interrupted."""
    from workers.embedded import run_embedded

    # The whole scenario, from before the first change (the move) to the end: a second command in another
    # shell exits 2 having changed nothing, and workers (shared holders) wait until this run ends.
    try:
        with scenario_lock(root), workers_excluded(root):
            tasks = move(root)
            with failure_recorded(root):
                team = loop.Team(root, profile=profile)
                simulated = any(team[role].model.label == SIMULATED for role in AGENTS)
                with Progress(root, simulated) as progress:
                    gates = GateLine(root)  # samples done per gate while the iteration is proved

                    def shown(*done: object) -> None:
                        progress.refresh()
                        gates.show()

                    try:
                        run_embedded(tasks, team, on_task=shown)
                    except KeyboardInterrupt:
                        return False
                    finally:
                        tracing.flush()
    except ScenarioBusy as busy:
        raise busy_error(busy) from None
    return True


@contextmanager
def failure_recorded(root: Path) -> Iterator[None]:
    """An error that stops this process stops the run: run.json says ``error`` with the reason, not ``running``
    as if something still ran it (an unreachable ANTHROPIC_BASE_URL, a model that cannot be pinned)."""
    try:
        yield
    except Exception as exc:
        known = isinstance(exc, (ModelError, CliError))  # messages written for the user; others need their kind
        loop.record_failure(root, str(exc) if known else f"{type(exc).__name__}: {exc}")
        raise


def busy_error(busy: ScenarioBusy) -> CliError:
    name, holder = busy.root.name, busy.holder
    if busy.by_workers:
        return CliError(str(busy), f"follow it with `baton status {name}`, or stop the workers before running it "
                                   "--embedded; two runners would write the same steps")
    stop = f"stop it (Ctrl-C in its terminal, or `kill {holder.pid}` on {holder.host})" if holder else "stop it"
    return CliError(str(busy), f"wait for it (`baton status {name}` shows its progress), or {stop} and then "
                               f"`baton resume {name}`; the lock frees itself when that process ends")


def dispatch_to(url: str, tasks: list[loop.Task], profile: str | None) -> None:
    if profile is not None:
        say(Text(f"note: the workers take the profile from run.json: `baton run --profile {profile}` records it there "
                 "and they build the run's agents with it; approve, reject and resume keep the profile the run "
                 "was started with"))
    # Imported here: the Celery app reads the broker URL when imported, and embedded runs need no Celery.
    from workers.tasks import dispatch

    dispatch(tasks)
    say(Text(f"dispatched {len(tasks)} task(s) to {mask_url(url)}"))


def follow_disk(root: Path) -> bool:
    """Poll the disk until the run stops; False if the user stopped following (Ctrl-C)."""
    with Progress(root, simulated=False) as progress:  # the first step event tells whether it is simulated
        last, quiet_since, hinted = None, time.monotonic(), False
        gates = GateLine(root)
        try:
            while True:
                snap = progress.refresh()
                gates.show()
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
            say(Text("interrupted: stopped following; the workers keep going. Check with "
                     f"`baton status {root.name}`"))
            return False


def outcome(root: Path) -> int:
    """The exit code of a run that stopped, with what to do next."""
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
        last = record.results[-1] if record.results else None
        missed = "; ".join(last.unmet) if last is not None and last.unmet else \
            f"{last.success_rate if last else 0.0:.0%} < {record.target_success_rate:.0%}"
        say(Text(f"{name} finished below its target: {missed} after "
                 f"{record.iteration} iteration(s); raise max_iterations in scenario.toml and run again, "
                 "or revise brief.md", style="yellow"))
        return 1
    raise CliError(f"{name} stopped while {record.phase} with nothing left to run",
                   f"continue it with `baton resume {name}`; `baton status {name}` shows the agents' errors")

"""What the CLI prints: tables, context gauges, the live progress view, event lines and summaries.

Everything here draws a ``Snapshot`` (or a run record) already read from disk by
``workers.readmodel``; nothing here reads events itself or changes the disk.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from rich.console import Group
from rich.live import Live
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agents.catalogue import PinnedModel
from proving.evaluation.report_file import ReportFile
from proving.export.tryout import read_tryout
from scenarios.run import IterationResult, RunRecord
from workers.inert import InertConsole, InertTable
from workers.readmodel import (
    SIMULATED,
    Activity,
    AgentView,
    Snapshot,
    read_reports,
)
from workers.repeats import Repeated, grouped, shape
from workers.targets import RUNNABLE, figure_summary, without_reasons

ACTORS = {"designing": " (Init)", "executing": " (Execute)", "proving": " (the gates)",
          "awaiting_approval": " (your turn)"}

out = InertConsole(highlight=False)  # model-written text printed inert (workers/inert.py)
err = InertConsole(stderr=True, highlight=False)


def say(text: Text) -> None:
    out.print(text, soft_wrap=True)


def new_table(*headers: str, keep: int = 0, **options: Any) -> Table:
    """A table whose rows stay one line each when piped or captured (``grep``, ``awk``, logs): cells are cut
    with an ellipsis rather than wrapped. On a terminal they wrap to fit the window, as rich does. The first
    ``keep`` columns (what names a row: an iteration, an agent) are never shrunk below their header; give them
    their content's width with ``fit_first``."""
    piped = not out.is_terminal
    grid = InertTable(**options)
    for i, header in enumerate(headers):
        grid.add_column(header, no_wrap=piped, overflow="ellipsis", min_width=len(header) if i < keep else None)
    return grid


def fit_first(table: Table, keep: int) -> Table:
    """The first ``keep`` columns widened to their longest cell, so rich shrinks the others first."""
    for column in table.columns[:keep]:
        cells = [Text(c) if isinstance(c, str) else c for c in column.cells]
        column.min_width = max([len(str(column.header)), *(c.cell_len for c in cells if isinstance(c, Text))])
    return table


def fitted(*forms: Callable[[], Table]) -> Table:
    """The first of a table's ``forms`` (widest first) that fits the window with every cell whole; the last when
    none does (rich then shrinks its cells). Measured unbounded: a measure capped at the window would always
    fit, and cut the cells instead."""
    unbounded = out.options.update(max_width=10**6)
    table = forms[0]()
    for form in forms[1:]:
        if Measurement.get(out, unbounded, table).maximum <= out.width:
            break
        table = form()
    return table


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def figures_line(f: dict[str, Any]) -> str:
    """The gates' figures of one iteration in a line (``workers.targets.figure_summary``); '-': not measured."""
    if not f:
        return "gates: not run"
    solver = f" ({f['solver']}, pass^k {share(f.get('pass_hat_k'))})" if f.get("solver") else ""
    floors = f.get("floor_agents") or {}
    floor = share(f.get("floor")) + (f" ({', '.join(f'{a} {v:.0%}' for a, v in floors.items())})" if floors else "")
    dups = "-" if f.get("duplicates") is None else str(f["duplicates"])
    return (f"floor {floor}, mutation score {share(f.get('mutation_score'))}, solvable {share(f.get('solvable_share'))}"
            f"{solver}, coverage {share(f.get('coverage'))}, duplicates {dups}, findings {f.get('findings', 0)}"
            f"{defects_note(f.get('defects'))}")


def defects_note(defects: Any) -> str:
    """" (shortcut 3, unsolved 2)": how many findings name each defect (docs/proving.md's vocabulary)."""
    if not isinstance(defects, dict) or not defects:
        return ""
    return " (" + ", ".join(f"{name} {count}" for name, count in defects.items()) + ")"


def targets_line(record: RunRecord) -> str:
    return (f"targets: success rate >= {record.target_success_rate:.0%}, floor <= {record.target_floor:.0%}, "
            f"solvable share >= {record.target_solvable_share:.0%}, coverage >= {record.target_coverage:.0%}")


# ---- pieces --------------------------------------------------------------------------------


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
                 title="SIMULATED", border_style="bold magenta", expand=False)


def where(record: RunRecord | None) -> str:
    if record is None:
        return "not started"
    return f"{record.phase}, iteration {record.iteration}/{record.max_iterations}, {record.status}"


def event_line(role: str, kind: str, entry: Any) -> Text:
    if kind == "compaction":
        fallback = " (fallback summary)" if entry.fallback else \
            " (by the API)" if getattr(entry, "strategy", "summary") == "api" else ""
        return Text(f"  {role}: compaction #{entry.id} after step {entry.after_step}: "
                    f"~{entry.tokens_before:,} -> ~{entry.tokens_after:,} tokens{fallback}")
    style = "yellow" if kind == "warning" else "red"
    return Text.assemble((f"  {role} {kind}: ", style), str(entry))


def ago(seconds: float) -> str:
    if seconds < 90:
        return f"{max(0, round(seconds))} s ago"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min ago"
    if seconds < 36 * 3600:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} days ago"


def moving(record: RunRecord | None) -> bool:
    """A phase in which agents should be stepping: ``running`` on disk, whether or not anything runs it."""
    return record is not None and not record.finished and record.phase in ("designing", "executing", "proving")


def activity_line(activity: Activity, name: str) -> Text:
    """Whether a ``running`` scenario is really moving: its last step's age and what is alive to continue it."""
    since = activity.seconds_since_last_step
    last = f"last step {ago(since)} ({activity.last_step})" if since is not None else "no step yet"
    if activity.embedded is not None:
        alive = f"an embedded run holds it: {activity.embedded.describe()}"
    elif activity.workers:
        alive = f"workers answering: {', '.join(activity.workers)}"
    elif activity.workers is None:
        alive = "no embedded run holds it, and no broker is configured to ask for workers"
    elif activity.broker_problem:
        alive = f"no embedded run holds it, and the broker could not be asked ({activity.broker_problem})"
    else:
        alive = "no embedded run holds it, and no worker answers (one in a --pool solo task cannot)"
    line = Text.assemble(("activity: ", "bold"), f"{last}; {alive}")
    if not activity.alive:
        line.append(f"; nothing moves it on: continue with `baton resume {name}` (or start the workers)",
                    style="yellow")
    return line


# ---- tables --------------------------------------------------------------------------------


def agents_table(snap: Snapshot, detailed: bool = False) -> Table:
    """Each agent's model, steps, context and compactions (and circuit breaker, in detail), in the widest form
    that fits: long headers and the context as a bar, then compact, then short headers and the model's
    lifecycle left to a line beneath (``models_line``)."""
    return fitted(lambda: _agents_table(snap, detailed, "wide"), lambda: _agents_table(snap, detailed, "compact"),
                  lambda: _agents_table(snap, detailed, "short"))


def _agents_table(snap: Snapshot, detailed: bool, form: str) -> Table:
    context = {"wide": "context (last step, estimated, vs threshold)", "compact": "context vs threshold",
               "short": "context"}[form]
    breaker = ("circuit breaker" if form == "wide" else "breaker",) if detailed else ()
    table = new_table("agent", "model", "steps", context, "compactions", *breaker, keep=3)
    for view in snap.agents.values():
        model = model_cell(view, snap.pins.get(view.role), short=form == "short")
        row: list[Any] = [view.role, model, str(view.steps), gauge(view, form != "wide"), compactions_cell(view)]
        if detailed:
            row.append(view.breaker)
        table.add_row(*row)
    return fit_first(table, 3)


def compactions_cell(view: AgentView) -> str:
    """How many compactions, then who wrote them when not baton's summary: "3", "3 (api)" (all by the API's
    on-demand compaction), "3 (2 api)" (the other, baton's own summary: the api strategy fell back to it),
    "3 (1 fallback)" (baton's fallback summary, no model's), "3 (2 api, 1 fallback)". Short: the agents' table
    must fit 80 and 120 columns."""
    n, api = len(view.compactions), view.api_compactions
    said = (["api" if api == n else f"{api} api"] if api else []) + \
        ([f"{view.fallbacks} fallback"] if view.fallbacks else [])
    return f"{n} ({', '.join(said)})" if said else f"{n}"


def model_cell(view: AgentView, pin: PinnedModel | None, short: bool = False) -> Text:
    """The model an agent runs on: SIMULATED, or the pinned model id with its lifecycle when not active (``short``:
    without the retirement date)."""
    if view.model == SIMULATED:
        return Text("SIMULATED", style="bold magenta")
    if pin is None:
        return Text(view.model or "-")
    if pin.lifecycle == "deprecated":
        when = "" if short else f", retires {pin.retires_at or '?'}"
        return Text.assemble(pin.id, (f" (deprecated{when})", "yellow"))
    return Text(pin.id)


def iterations_table(root: Path, record: RunRecord) -> Table:
    """Each iteration's success rate and the gates' figures ('-': not measured), as its report.json says now
    (``as_reported``); the targets are ``targets_line``'s, what each iteration missed and its tryout go beneath
    (``iteration_notes``). Where the window is narrow: "iter", and passed/total left to `baton status --json`."""
    reports = read_reports(root, record)
    return fitted(lambda: _iterations_table(record, reports, small=False),
                  lambda: _iterations_table(record, reports, small=True))


def _iterations_table(record: RunRecord, reports: dict[int, ReportFile], small: bool) -> Table:
    table = new_table("iter" if small else "iteration", "success", *(() if small else ("passed",)), "floor",
                      "mutants", "solvable", "coverage", "dups", "findings", keep=1)
    for judged in record.results:
        r = as_reported(judged, reports.get(judged.iteration))
        f = r.figures
        dups = "-" if f.get("duplicates") is None else str(f["duplicates"])
        damaged = judged.iteration in reports and reports[judged.iteration].problem
        table.add_row(str(r.iteration), Text("damaged", style="bold red") if damaged else share(r.success_rate),
                      *(() if small else (f"{r.passed}/{r.total}",)),
                      share(f.get("floor")), share(f.get("mutation_score")), share(f.get("solvable_share")),
                      share(f.get("coverage")), dups, str(f.get("findings", 0)) if f else "-")
    return fit_first(table, 1)


def as_reported(result: IterationResult, found: ReportFile | None) -> IterationResult:
    """An iteration's record with what its report.json says now: the success rate, and the gates' figures when
    they wrote theirs. A report rewritten after the run judged it is shown, not the run's older copy."""
    if found is None or found.report is None:
        return result
    report = found.report
    update: dict[str, Any] = {"success_rate": report.success_rate, "passed": report.passed, "total": report.total}
    if found.quality is not None:
        update["figures"] = figure_summary(found.quality)
    return result.model_copy(update=update)


def report_notes(name: str, result: IterationResult, found: ReportFile | None) -> list[Text]:
    """What is to know of an iteration's report.json beside its row: damaged, rewritten since the run judged it,
    or judged again after ``baton evaluate``."""
    n, lines = result.iteration, []
    if found is not None and found.problem:
        lines.append(Text(f"{found.damage()}; the figures of its row are the run's record. To go on: "
                          f"{found.remedy(name)}", style="bold red"))
        return lines
    again = result.judged_again
    if again is not None:
        kept = f"; gates' figures from evaluation run {again.quality_run} (kept by --no-gates)" \
            if again.quality_run is not None and again.quality_run != again.run else \
            "; no gates' figures" if again.quality_run is None else ""
        lines.append(Text(f"iteration {n}: judged again after `baton evaluate` (evaluation run {again.run}, "
                          f"{again.at}){kept}"))
    report = found.report if found is not None else None
    if report is not None and ((report.success_rate, report.passed, report.total)
                               != (result.success_rate, result.passed, result.total)
                               or (again is not None and report.run != again.run)):
        lines.append(Text(f"iteration {n}: report.json (evaluation run {report.run}) is newer than the run's "
                          f"judgement ({result.success_rate:.0%} in run.json, {report.success_rate:.0%} in the "
                          f"report): `baton evaluate {name} --iteration {n}` judges it again", style="yellow"))
    return lines


def damaged_reports(root: Path, record: RunRecord | None) -> list[int]:
    """The iterations whose report.json is damaged."""
    return [n for n, found in read_reports(root, record).items() if found.problem]


def iteration_notes(root: Path, record: RunRecord) -> list[Text]:
    """Under the iterations table: what each iteration missed, gates that did not run, tryouts, the reports."""
    lines: list[Text] = []
    reports = read_reports(root, record)
    stopped: dict[str, dict[str, list[int]]] = {}  # why -> gate -> iterations: each reason said once, beneath
    for r in record.results:
        lines += report_notes(root.name, r, reports.get(r.iteration))
        skipped = r.figures.get("skipped") or {}
        if r.unmet:
            missed = "; ".join(without_reasons(u, skipped) for u in r.unmet)
            lines.append(Text(f"iteration {r.iteration} missed: {missed}", style="yellow"))
        for gate, why in skipped.items():
            stopped.setdefault(why, {}).setdefault(gate, []).append(r.iteration)
        if r.figures.get("solver"):
            lines.append(Text(f"iteration {r.iteration} solver: {r.figures['solver']}"))
        if r.figures.get("defects"):  # what the findings name (docs/proving.md's vocabulary)
            lines.append(Text(f"iteration {r.iteration} findings: {defects_note(r.figures['defects'])[2:-1]}"))
        if tryout := read_tryout(root, r.iteration):
            lines.append(Text(f"iteration {r.iteration} tryout (baton try): {tryout.summary()}"))
    lines += [Text(gates_stopped(gates, why), style="yellow") for why, gates in stopped.items()]
    found = [f.path for f in reports.values() if f.state == "ok"]
    if found:
        lines.append(Text(f"reports: {', '.join(map(str, found))}", style="dim"))
    return lines


def gates_stopped(gates: dict[str, list[int]], why: str) -> str:
    """Gates that did not run for one reason, in one line: "the floor and solver gates did not run in iterations
    1 and 2: <why>", or each gate with its iterations when they differ."""
    def listed(words: list[str]) -> str:
        return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"

    def iterations(numbers: list[int]) -> str:
        return f"iteration{'s' if len(numbers) > 1 else ''} {listed([str(n) for n in numbers])}"

    runs = {tuple(numbers) for numbers in gates.values()}
    if len(runs) == 1:
        gate_s = f"gate{'s' if len(gates) > 1 else ''}"
        which = f"the {listed(list(gates))} {gate_s} did not run in {iterations(list(next(iter(runs))))}"
    else:
        which = "gates that did not run: " + "; ".join(f"the {gate} gate in {iterations(ns)}"
                                                       for gate, ns in gates.items())
    return f"{which}: {why}{RUNNABLE.replace(' it ', ' them ' if len(gates) > 1 else ' it ')}"


def layers_table(role: str, assembled: Any, config: Any, last: AgentView | None = None) -> Table:
    """``baton context``: the next request of an agent, by layer."""
    table = new_table("layer", "tokens", title=f"{role}: the next request")
    for layer, tokens in assembled.layers.items():
        table.add_row(layer, f"{tokens:,}")
    table.add_row(Text("raw total (cl100k count)", style="bold"), f"{assembled.raw_tokens:,}")
    table.add_row(Text("estimated input of the next call (calibrated)", style="bold"), f"{assembled.estimated_input:,}")
    if last is not None and last.timeline:
        point = last.timeline[-1]
        table.add_row(f"last step ({point.step}): estimated, as in status", f"{point.estimated:,}")
        if point.measured is not None:
            source = "simulated usage" if last.model == SIMULATED else "API usage"
            table.add_row(f"last step ({point.step}): measured ({source})", f"{point.measured:,}")
    table.add_row("threshold / window", f"{config.context.threshold:,} / {config.context.window:,}")
    table.add_row("steps compressed / verbatim / trimmed",
                  f"{assembled.compressed_steps} / {assembled.verbatim_steps} / {assembled.trimmed_steps}")
    return table


# ---- a run in progress, and its end ----------------------------------------------------------


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
        self.proved: set[int] = set()  # iterations whose gates' figures were shown
        self.repeats: dict[tuple[str, str, str], Repeated] = {}  # (role, kind, shape): a note said once
        self.reasons: set[str] = set()  # why gates did not run, said once in the run
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
        for (role, kind, _), note in self.repeats.items():
            if note.count > 1:
                where = note.where()
                say(Text(f"{role}: that {kind} came {note.count} times in all{' (' + where + ')' if where else ''}; "
                         "said once above", style="yellow" if kind == "warning" else "red"))

    def baseline(self, snap: Snapshot) -> None:
        """Mark what is already on disk as seen: a resumed run reports only what it adds."""
        self.results = len(snap.record.results) if snap.record else 0
        self.proved = {r.iteration for r in snap.record.results if r.figures} if snap.record else set()
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
            for result in record.results:
                if result.figures and result.iteration not in self.proved:
                    self.proved.add(result.iteration)
                    skipped = result.figures.get("skipped") or {}
                    said = {gate: why for gate, why in skipped.items() if why in self.reasons}  # said before
                    self.reasons |= set(skipped.values())
                    verdict = "every target met" if not result.unmet else "missed: " + missed_once(result.unmet, said)
                    say(Text(f"» iteration {result.iteration} gates: {figures_line(result.figures)}; {verdict}"))
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
                if kind == "compaction":
                    say(event_line(view.role, kind, entry))
                    continue
                (note,) = grouped([entry])  # a warning or error of a shape already said is counted, not said again
                said = self.repeats.setdefault((view.role, kind, shape(entry)), Repeated(entry, []))
                said.places += note.places
                if said.count == 1:
                    say(event_line(view.role, kind, entry))
            self.seen[key] = len(entries)


def missed_once(unmet: list[str], said: dict[str, str]) -> str:
    """The targets an iteration missed, without the reasons already said in the run (``said``: gate -> why)."""
    shortened = [(u, without_reasons(u, said)) for u in unmet]
    return "; ".join(short + (" (as above)" if short != u else "") for u, short in shortened)


def summary(root: Path) -> None:
    """After a run (or the part of it this command ran): where it stands, its iterations and agents."""
    snap = Snapshot.read(root)
    record = snap.record
    out.print(Text.assemble(("\nsummary ", "bold"), (root.name, "bold"), f": {where(record)}",
                            ("   SIMULATED" if snap.simulated else "", "bold reverse magenta")))
    if record is not None and record.results:
        say(Text(targets_line(record)))
        out.print(iterations_table(root, record))
        for line in iteration_notes(root, record):
            say(line)
    out.print(agents_table(snap))
    if record is not None and record.last_error:
        say(Text.assemble(("last error: ", "bold red"), record.last_error))
    say(Text(f"scenario folder: {root}  (design/, handoffs/, execution_outputs/, state/)"))

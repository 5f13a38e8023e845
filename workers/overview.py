"""``baton status`` without a name: one row per scenario, fitted to the terminal's width.

The scenario, its phase, iteration and status are what a user looks for: they are never cut.
The other columns are left out, right to left, when the window is too narrow for them, and the
notes (an error can be a paragraph) go on a line of their own under the table when they do not
fit in it. A row stays one line, so a piped overview can be grepped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from context.text import clip
from scenarios.run import RunRecord, load_run
from scenarios.store import Layout, StoreError
from workers.confinement import unconfined
from workers.inert import InertTable
from workers.readmodel import Snapshot, ping_workers, read_activity, scenario_roots, toml_problem
from workers.render import ago, damaged_reports, gauge, moving, out, rates, say

ESSENTIAL = ("scenario", "phase", "iter", "status")
OPTIONAL = ("success rates", "init context", "execute context", "compactions init/execute")  # kept in this order
NOTES = "notes"


def status_overview(folder: Path) -> None:
    roots = scenario_roots(folder)
    if not roots:
        say(Text(f"no scenarios in {folder}; create one with `baton new NAME`"))
        return
    workers: list[str] | None = None
    asked = False
    rows: list[list[Any]] = []
    for root in roots:
        if not asked and moving(safe_record(root)):
            workers, asked = ping_workers()[0], True  # one ping answers for every row
        rows.append(status_row(root, workers))
    print_fitted(rows, out.width)


def print_fitted(rows: list[list[Any]], width: int) -> None:
    """The table with the columns that fit in ``width``; the notes beneath it when they do not."""
    headers = (*ESSENTIAL, *OPTIONAL, NOTES)
    natural = [max(cell_width(h), *(cell_width(row[i]) for row in rows)) for i, h in enumerate(headers)]
    kept = list(range(len(ESSENTIAL)))
    if table_width(natural[:len(ESSENTIAL)]) > width:
        print_lines(rows)
        return
    for index in range(len(ESSENTIAL), len(ESSENTIAL) + len(OPTIONAL)):
        if table_width([natural[i] for i in [*kept, index]]) <= width:
            kept.append(index)
    notes = len(headers) - 1
    inline = not any(row[notes] for row in rows) or table_width([natural[i] for i in [*kept, notes]]) <= width
    if inline:
        kept.append(notes)
    table = InertTable()  # plain strings, never markup: scenario names and notes may be model-written
    for index in kept:  # never wrapped, never shrunk below their content: the widths were chosen to fit
        table.add_column(headers[index], no_wrap=True, min_width=natural[index])
    for row in rows:
        table.add_row(*(row[i] for i in kept))
    out.print(table)
    if not inline:
        for row in rows:
            if row[notes]:
                say(Text.assemble((row[0], "bold"), ": ", row[notes]))
    left_out = [headers[i] for i in range(len(ESSENTIAL), len(ESSENTIAL) + len(OPTIONAL)) if i not in kept]
    if left_out:
        say(Text(f"({', '.join(left_out)}: not shown at {width} columns; `baton status NAME` shows them)",
                 style="dim"))


def print_lines(rows: list[list[Any]]) -> None:
    """Too narrow for a table even of the essentials (a long name): one line per scenario, wrapped as text."""
    for name, phase, iteration, status, *_, notes in rows:
        say(Text.assemble((name, "bold"), f": {phase}, iteration {iteration}, ", status, "; " if notes else "", notes))


def cell_width(cell: Any) -> int:
    return (cell if isinstance(cell, Text) else Text(str(cell))).cell_len


def table_width(widths: list[int]) -> int:
    """What rich's default box needs: one space either side of each cell and a rule between columns."""
    return sum(w + 3 for w in widths) + 1


def safe_record(root: Path) -> RunRecord | None:
    try:
        return load_run(root)
    except StoreError:  # status_row reports it
        return None


def status_row(root: Path, workers: list[str] | None = None) -> list[Any]:
    try:
        snap = Snapshot.read(root)
    except StoreError:  # one broken folder must not hide the others
        note = Text(f"run.json is corrupted: `baton status {root.name}` says how to fix it", style="red")
        return [root.name, "?", "?", Text("unreadable", style="red"), "-", "-", "-", "-", note]
    record, agents = snap.record, snap.agents
    notes = [record.last_error] if record is not None and record.last_error else []
    if record is not None and record.status == "error":
        notes.append(f"nothing runs it: fix the cause, then `baton resume {root.name}`")
    notes += [f"iteration {n}'s report.json is damaged" for n in damaged_reports(root, record)]
    notes += [f"{len(a.problems)} torn/bad log line(s) ({a.role})" for a in agents.values() if a.problems]
    notes += [f"{len(a.warnings)} warning(s) ({a.role})" for a in agents.values() if a.warnings]
    if problem := toml_problem(root):  # this row only: every other scenario is listed as usual
        reason = problem.replace(f"{Layout(root).toml}: ", "").replace(str(Layout(root).toml), "it").splitlines()[0]
        notes.append(f"invalid scenario.toml: {clip(reason, 40, '…')}")
    notes += unconfined(root)
    if moving(record):
        activity = read_activity(snap, workers)
        since = activity.seconds_since_last_step
        notes.insert(0, f"last step {ago(since)}" if since is not None else "no step yet")
        if not activity.alive:
            notes.insert(1, "nothing alive runs it")
    if snap.simulated:
        notes.insert(0, "SIMULATED")
    return [
        root.name, record.phase if record else "not started", str(record.iteration) if record else "-",
        record.status if record else "-", rates(record), gauge(agents["init"], True), gauge(agents["execute"], True),
        " / ".join(str(len(a.compactions)) for a in agents.values()), "; ".join(notes),
    ]

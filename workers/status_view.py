"""``baton status NAME``: one scenario in detail (its iterations, agents, spend, notes), and the table of what
its run spent. Each table takes the widest of its forms that fits the window whole (``render.fitted``): columns
are shortened or dropped, never a number cut."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from workers.confinement import unconfined
from workers.readmodel import Snapshot, read_activity, toml_problem
from workers.render import (
    activity_line,
    agents_table,
    damaged_reports,
    event_line,
    fit_first,
    fitted,
    iteration_notes,
    iterations_table,
    kilo,
    moving,
    new_table,
    out,
    rates,
    say,
    simulated_banner,
    targets_line,
    where,
)
from workers.repeats import grouped, said_once
from workers.spend import RunSpend, Spend, read_spend


def status_report(root: Path) -> None:
    """``baton status NAME``: one scenario in detail, its agents' errors, warnings and log problems included."""
    name = root.name
    snap = Snapshot.read(root, detailed=True)
    record = snap.record
    if snap.simulated:
        out.print(simulated_banner())
    head = Text.assemble((name, "bold"), f": {where(record)}")
    for n in damaged_reports(root, record):
        head.append(f"; iteration {n}'s report.json is damaged", style="bold red")
    out.print(head)
    if record is not None:
        say(Text(f"success rates: {rates(record)}, auto-approve {'on' if record.auto_approve else 'off'}, "
                 f"updated {record.updated_at}"))
        say(Text(targets_line(record)))
        if record.last_error:
            say(Text.assemble(("last error: ", "bold red"), record.last_error))
        if record.status == "error":
            say(Text(f"nothing runs it: fix the cause, then `baton resume {name}`"))
        if moving(record):
            say(activity_line(read_activity(snap), name))
        if record.results:
            out.print(iterations_table(root, record))
            for line in iteration_notes(root, record):
                say(line)
    out.print(agents_table(snap, detailed=True))
    spend = read_spend(root)
    if spend.total.tokens.output:
        table = spend_table(spend)
        out.print(table)
        for note in [gates_spend_note(spend), *spend_notes(spend, table)]:
            if note is not None:
                say(note)
    problem = toml_problem(root)
    if problem:
        say(Text.assemble(("scenario.toml: ", "bold red"), problem))
    for note in unconfined(root):
        say(Text(note, style="bold red"))
    for view in snap.agents.values():
        if thinking := view.thinking.line():
            say(Text(f"{view.role} {thinking}"))
        if context := view.context.line():
            say(Text(f"{view.role} {context}"))
    for view in snap.agents.values():
        for kind, entries in (("error", view.errors), ("warning", view.warnings), ("log problem", view.problems)):
            for note in grouped(entries):  # a note that came again and again is said once, with its count
                say(event_line(view.role, kind, said_once(note)))
    if record is not None and record.phase == "awaiting_approval":
        say(Text(f"next: `baton approve {name}` or `baton reject {name} --feedback '...'`"))


def spend_table(spend: RunSpend) -> Table:
    """Tokens by kind and their cost: per agent, its iterations and its compactions; then the proving gates'
    models, per iteration (issue 31: shown as the agents are). The cache writes are split by lifetime, since a
    1-hour write costs 2x input and a 5-minute one 1.25x. The widest form that fits: with the model column
    (the agents' table and the gates' note name the models too), without it, then tokens in k and M under short
    headers, then without the saving (said beneath instead)."""
    return fitted(lambda: _spend_table(spend, small=False, model=True),
                  lambda: _spend_table(spend, small=False, model=False),
                  lambda: _spend_table(spend, small=True, model=False),
                  lambda: _spend_table(spend, small=True, model=False, saved=False))


def _spend_table(spend: RunSpend, small: bool, model: bool, saved: bool = True) -> Table:
    number = _tokens_short if small else (lambda n: f"{n:,}")
    headers = ("input", "w 5m", "w 1h", "read", "out", "cost") if small else \
        ("input", "cache write 5m", "cache write 1h", "cache read", "output", "cost")
    saving = ("saved" if small else "saved by cache",) if saved else ()
    title = "what the run spent" + (" (w 5m/1h: cache writes by lifetime, read: cache reads)" if small else "")
    table = new_table("agent", *(("model",) if model else ()), *headers, *saving, keep=1, title=title,
                      title_justify="left")

    def add(label: str, name: str, part: Spend, **style: Any) -> None:
        t = part.tokens
        table.add_row(label, *((name,) if model else ()), number(t.input), number(t.cache_write),
                      number(t.cache_write_1h), number(t.cache_read), number(t.output), dollars(part.cost_usd),
                      *((dollars(part.saved_by_cache_usd),) if saved else ()), **style)

    for agent in spend.agents.values():
        add(agent.role, agent.model or "simulated", agent.total)
        for n, part in agent.by_iteration.items():
            add(f"  iteration {n}", "", part)
        add(f"  {len(agent.per_compaction)} compaction(s)", "", agent.compactions)
    for gate in spend.proving.values():
        add(gate.label, "simulated" if gate.simulated else gate.model.split("/", 1)[-1], gate.total)
        for n, part in gate.by_iteration.items():
            add(f"  iteration {n}", "", part)
    add("total", "", spend.total, style="bold")
    return fit_first(table, 1)


def dollars(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def _tokens_short(tokens: int) -> str:
    """At most five characters up to a billion tokens (12.0k, 674k, 96.3M, 123M): seven columns fit 80."""
    if tokens < 1_000_000:
        return kilo(tokens) if tokens else "0"
    return f"{tokens / 1_000_000:.1f}M" if tokens < 100_000_000 else f"{tokens // 1_000_000}M"


def gates_spend_note(spend: RunSpend) -> Text | None:
    """The proving gates' models by name, with their requests (the table has room for the id alone)."""
    if not spend.proving:
        return None
    said = [f"{g.label} {g.model}{' (SIMULATED)' if g.simulated else ''}: {g.requests:,} requests"
            for g in spend.proving.values()]
    return Text("proving gates' models: " + "; ".join(said))


def spend_notes(spend: RunSpend, table: Table) -> list[Text]:
    """Beneath the table: why a cost is missing, when it is (the simulated model is not billed; a model has no
    price on file), and the saving when the table had no room for it."""
    notes = []
    unpriced = [a for a in spend.agents.values() if not a.priced and a.total.tokens.output]
    unpriced_gates = [g for g in spend.proving.values() if not g.priced and g.total.tokens.output]
    simulated = [a.role for a in unpriced if a.simulated] + [g.label for g in unpriced_gates if g.simulated]
    unknown = sorted({a.model or f"{a.role}'s model (none pinned in run.json)" for a in unpriced if not a.simulated}
                     | {g.model.split("/", 1)[-1] for g in unpriced_gates if not g.simulated})
    if simulated and spend.total.cost_usd is None and not unknown:
        notes.append(Text("the simulated model is not billed: tokens are shown, costs are not"))
    elif simulated:
        notes.append(Text(f"the simulated model is not billed ({', '.join(simulated)}): those rows show tokens and "
                          "no cost, and cost the total nothing"))
    if unknown:
        notes.append(Text(f"no price on file for {', '.join(unknown)}: add [prices.<model id>] (input, output, "
                          "cache_write, cache_read in $/MTok; cache_write_1h too, else 2x input) to scenario.toml",
                          style="yellow"))
    if not any(str(column.header).startswith("saved") for column in table.columns) and \
            spend.total.saved_by_cache_usd is not None:
        notes.append(Text(f"saved by the cache in all: {dollars(spend.total.saved_by_cache_usd)}"))
    return notes



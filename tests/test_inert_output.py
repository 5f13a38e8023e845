"""Model-written text shown in a terminal is inert (issue 39, item 6).

A checker's reason holding ``ESC ] 52`` (a clipboard write), ``ESC [ 2 J`` (clear screen) or Rich markup reached
the terminal raw in `baton evaluate`'s output. Now every character a terminal acts on is shown as its escape and
markup is printed as written, by the commands themselves (real processes)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.text import Text

from tests.test_hostile_folder import baton
from workers.inert import InertConsole, InertTable, inert, inert_markup

CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"
CLEAR = "\x1b[2J\x1b[H"
MARKUP = "[link=http://e.x]d[/link]"
HOSTILE = f"{MARKUP}{CLIPBOARD}{CLEAR}\r\u202eevil [bold red]PASSED[/bold red]"


def test_inert_shows_every_active_character():
    shown = inert(HOSTILE)
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown and "\u202e" not in shown
    assert "\\x1b]52;c;" in shown and "\\x1b[2J" in shown and "\\x0d" in shown and "\\u202e" in shown
    assert inert("line one\n\tline two") == "line one\n\tline two"
    assert "\\[link=" in inert_markup(MARKUP)


def test_the_console_and_tables_print_it_inert_and_keep_their_own_styles():
    buffer = io.StringIO()
    console = InertConsole(file=buffer, force_terminal=True, width=300, highlight=False)
    console.print(Text(HOSTILE, style="bold"))
    table = InertTable("reason")
    table.add_row(HOSTILE)
    console.print(table)
    printed = buffer.getvalue()
    assert "\x1b]" not in printed and "\x1b[2J" not in printed  # no escape of the text's own
    assert "\x1b[1m" in printed  # the style Rich adds still works
    assert MARKUP in printed  # markup printed as written, no hyperlink made


def test_evaluate_prints_a_hostile_checker_reason_inert(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path / "scenarios")
    checker = root / "execution_outputs" / "iteration_2" / "checkers" / "check_hostile.py"
    checker.write_text(f"def check_hostile(sample, outcome):\n    return {{'passed': False, 'reason': {HOSTILE!r}}}\n")
    done = baton(root, "evaluate", "refund_desk", "--iteration", "2", "--no-gates")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "\\x1b]52;c;" in done.stdout, done.stdout  # the reason is there, shown
    for raw in ("\x1b", "\x07", "\u202e", "\r"):
        assert raw not in done.stdout + done.stderr, repr(raw)
    assert MARKUP in done.stdout, done.stdout[:3000]  # as written: no hyperlink made


def test_status_prints_a_hostile_last_error_inert(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path / "scenarios")
    record = json.loads((root / "run.json").read_text())
    record["last_error"] = f"tool said: {HOSTILE}"
    Path(root / "run.json").write_text(json.dumps(record))
    for args in (("status", "refund_desk"), ("status",)):
        done = baton(root, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        for raw in ("\x1b", "\u202e"):
            assert raw not in done.stdout + done.stderr, (args, repr(raw))
    assert "\\x1b]52;c;" in baton(root, "status", "refund_desk").stdout

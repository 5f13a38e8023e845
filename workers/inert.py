"""Model-written text made inert before it reaches a terminal (issue 39, item 6).

A checker's reason, a finding, a sample id, a last error quoting a tool: any of it may hold what a terminal
obeys. ``ESC ] 52 ; c ; ...`` writes the clipboard, ``ESC [ 2 J`` clears the screen, a carriage return or a
right-to-left override rewrites what the line seems to say, and Rich markup (``[link=...]``, ``[on red]``) in a
string Rich parses becomes a hyperlink or a style. So every Console of the CLI is an ``InertConsole``: each
character of text it prints that a terminal would act on is shown as its escape instead (ESC as ``\\x1b``, a
right-to-left override as ``\\u202e``), while the styles and cursor moves Rich itself adds pass as they are.
Tables built here take a plain string as text, never as markup (``InertTable``); ``inert`` and ``inert_markup``
do the same for a string printed any other way. Newlines and tabs stay: they only lay text out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

# C0 controls but tab and newline, DEL, C1 controls (a lone 0x9b is CSI on some terminals), and the marks that
# reorder or hide text: bidirectional overrides, isolates and embeddings, zero-width joiners aside.
_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """``text`` with every character a terminal would act on shown as its escape (``ESC`` -> ``\\x1b``)."""
    return _ACTIVE.sub(_shown, text)


def inert_markup(text: str) -> str:
    """``inert(text)`` that Rich's markup parser also prints as it is (``[red]`` stays ``[red]``)."""
    return escape(inert(text))


class InertConsole(Console):
    """A Console that prints the text of every renderable inert; Rich's own control segments (a live
    display's cursor moves) and the escapes of its styles are left as they are."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        # Rich's one place where segments become the characters written (stable since rich 10).
        return super()._render_buffer(
            segment if segment.control or not segment.text else Segment(inert(segment.text), segment.style)
            for segment in buffer
        )


class InertTable(Table):
    """A Table that takes a plain string cell as text, never as markup."""

    def add_row(self, *renderables: Any, **options: Any) -> None:
        super().add_row(*(Text(inert(cell)) if isinstance(cell, str) else cell for cell in renderables), **options)

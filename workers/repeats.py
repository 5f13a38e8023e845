"""The same note said once: entries that differ only in their numbers ("step 14: after compaction 7 the context
is still ~11230 tokens..." and "step 15: after compaction 8 ... ~11493 tokens...") are one note said with how many
times and where, so a condition that lasts does not flood ``status`` or a run's output (issue 38)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
STEP = re.compile(r"^step (\S+): ")  # how an agent's warnings and errors begin (readmodel.read_agent)
LISTED = 6  # places named in full; more are shortened to the first and the last


def shape(entry: str) -> str:
    """What makes two entries the same note: their words, whatever their numbers."""
    return NUMBER.sub("#", entry)


@dataclass
class Repeated:
    """One note and every place it was said: ``last`` is the latest entry, whole (its numbers are the newest)."""

    last: str
    places: list[str] = field(default_factory=list)  # "14", "15"... the steps, when the entries name one

    @property
    def count(self) -> int:
        return len(self.places)

    def where(self) -> str:
        """The steps it was said at, the first and last few when they are many."""
        steps = [p for p in self.places if p]
        if not steps:
            return ""
        shown = steps if len(steps) <= LISTED else [*steps[:3], "…", *steps[-2:]]
        return f"step{'s' if len(steps) > 1 else ''} {', '.join(shown)}"


def grouped(entries: list[str]) -> list[Repeated]:
    """``entries`` with those of one shape together, in the order each shape first came."""
    found: dict[str, Repeated] = {}
    for entry in entries:
        step = STEP.match(entry)
        note = found.setdefault(shape(entry), Repeated(entry))
        note.last = entry
        note.places.append(step.group(1) if step else "")
    return list(found.values())


def said_once(note: Repeated) -> str:
    """A note as status says it: the latest entry, then how many times in all and where."""
    if note.count == 1:
        return note.last
    where = note.where()
    return f"{note.last} ({note.count} times in all{', at ' + where if where else ''})"

"""The scenario folder's shape (docs/architecture.md): its layout, names, the JSON and JSONL formats.

Everything an agent produces or remembers lives in the folder, so a run can be inspected
and resumed from disk alone. Nothing here opens a file: every read and write goes through
``scenarios.folder`` (the one way in, ``scenarios.confined`` beneath it), whose two write
primitives are:

- an atomic write: temp file beside the target, fsync, rename, fsync the folder;
  a reader sees the old file or the new one, never half of either;
- an fsynced append of one JSON object a line. A crash can leave a torn last line;
  ``parse_jsonl`` reports it and ignores it.

Both take the writer's ``Lease`` (``scenarios.lease``, ``landing``) when the write belongs
to an agent's step: the rename or the append then lands only while that lease is still the
current one.
"""

from __future__ import annotations

import json
import re
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scenarios.lease import Lease

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
AGENTS = ("init", "execute")


class StoreError(ValueError):
    """A problem with the scenario folder; the message says what to do."""


def check_name(name: str) -> str:
    """Scenario names become folder names and Celery arguments: safe characters only."""
    if not isinstance(name, str) or not SAFE_NAME.match(name) or ".." in name:
        raise StoreError(
            f"invalid scenario name {name!r}: use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit (no '/', no '..')"
        )
    return name


# ---- writes --------------------------------------------------------------------


def landing(lease: Lease | None, path: Path) -> AbstractContextManager[None]:
    """Where a write lands: under ``lease`` when there is one (LeaseLost if it was taken over)."""
    return lease.held(path) if lease is not None else nullcontext()


def json_text(value: Any) -> str:
    """The one JSON layout of baton's files: indented, keys sorted, a final newline."""
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True) + "\n"


# How deep a JSON document baton reads may nest: baton's own records need a handful of levels, a sample's data a
# dozen. Python's parser stops near a thousand with RecursionError (a 200,000-deep sample once ended `baton
# evaluate`), and what walks the parsed value afterwards (redaction, pydantic, json.dumps) recurses too.
MAX_JSON_DEPTH = 100
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def load_json(text: str | bytes) -> Any:
    """``json.loads`` with a bound on nesting: a JSONDecodeError (a ValueError) naming the bound beyond it."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:  # else it cannot nest that deep: nothing to scan
        depth = 0
        for char in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
            depth += 1 if char in "[{" else -1
            if depth > MAX_JSON_DEPTH:
                raise json.JSONDecodeError(f"nested deeper than {MAX_JSON_DEPTH} levels (the bound on JSON "
                                           "nesting)", text, 0)
    return json.loads(text)


# ---- reads ---------------------------------------------------------------------


@dataclass
class JsonlRead:
    records: list[Any] = field(default_factory=list)
    # Lines that did not parse: (line number, first characters). A torn *last* line
    # is the expected result of a crash mid-append; others mean the file was edited.
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    torn_tail: bool = False

    @property
    def problems(self) -> list[str]:
        return [f"line {n}: not valid JSON ({text!r}); ignored" for n, text in self.bad_lines]


def parse_jsonl(raw: bytes) -> JsonlRead:
    """The records of a ``.jsonl`` file's bytes; unparsable lines are reported, a torn last line flagged."""
    out = JsonlRead()
    lines = raw.split(b"\n")
    ends_clean = raw.endswith(b"\n") or not raw
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.records.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError):
            out.bad_lines.append((number, line[:60].decode("utf-8", "replace")))
            if number == len(lines) and not ends_clean:
                out.torn_tail = True
    return out


# ---- layout --------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Paths of one scenario folder (docs/architecture.md, "The scenario folder")."""

    root: Path

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def toml(self) -> Path:
        return self.root / "scenario.toml"

    @property
    def brief(self) -> Path:
        return self.root / "brief.md"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def design(self) -> Path:
        return self.root / "design"

    def handoffs(self, iteration: int) -> Path:
        return self.root / "handoffs" / f"iteration_{iteration}"

    def outputs(self, iteration: int) -> Path:
        return self.root / "execution_outputs" / f"iteration_{iteration}"

    def state(self, agent: str) -> Path:
        if agent not in AGENTS:
            raise StoreError(f"unknown agent {agent!r}; expected one of {AGENTS}")
        return self.root / "state" / agent

    def log(self, agent: str) -> Path:
        return self.state(agent) / "log.jsonl"

    def events(self, agent: str) -> Path:
        return self.state(agent) / "events.jsonl"

    def tool_results(self, agent: str) -> Path:
        return self.state(agent) / "tool_results"

    def lease(self, agent: str) -> Path:
        return self.state(agent) / "lease.json"

    def journal(self, agent: str, tool_use_id: str) -> Path:
        """The undo log of one tool call while it runs (``scenarios.journal``)."""
        return self.state(agent) / "journal" / tool_use_id

    @property
    def run_lease(self) -> Path:
        """The lease of whoever moves the run on (run.json, approvals): a phase task, a command, a failed step."""
        return self.root / "state" / "phase.lease.json"


def checked_relative(relative: str) -> str:
    """A model-given path, stripped, or StoreError if it is empty, absolute, holds '..' or a NUL byte."""
    text = str(relative).strip()
    if not text:
        raise StoreError("empty path; give a path relative to the scenario folder")
    if "\x00" in text:
        raise StoreError("path contains a NUL byte")
    if text.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", text):
        raise StoreError(f"{text!r} is absolute; give a path relative to the scenario folder")
    if ".." in re.split(r"[\\/]", text):
        raise StoreError(f"{text!r} contains '..'; paths must stay inside the scenario folder")
    return text


def relative(root: Path, path: Path) -> str:
    """``path`` as the agents see it: relative to the scenario folder, '/' separated."""
    rel = Path(path).resolve().relative_to(Path(root).resolve())
    return rel.as_posix() or "."

"""``run.json``: the single record of a scenario run's phase, iteration and status."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from scenarios.confined import Missing, Refused
from scenarios.folder import EVERY, Folder
from scenarios.lease import Lease
from scenarios.store import Layout, StoreError

RUN_JSON_BYTES = 4 * 1024 * 1024  # a run record is a few kilobytes; more is not one

# proving: the gates (proving.evaluation.gates) run on the iteration Execute handed off, and decide "done".
Phase = Literal["designing", "awaiting_approval", "executing", "proving", "done"]
Status = Literal["running", "waiting", "succeeded", "failed_target", "error"]


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Judged(BaseModel):
    """An iteration judged again on the report ``baton evaluate`` wrote over the one the run decided on."""

    run: int  # the evaluation run (report.json's ``run``) judged
    at: str
    quality_run: int | None = None  # the evaluation run the gates' figures were measured on; None: no figures


class IterationResult(BaseModel):
    iteration: int
    success_rate: float
    passed: int
    total: int
    # What the gates measured (workers.targets.figure_summary: floor, mutation, solvable, coverage, duplicates,
    # findings), and the targets the iteration missed, each said in words. Absent in run.json written before them.
    figures: dict[str, Any] = Field(default_factory=dict)
    unmet: list[str] = Field(default_factory=list)
    judged_again: Judged | None = None  # None: as the run itself judged it


class RunRecord(BaseModel):
    """Where a run stands. Written atomically after every phase transition."""

    scenario: str
    phase: Phase = "designing"
    iteration: int = Field(1, ge=1)
    status: Status = "running"
    auto_approve: bool = False
    profile: str | None = None  # the settings profile the run started with (e.g. "demo"); every task uses it
    max_iterations: int = Field(3, ge=1)
    target_success_rate: float = Field(0.85, ge=0, le=1)
    # The gates' targets (scenario.toml; defaults for a run.json written before them): every floor agent's pass
    # share at most target_floor, the blind solver's solvable share and the rules' coverage at least theirs.
    target_floor: float = Field(0.0, ge=0, le=1)
    target_solvable_share: float = Field(1.0, ge=0, le=1)
    target_coverage: float = Field(1.0, ge=0, le=1)
    results: list[IterationResult] = Field(default_factory=list)
    feedback: str | None = None  # the last rejection, carried into Init's next opening
    # Each agent's model on the real API, resolved from its line once and kept for the run
    # (agents.catalogue.PinnedModel, by role); empty offline.
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    last_error: str | None = None
    started_at: str = Field(default_factory=now)
    updated_at: str = Field(default_factory=now)

    @property
    def finished(self) -> bool:
        return self.phase == "done" or self.status == "error"


def load_run(root: Path) -> RunRecord | None:
    """The run record, ``None`` if the scenario was never run, StoreError if it is unreadable."""
    path = Layout(Path(root)).run_json
    try:
        raw = Folder(Path(root)).read_bytes(path, RUN_JSON_BYTES)  # bad bytes are a corrupted file too
        return RunRecord.model_validate(json.loads(raw))
    except Missing:
        return None
    except (Refused, json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
        raise StoreError(
            f"{path} is corrupted ({_problems(exc)}). Nothing was changed and the agents' logs and outputs are "
            f"intact; `baton resume {Path(root).name} --rebuild` rebuilds it from them (the broken file is kept "
            "beside it), or fix or restore it by hand"
        ) from None


def _problems(exc: Exception) -> str:
    """Every missing or wrong field (pydantic stops at none), or where the JSON breaks."""
    if not isinstance(exc, ValidationError):
        return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg'].lower()}"
                     + (f" (got {e['input']!r})" if e["type"] != "missing" else "") for e in exc.errors())


RUN_OUTPUTS = ("run.json", "design", "handoffs", "execution_outputs", "state")
STATE_LOCK = ".lock"  # state/.lock: the scenario lock (workers.scenario_lock), never archived with a run


def copy_scenario(source: Path, target: Path) -> Path:
    """A fresh copy of a scenario folder: its definition, none of its run outputs, named after its new
    folder (scenario.toml's ``name`` is the folder's: a run refuses any other)."""
    Folder(Path(source)).copy_tree("", Path(target), skip=lambda name: name in (*RUN_OUTPUTS, "runs", "__pycache__"))
    copy = Folder(Path(target))
    if copy.is_file("scenario.toml"):
        copy.write_atomic("scenario.toml", renamed_toml(copy.read_text("scenario.toml"), Path(target).name))
    return target


def renamed_toml(text: str, name: str) -> str:
    """scenario.toml with its top-level ``name`` set to ``name``: a line edit, so comments and layout stay."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.lstrip().startswith("["):
            break  # a table begins: a ``name`` below it is not the scenario's
        if re.match(r"\s*name\s*=", line):
            lines[i] = f"name = {json.dumps(name)}\n"
            return "".join(lines)
    return f"name = {json.dumps(name)}\n" + text  # no name yet: a top-level key goes before any table


# The example scenarios ship inside this package (pyproject.toml package-data), so an installed
# baton finds them whatever the current folder; in a checkout this is ./scenarios itself.
EXAMPLES_DIR = Path(__file__).resolve().parent


def shipped_example(name: str) -> Path | None:
    """The folder of an example scenario that ships with baton (``refund_desk``), or None. An example is one the
    simulated model has a script for (``_simulations/<name>.py``): in a checkout this folder also holds the user's
    own scenarios (``baton new mine --from refund_desk``), which have a scenario.toml too and are no example."""
    folder = EXAMPLES_DIR / name
    if name.startswith(("_", ".")) or not (EXAMPLES_DIR / "_simulations" / f"{name}.py").is_file():
        return None
    return folder if (folder / "scenario.toml").is_file() else None


def example_copied(root: Path) -> str | None:
    """The shipped example whose brief.md this scenario's is (whitespace aside), when the scenario is a copy
    under another name (``baton new NAME --from EXAMPLE``); None for the example itself or any other brief."""
    root = Path(root)
    try:
        brief = " ".join(Folder(root).read_text("brief.md").split())
    except (OSError, StoreError):
        return None
    for folder in sorted(EXAMPLES_DIR.iterdir()):
        source = shipped_example(folder.name)
        if source is not None and folder.name != root.name and (source / "brief.md").is_file() and \
                " ".join((source / "brief.md").read_text(encoding="utf-8").split()) == brief:
            return folder.name
    return None


def add_shipped_example(scenarios_dir: Path, name: str) -> Path | None:
    """Copy the shipped example ``name`` into ``scenarios_dir`` when that folder lacks it, so
    ``baton run refund_desk`` works from any folder. Returns the new folder, or None when
    nothing was copied (the scenario exists already, or no example has that name)."""
    target = Path(scenarios_dir) / name
    source = shipped_example(name)
    if source is None or target.exists() or target.resolve() == source:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    return copy_scenario(source, target)


def archive_run(root: Path) -> Path | None:
    """Move a finished run's outputs to ``runs/<started_at>/`` so a new run starts clean
    and nothing of the old one is lost. Returns the archive folder."""
    root = Path(root)
    folder = Folder(root)
    # A link in the folder's place is archived as a link (a rename moves the link, never its target).
    present = [name for name in RUN_OUTPUTS if folder.exists(name) and not _only_the_lock(folder, name)]
    if not present:
        return None
    record = load_run(root)
    stamp = (record.started_at if record else now()).replace(":", "").replace("+0000", "Z")
    target = root / "runs" / stamp
    n = 1
    while target.exists():
        n += 1
        target = root / "runs" / f"{stamp}-{n}"
    target.mkdir(parents=True)
    for name in present:
        if name == "state" and folder.exists(f"{name}/{STATE_LOCK}"):
            # The scenario lock stays where its holder (the command archiving this) and others look for it.
            (target / name).mkdir()
            for child in folder.names(name, kinds=EVERY):
                if child != STATE_LOCK:
                    (root / name / child).rename(target / name / child)
        else:
            (root / name).rename(target / name)
    return target


def _only_the_lock(folder: Folder, name: str) -> bool:
    """state/ holding nothing but the scenario lock (or nothing at all): no run to archive."""
    return folder.is_dir(name) and set(folder.names(name, kinds=EVERY)) <= {STATE_LOCK}


def claim_run(root: Path) -> Lease:
    """Become the one writer of run.json (``scenarios.lease``): claim first, then read what to change."""
    return Lease.claim(Layout(Path(root)).run_lease)


def save_run(root: Path, record: RunRecord, lease: Lease | None = None) -> RunRecord:
    """Write ``record`` as run.json; with ``lease``, only while it is current (LeaseLost otherwise)."""
    record = record.model_copy(update={"updated_at": now()})
    Folder(Path(root)).write_json(Layout(Path(root)).run_json, record.model_dump(mode="json"), lease)
    return record

"""An iteration's report.json as every reader takes it: missing, damaged (and why), or a report with the gates'
``quality`` when they ran. ``status``, ``export`` and ``evaluate`` read it here, so a torn or hand-broken file is
called damaged by all three, in the same words, and none of them takes it for "not evaluated" or for a pass."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proving.evaluation.models import Report
from proving.evaluation.quality import Quality
from scenarios.confined import Missing
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import Layout, StoreError

PROBLEM_CHARS = 200  # of a parser's message: where the JSON breaks, the first wrong field


KEPT = "kept_quality"  # the gates' figures of an earlier evaluation run, kept by `baton evaluate --no-gates`
KEPT_RUN = "kept_quality_run"  # which evaluation run measured them


@dataclass(frozen=True)
class ReportFile:
    """``report`` and ``quality`` when the file reads; ``problem`` says why it does not (None: missing or fine).

    ``quality`` is the gates' figures: those measured on this evaluation run (report.json's ``quality``, what the
    proving phase decides on), else those an evaluation re-run without the gates kept from an earlier run
    (``kept_quality``: the loop never takes them for this run's); ``quality_run`` says which run measured them."""

    iteration: int
    path: Path
    report: Report | None = None
    quality: Quality | None = None
    quality_run: int | None = None
    raw: dict[str, Any] | None = None
    problem: str | None = None

    @property
    def state(self) -> str:
        return "damaged" if self.problem else "missing" if self.report is None else "ok"

    def damage(self) -> str:
        """The sentence every command says of a damaged report: what is wrong, and how to go on."""
        return f"iteration {self.iteration}'s report.json is damaged ({self.problem}): {self.path}"

    def remedy(self, name: str) -> str:
        """How to go on from a damaged report, the same for every command: keep it aside, evaluate afresh."""
        kept = shlex.quote(str(self.path) + ".damaged")
        return (f"keep it aside and evaluate the iteration afresh (its evaluation-run count starts again at 1): "
                f"mv {shlex.quote(str(self.path))} {kept} && baton evaluate {shlex.quote(name)} "
                f"--iteration {self.iteration}")

    def as_json(self) -> dict[str, Any]:
        return {"state": self.state, "problem": self.problem, "path": str(self.path),
                "run": self.report.run if self.report else None,
                "success_rate": self.report.success_rate if self.report else None,
                "quality_run": self.quality_run}


def read_report(root: Path, iteration: int) -> ReportFile:
    """``execution_outputs/iteration_<n>/report.json`` of the scenario at ``root``, through its Folder."""
    path = Layout(Path(root)).outputs(iteration) / "report.json"
    try:
        data = Folder(Path(root)).read_bytes(path, RECORD_BYTES)
    except Missing:
        return ReportFile(iteration, path)
    except (StoreError, OSError) as exc:  # a link, a FIFO, a folder or an oversized file in its place
        return ReportFile(iteration, path, problem=_first_line(exc))
    try:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            return ReportFile(iteration, path, problem=f"a JSON {type(raw).__name__}, not an object")
        report = Report.model_validate(raw)
        if "quality" in raw:
            quality, quality_run = Quality.model_validate(raw["quality"]), report.run
        elif KEPT in raw:
            quality, quality_run = Quality.model_validate(raw[KEPT]), _run_number(raw.get(KEPT_RUN))
        else:
            quality, quality_run = None, None
    except (ValueError, ValidationError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return ReportFile(iteration, path, problem=_first_line(exc))
    return ReportFile(iteration, path, report, quality, quality_run, raw)


def _run_number(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"{KEPT_RUN} is {value!r}, not an evaluation run number")


def _first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the file"
        more = f" and {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
        return f"{where}: {first['msg'].lower()}{more}"
    return ((str(exc).splitlines() or [type(exc).__name__])[0])[:PROBLEM_CHARS]


def raw_report(root: Path, iteration: int) -> dict[str, Any]:
    path = Layout(root).outputs(iteration) / "report.json"
    report = Folder(root).read_json(path, f"iteration {iteration}'s evaluation report", RECORD_BYTES)
    if not isinstance(report, dict):
        raise StoreError(f"{path} is not a JSON object; re-run the evaluation, then `baton resume`")
    return report

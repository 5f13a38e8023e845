"""``baton try NAME``: a model under test on the exported scenario, through Inspect AI.

It exports the iteration into ``execution_outputs/iteration_<n>/inspect_task/``, runs Inspect on it in
a process of its own (proving/export/inspect_child.py; its log moved, redacted, into ``inspect_logs/`` beside
the export, for ``inspect view``)
and writes ``tryout.json``: per sample the trials, the passes, the pass rate and
pass^k, the chance that k trials in a row all pass (estimated from n trials with c
passes as C(c, k) / C(n, k), as tau-bench does); overall, their means. This is how a
user learns whether the scenario is hard enough for the model it is meant to test.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections import defaultdict
from datetime import datetime, timezone
from math import comb
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from proving.export.build import ExportError, choose_iteration, export_inspect
from proving.export.facts import ScenarioFacts
from proving.export.runtime.users import SIMULATOR
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import Layout, StoreError

MOCK_MODEL = "mockllm/model"
MOCK_NOTE = ("no model under test was named and no ANTHROPIC_API_KEY is set, so this tried Inspect's "
             f"{MOCK_MODEL}, which answers with a fixed text and calls no tool: only samples whose right outcome "
             "is to change nothing can pass. Name a model with --model provider/model (and its key) for a real tryout")
EXPLANATION_CHARS = 600
NO_INSPECT = "Inspect AI is not installed: it comes with baton (pip install baton; in a checkout: pip install -e .)"


class TryoutError(ExportError):
    """The tryout cannot run; the message says why and what to do."""


class SampleTryout(BaseModel):
    id: str
    rules: list[str] = Field(default_factory=list)
    trials: int  # the trials the agent is judged on: those the user simulator spoiled are not among them
    passes: int
    pass_rate: float  # 0.0 when no trial could be judged
    pass_hat: dict[str, float]  # "k" -> pass^k, for k = 1..trials
    failures: list[str] = Field(default_factory=list)  # the scorer's explanations of failed trials
    # Conversational samples (docs/conversations.md): why each spoiled trial was the user simulator's fault.
    simulator_faults: list[str] = Field(default_factory=list)


class Tryout(BaseModel):
    scenario: str
    iteration: int
    model: str
    mock: bool
    note: str | None = None
    epochs: int
    pass_rate: float
    pass_hat: dict[str, float]
    samples: list[SampleTryout]
    log: str
    task: str
    duration_s: float
    generated_at: str
    # Where the tool calls and the judge ran (the scores' metadata): name, confined, note. None before it was kept.
    sandbox: dict[str, Any] | None = None
    user: str | None = None  # who played the user of conversational samples (-T user=); None when none was asked
    simulator_faults: int = 0  # trials the user simulator spoiled, counted apart from the agent's

    def summary(self) -> str:
        hats = ", ".join(f"pass^{k} {v:.2f}" for k, v in self.pass_hat.items())
        mock = " (mock)" if self.mock else simulated(self.model)
        where = ""
        if self.sandbox and self.sandbox.get("confined") is False:
            where = f"; tool calls ran UNCONFINED ({self.sandbox.get('name')}: no sandbox could be had)"
        spoiled = (f"; {self.simulator_faults} trial(s) spoiled by the user simulator ({self.user}), not counted"
                   if self.simulator_faults else "")
        user = f"; the user: {self.user}{simulated(self.user)}" if self.user else ""
        return (f"{self.model}{mock}: {self.pass_rate:.0%} of {len(self.samples)} samples x {self.epochs} epochs; "
                f"{hats}{user}{where}{spoiled}")


def by_baton(model: str) -> bool:
    """``model`` is baton's simulated model, an Inspect model string of the ``baton`` provider
    (proving/evaluation/blind_model.py)."""
    return model.startswith("baton/")


def simulated(model: str) -> str:
    """The label of baton's simulated model, wherever its figures show."""
    return " (SIMULATED)" if by_baton(model) else ""


def tryout_path(root: Path, iteration: int) -> Path:
    return Layout(root).outputs(iteration) / "tryout.json"


def read_tryout(root: Path, iteration: int) -> Tryout | None:
    """The iteration's last tryout, None when there is none (or it cannot be read)."""
    try:
        # Through the one way in: a FIFO or link a model left as tryout.json once hung `baton status`.
        return Tryout.model_validate_json(Folder(Path(root)).read_bytes(tryout_path(root, iteration), RECORD_BYTES))
    except (OSError, ValueError):  # StoreError is a ValueError
        return None


def pass_hat(trials: int, passes: int, k: int) -> float:
    return comb(passes, k) / comb(trials, k)


def choose_model(model: str | None, environ: dict[str, str] | os._Environ[str] = os.environ) -> tuple[str, str | None]:
    if model:
        return model, None
    if environ.get("ANTHROPIC_API_KEY"):
        raise TryoutError("name the model under test: --model anthropic/<model id> "
                          "(or any provider/model Inspect knows)")
    return MOCK_MODEL, MOCK_NOTE


def run_tryout(root: Path, facts: ScenarioFacts, model: str | None = None, epochs: int = 1,
               iteration: int | None = None, user: str | None = None) -> Tryout:
    """``user``: who plays the user of conversational samples (the task's ``-T user=``: ``scripted``, its
    default, or an Inspect model string)."""
    if importlib.util.find_spec("inspect_ai") is None:
        raise TryoutError(NO_INSPECT)
    if epochs < 1:
        raise TryoutError(f"--epochs must be at least 1, not {epochs}")
    chosen, note = choose_model(model)
    layout = Layout(root)
    picked, _, _ = choose_iteration(layout, facts.target_success_rate, iteration)
    folder = layout.outputs(picked)
    warning = export_inspect(root, folder / "inspect_task", facts, picked).warning
    started = time.monotonic()
    log = eval_export(folder / "inspect_task", chosen, epochs, folder / "inspect_logs",
                      {"user": user} if user else None)
    notes = " ".join(n for n in (warning, note) if n) or None
    tryout = _summarise(root.name, picked, chosen, notes, epochs, log, time.monotonic() - started,
                        folder / "inspect_task" / "task.py")
    Folder(Path(root)).write_json(tryout_path(root, picked), tryout.model_dump(mode="json"))
    return tryout


def eval_export(task_dir: Path, model: Any, epochs: int, log_dir: Path, task_args: dict[str, Any] | None = None) -> Any:
    """Run an exported task with Inspect (``task_args``: its -T parameters) in Inspect's own process
    (proving/export/inspect_child.py); the summary of its EvalLog, whose log is moved into ``log_dir`` redacted
    (TryoutError if Inspect could not run it, or the log cannot go there)."""
    if importlib.util.find_spec("inspect_ai") is None:
        raise TryoutError(NO_INSPECT)
    from proving.export.inspect_child import ChildError, Prerequisite, run_eval

    try:
        log = run_eval(task_dir, model, epochs, log_dir, task_args)
    except Prerequisite as exc:  # e.g. anthropic/... without ANTHROPIC_API_KEY: the user can fix it
        missing = plain(str(exc))
        if missing.startswith(SIMULATOR):  # the model playing a conversation's user, not the one under test
            raise TryoutError(f"Inspect cannot use {missing}. Set what it names, or leave out the user setting "
                              "to use the scripted user") from None
        raise TryoutError(f"Inspect cannot use the model {model}: {missing}. Set what it names, or leave "
                          f"out --model to try Inspect's offline mock ({MOCK_MODEL})") from None
    except ChildError as exc:
        raise TryoutError(str(exc)) from None
    except StoreError as exc:  # a link (or a file) where the log folder should be: nothing written through it
        raise TryoutError(f"Inspect's log cannot be kept in {log_dir}: {exc}") from None
    if log.status != "success" or not log.samples:
        error = log.error.message if log.error else f"status {log.status}"
        raise TryoutError(f"Inspect could not run the task with {model}: {error} (log: {log.location})")
    return log


def plain(markup: str) -> str:
    """Inspect's prerequisite messages are Rich markup meant for its own console: the text alone, on one line."""
    from rich.text import Text

    lines = [line.strip() for line in Text.from_markup(markup).plain.removeprefix("ERROR:").splitlines()]
    return ": ".join(line for line in lines if line).rstrip(".")


def _summarise(name: str, iteration: int, model: str, note: str | None, epochs: int, log: Any,
               duration_s: float, task_file: Path) -> Tryout:
    by_sample: dict[str, list[Any]] = defaultdict(list)
    rules: dict[str, list[str]] = {}
    where: list[dict[str, Any]] = []
    users: set[str] = set()
    for sample in log.samples:
        score = next(iter(sample.scores.values()), None) if sample.scores else None
        by_sample[str(sample.id)].append(score)
        rules[str(sample.id)] = list((sample.metadata or {}).get("rules", []))
        said = (sample.metadata or {}).get("sandbox")
        if isinstance(said, dict):
            where.append(said)
        if (sample.metadata or {}).get("user_simulator"):
            users.add(str(sample.metadata["user_simulator"]))
    samples = [_sample(sid, rules[sid], scores) for sid, scores in by_sample.items()]
    judged = [s for s in samples if s.trials] or samples  # a sample whose every trial was spoiled says nothing
    hats = {str(k): _mean([s.pass_hat[str(k)] for s in judged if str(k) in s.pass_hat]) for k in range(1, epochs + 1)}
    return Tryout(
        scenario=name, iteration=iteration, model=model, mock=model.startswith("mockllm/"), note=note,
        epochs=epochs, pass_rate=_mean([s.pass_rate for s in judged]), pass_hat=hats,
        samples=samples, log=str(log.location), task=str(task_file),
        duration_s=round(duration_s, 3), generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        # An unconfined sample, if any, is the one to report: it is what the user must hear about.
        sandbox=next((w for w in where if w.get("confined") is not True), where[0] if where else None),
        user=", ".join(sorted(users)) or None, simulator_faults=sum(len(s.simulator_faults) for s in samples),
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _sample(sample_id: str, rules: list[str], scores: list[Any]) -> SampleTryout:
    """A sample's trials; those the user simulator spoiled (the score's ``simulator_fault``) are set apart, so that
    pass rate and pass^k are the agent's."""
    spoiled = [str(s.metadata["simulator_fault"]) for s in scores
               if s is not None and (s.metadata or {}).get("simulator_fault")]
    scores = [s for s in scores if s is None or not (s.metadata or {}).get("simulator_fault")]
    trials = len(scores)
    passed = [s is not None and s.value == 1.0 for s in scores]
    failures = [(s.explanation or "")[:EXPLANATION_CHARS] if s is not None else "the sample ended with an error"
                for s, ok in zip(scores, passed) if not ok]
    return SampleTryout(id=sample_id, rules=rules, trials=trials, passes=sum(passed),
                        pass_rate=sum(passed) / trials if trials else 0.0,
                        pass_hat={str(k): pass_hat(trials, sum(passed), k) for k in range(1, trials + 1)},
                        failures=failures, simulator_faults=[f[:EXPLANATION_CHARS] for f in spoiled])

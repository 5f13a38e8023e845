"""The gates that prove a scenario, run in turn on one iteration (docs/proving.md): small strategies
registered by name, each given the same ``GateContext`` and returning figures and findings.

A gate that cannot run (no Inspect for the ones that run the exported task, no solver model configured)
says why in ``Quality.skipped`` rather than failing the run: what it would have measured is then missing
from the figures, and the targets that need it say so. A gate that crashes is a bug of baton's, reported
the same way, never a finding against the scenario.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from proving.evaluation import coverage as coverage_module
from proving.evaluation.quality import Figures, Finding, GateName, Quality
from proving.evaluation.samples import load_samples
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import Layout

log = logging.getLogger(__name__)


class ProvingSettings(BaseModel):
    """How the gates run, as a person configured them (scenario.toml ``[proving]``; read by agents/)."""

    gates: list[GateName] = Field(default_factory=lambda: ["coverage", "duplicate", "gold", "policy", "floor",
                                                           "mutation", "solver"])
    solver_model: str | None = None  # any Inspect model string; None: the simulated model where it has a script
    solver_k: int = Field(3, ge=1)  # tries per sample: pass^k
    panel: list[str] = Field(default_factory=list)  # models for the difficulty figures (empty: none)
    max_mutants_per_sample: int = Field(8, ge=1)
    # Who plays the user of conversational samples (docs/conversations.md), in the solver gate, `baton try` and
    # the exported task's default: "scripted" (deterministic, offline) or any Inspect model string.
    user_simulator: str = Field("scripted", min_length=1, pattern=r"\S")
    # Samples per shard of the gates that split by sample (floor, mutation): each shard is a task any worker can
    # run (workers/gate_tasks.py), so more workers prove an iteration sooner.
    shard_samples: int = Field(10, ge=1)


@dataclass
class GateContext:
    """What every gate is given: the iteration's folder read once, through the one way in."""

    root: Path
    iteration: int
    settings: ProvingSettings
    samples: list[dict[str, Any]]
    business_rules: str
    work: dict[str, Any] = field(default_factory=dict)  # what one gate builds and another reuses (the export)
    shard: str = ""  # which shard this is, in the names of its logs ("" when the gate runs whole)
    on_sample: Callable[[], None] | None = None  # told after each sample a gate has done (progress)

    def sample_done(self) -> None:
        if self.on_sample is not None:
            self.on_sample()

    @property
    def out_dir(self) -> Path:
        return Layout(self.root).outputs(self.iteration)

    @classmethod
    def load(cls, root: Path, iteration: int, settings: ProvingSettings) -> GateContext:
        folder = Folder(Path(root))
        layout = Layout(Path(root))
        samples = [f.raw for f in load_samples(Path(root), layout.outputs(iteration) / "samples") if f.raw]
        rules = folder.read_text_or(layout.design / "business_rules.md", "", RECORD_BYTES)
        return cls(Path(root), iteration, settings, samples, rules)


@dataclass
class GateResult:
    figures: dict[str, Any] = field(default_factory=dict)  # fields of ``Figures`` this gate fills
    findings: list[Finding] = field(default_factory=list)


class Keyed(BaseModel):
    """A finding with its place in the gate's whole list (merged shards keep the order a whole run gives)."""

    key: list[int]
    finding: Finding


class Part(BaseModel):
    """What a gate found on some of the samples (a shard): counts the whole's figures are computed from, or, for
    a gate that does not split, its figures as they are."""

    counts: dict[str, int] = Field(default_factory=dict)
    figures: dict[str, Any] = Field(default_factory=dict)
    findings: list[Keyed] = Field(default_factory=list)

    def ordered(self) -> list[Finding]:
        return [k.finding for k in sorted(self.findings, key=lambda k: k.key)]


def ordered(parts: list[Part]) -> list[Finding]:
    """Every part's findings, in the order of their keys."""
    return Part(findings=[k for p in parts for k in p.findings]).ordered()


class Unavailable(RuntimeError):
    """A gate cannot run here (what it needs is missing); the message says what."""


class Gate(Protocol):
    name: GateName
    splits: bool  # whether it runs by shard of samples (``part`` on some, ``merge`` of the parts)

    def run(self, ctx: GateContext) -> GateResult: ...

    def part(self, ctx: GateContext, samples: list[dict[str, Any]]) -> Part: ...

    def merge(self, ctx: GateContext, parts: list[Part]) -> GateResult: ...


GATES: dict[str, Gate] = {}


def register(gate: Gate) -> Gate:
    """Add a gate to the registry, by its name (a later registration of a name replaces the earlier)."""
    GATES[gate.name] = gate
    return gate


@dataclass(frozen=True)
class FunctionGate:
    """A gate that runs whole: its one part is its result."""

    name: GateName
    body: Callable[[GateContext], GateResult]
    splits: bool = False

    def run(self, ctx: GateContext) -> GateResult:
        return self.body(ctx)

    def part(self, ctx: GateContext, samples: list[dict[str, Any]]) -> Part:
        result = self.body(ctx)
        return Part(figures=result.figures, findings=[Keyed(key=[i], finding=f) for i, f in enumerate(result.findings)])

    def merge(self, ctx: GateContext, parts: list[Part]) -> GateResult:
        return GateResult(dict(parts[0].figures) if parts else {}, ordered(parts))


@dataclass(frozen=True)
class SplitGate:
    """A gate that runs by shard of samples: ``part_of`` on each shard, ``merge_of`` the parts into the figures
    and findings a whole run gives (figures from counts, findings in the whole's order)."""

    name: GateName
    part_of: Callable[[GateContext, list[dict[str, Any]]], Part]
    merge_of: Callable[[GateContext, list[Part]], GateResult]
    splits: bool = True

    def run(self, ctx: GateContext) -> GateResult:
        return self.merge_of(ctx, [self.part_of(ctx, ctx.samples)])

    def part(self, ctx: GateContext, samples: list[dict[str, Any]]) -> Part:
        return self.part_of(ctx, samples)

    def merge(self, ctx: GateContext, parts: list[Part]) -> GateResult:
        return self.merge_of(ctx, parts)


def _coverage(ctx: GateContext) -> GateResult:
    share, rules, findings = coverage_module.coverage(ctx.business_rules, ctx.samples)
    return GateResult({"coverage": share, "rules": rules}, findings)


def _duplicates(ctx: GateContext) -> GateResult:
    findings = coverage_module.duplicates(ctx.samples)
    return GateResult({"duplicates": len(findings)}, findings)


register(FunctionGate("coverage", _coverage))
register(FunctionGate("duplicate", _duplicates))


Progress = Callable[[str, int, int], None]  # (gate, samples done, samples in all)


def prove(root: Path, iteration: int, settings: ProvingSettings | None = None,
          on_progress: Progress | None = None) -> Quality:
    """Run every configured gate on ``execution_outputs/iteration_<n>``, each whole, in this process; the quality
    that report.json carries. (The loop runs them as tasks by shard: proving/evaluation/gate_shards.py.)
    ``on_progress`` is told each sample a gate has done, and each gate's end."""
    settings = settings or ProvingSettings()
    load_gates()
    ctx = GateContext.load(root, iteration, settings)
    total = len(ctx.samples)

    def run(gate: Gate) -> GateResult:
        done = [0]

        def sample_done() -> None:
            done[0] += 1
            if on_progress is not None:
                on_progress(gate.name, done[0], total)

        ctx.on_sample = sample_done
        try:
            return gate.run(ctx)
        finally:
            ctx.on_sample = None
            if on_progress is not None:
                on_progress(gate.name, total, total)

    return assemble(settings, {name: attempt(name, run) for name in settings.gates})


def attempt(name: str, body: Callable[[Gate], Any]) -> Any:
    """``body`` of the gate named ``name``, or why it did not run (a str): not in this baton, unavailable here,
    or failed (a bug of baton's: it must not cost the run its other figures)."""
    gate = GATES.get(name)
    if gate is None:
        return "no such gate in this baton"
    try:
        return body(gate)
    except Unavailable as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a gate's own bug must not cost the run its other figures
        log.exception("gate %s failed", name)
        return f"the gate failed: {type(exc).__name__}: {exc}"


def assemble(settings: ProvingSettings, outcomes: dict[str, GateResult | str]) -> Quality:
    """The quality of each gate's result, or why it did not run, in the configured order."""
    quality = Quality()
    figures: dict[str, Any] = {}
    for name in settings.gates:
        outcome = outcomes[name]
        if isinstance(outcome, str):
            quality.skipped[name] = outcome
            continue
        figures.update(outcome.figures)
        quality.findings.extend(outcome.findings)
        quality.ran.append(GATES[name].name)
    quality.figures = Figures.model_validate(figures)
    return quality


def load_gates() -> None:
    """The gates that run the exported task live in modules of their own (they need Inspect, loaded late);
    importing them registers them."""
    import importlib

    for module in ("proving.evaluation.floors", "proving.evaluation.mutants", "proving.evaluation.solver",
                   "proving.evaluation.gold", "proving.evaluation.policy_gate"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise

_load_gates = load_gates  # the name tests knew it by

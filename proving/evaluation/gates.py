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

    gates: list[GateName] = Field(default_factory=lambda: ["coverage", "duplicate", "floor", "mutation", "solver"])
    solver_model: str | None = None  # any Inspect model string; None: the simulated model where it has a script
    solver_k: int = Field(3, ge=1)  # tries per sample: pass^k
    panel: list[str] = Field(default_factory=list)  # models for the difficulty figures (empty: none)
    max_mutants_per_sample: int = Field(8, ge=1)
    # Who plays the user of conversational samples (docs/conversations.md), in the solver gate, `baton try` and
    # the exported task's default: "scripted" (deterministic, offline) or any Inspect model string.
    user_simulator: str = Field("scripted", min_length=1, pattern=r"\S")


@dataclass
class GateContext:
    """What every gate is given: the iteration's folder read once, through the one way in."""

    root: Path
    iteration: int
    settings: ProvingSettings
    samples: list[dict[str, Any]]
    business_rules: str
    work: dict[str, Any] = field(default_factory=dict)  # what one gate builds and another reuses (the export)

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


class Unavailable(RuntimeError):
    """A gate cannot run here (what it needs is missing); the message says what."""


class Gate(Protocol):
    name: GateName

    def run(self, ctx: GateContext) -> GateResult: ...


GATES: dict[str, Gate] = {}


def register(gate: Gate) -> Gate:
    """Add a gate to the registry, by its name (a later registration of a name replaces the earlier)."""
    GATES[gate.name] = gate
    return gate


@dataclass(frozen=True)
class FunctionGate:
    name: GateName
    body: Callable[[GateContext], GateResult]

    def run(self, ctx: GateContext) -> GateResult:
        return self.body(ctx)


def _coverage(ctx: GateContext) -> GateResult:
    share, rules, findings = coverage_module.coverage(ctx.business_rules, ctx.samples)
    return GateResult({"coverage": share, "rules": rules}, findings)


def _duplicates(ctx: GateContext) -> GateResult:
    findings = coverage_module.duplicates(ctx.samples)
    return GateResult({"duplicates": len(findings)}, findings)


register(FunctionGate("coverage", _coverage))
register(FunctionGate("duplicate", _duplicates))


def prove(root: Path, iteration: int, settings: ProvingSettings | None = None) -> Quality:
    """Run every configured gate on ``execution_outputs/iteration_<n>``; the quality that report.json carries."""
    settings = settings or ProvingSettings()
    _load_gates()
    ctx = GateContext.load(root, iteration, settings)
    quality = Quality()
    figures: dict[str, Any] = {}
    for name in settings.gates:
        gate = GATES.get(name)
        if gate is None:
            quality.skipped[name] = "no such gate in this baton"
            continue
        try:
            result = gate.run(ctx)
        except Unavailable as exc:
            quality.skipped[name] = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - a gate's own bug must not cost the run its other figures
            log.exception("gate %s failed", name)
            quality.skipped[name] = f"the gate failed: {type(exc).__name__}: {exc}"
            continue
        figures.update(result.figures)
        quality.findings.extend(result.findings)
        quality.ran.append(gate.name)
    quality.figures = Figures.model_validate(figures)
    return quality


def _load_gates() -> None:
    """The gates that run the exported task live in modules of their own (they need Inspect, loaded late);
    importing them registers them."""
    import importlib

    for module in ("proving.evaluation.floors", "proving.evaluation.mutants", "proving.evaluation.solver",
                   "proving.evaluation.gold"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise

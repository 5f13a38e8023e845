"""What the gates that prove a scenario report (docs/proving.md): the ``quality`` part of report.json.

Execute's own evaluation shows that the samples agree with Execute's tools and checkers: consistency. The
gates then ask whether the scenario measures an agent. Each gate is small and registered by name; each
returns figures and findings:

- ``floor``: agents that should score 0 (do nothing, refuse everything, act recklessly) do;
- ``mutation``: trajectories one mistake away from a sample's expected one are rejected by the scorer;
- ``solver``: a blind solver, seeing only what the model under test sees, solves each sample within k tries;
- ``coverage``: every business rule is exercised, a refusing rule on both of its sides;
- ``duplicate``: no two samples are the same task up to renaming of ids and amounts;
- ``gold``: the expected actions themselves: none fails, every literal has a source, no two samples with the
  same facts decide differently (gold.py);
- ``policy``: every expected action is one the design's executable policy allows, and the tools refuse what it
  denies (policy_gate.py).

A finding is classed as the evaluation's layers are: L1 when the design must change (a rule no sample can
observe, an ambiguity), L4 when a sample must (a duplicate, an outcome no state records), and named by its
defect (defects.py: one vocabulary, mapped onto the categories benchmark maintainers fix).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from proving.evaluation.defects import BY_GATE, Category, Defect, category

GateName = Literal["floor", "mutation", "solver", "coverage", "duplicate", "gold", "policy"]
GATES: tuple[GateName, ...] = ("floor", "mutation", "solver", "coverage", "duplicate", "gold", "policy")


class Finding(BaseModel):
    """One thing a gate caught, in the shape the handoff carries to Init."""

    model_config = ConfigDict(extra="forbid")
    gate: GateName
    sample: str | None = None
    rule: str | None = None
    class_: Literal["L1", "L4"] = Field(alias="class")
    detail: str
    defect: Defect  # what is wrong, in the one vocabulary (defects.py); ``category`` maps it onto the fix list's
    action: str | None = None  # the expected action it is about, as "<n>: tool(arg=value, ...)" (n from 1)
    evidence: str | None = None  # what shows it: the tool's error, the value and where the data says otherwise

    @model_validator(mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        """A finding of an older report.json has no defect: its gate's (defects.BY_GATE). ``category`` is derived
        from the defect, so a stored one is read past, never trusted."""
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "category"}
            if value.get("defect") is None and value.get("gate") in BY_GATE:
                value["defect"] = BY_GATE[value["gate"]]
        return value

    @computed_field  # type: ignore[prop-decorator]
    @property
    def category(self) -> Category | None:
        """The τ³ fix list's category the defect falls in ("suite": none of them)."""
        return category(self.defect)

    @classmethod
    def of(cls, gate: GateName, layer: Literal["L1", "L4"], detail: str, *, sample: str | None = None,
           rule: str | None = None, defect: Defect | None = None, action: str | None = None,
           evidence: str | None = None) -> Finding:
        """A finding (``class`` is a Python keyword, so the field is filled by its alias here)."""
        return cls.model_validate({"gate": gate, "class": layer, "detail": detail, "sample": sample, "rule": rule,
                                   "defect": defect, "action": action, "evidence": evidence})

    def as_json(self) -> dict[str, object]:
        return self.model_dump(by_alias=True)


class SolverFigures(BaseModel):
    model: str
    simulated: bool = False  # the simulated model played the solver: say so wherever it is shown
    k: int
    pass_hat_k: float  # mean over samples of pass^k
    solvable_share: float  # share of samples solved at least once in k tries
    per_sample: dict[str, float] = Field(default_factory=dict)  # sample -> pass rate


class Figures(BaseModel):
    """The numbers of one iteration's gates; a gate that did not run leaves its figure None."""

    floor: dict[str, float] | None = None  # floor agent -> share of samples it passed (target 0)
    mutation_score: float | None = None  # share of mutants the scorer rejected
    mutants: int | None = None
    solver: SolverFigures | None = None
    coverage: float | None = None  # share of the design's rules some sample exercises
    rules: list[str] = Field(default_factory=list)  # the rule ids the design names
    duplicates: int | None = None  # samples that repeat another up to renaming
    difficulty: dict[str, float] | None = None  # panel model -> pass rate


class Quality(BaseModel):
    """report.json's ``quality``: the figures, the findings, and which gates ran (and why others did not)."""

    figures: Figures = Field(default_factory=Figures)
    findings: list[Finding] = Field(default_factory=list)
    ran: list[GateName] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)  # gate -> why it did not run

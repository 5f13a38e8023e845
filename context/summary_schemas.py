"""The summaries baton's agents return when their context is compacted, one schema per role.

These are the agents' contract with the summary compactor (``context.compaction``):
the compact prompt of each role (``prompts/<role>/compact.md``) asks for these
keys, the compactor validates the model's JSON against the role's schema and,
when the model cannot give one, builds a summary of the same shape from what
baton knows (``fallback``). The compactor never looks at the role: the agent
passes its schema in (``SUMMARY_SCHEMAS[role]``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from context.compaction import FallbackEvidence, SummarySchema


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


def _layer1_problems(report: dict[str, Any]) -> list[str]:
    """The design (L1) problems of a report: an Execute payload lists them, report.json has its failures."""
    if "layer1_problems_summary" in report:
        return [str(p) for p in report["layer1_problems_summary"]][:20]
    failures = report.get("failures") or []
    return [f"{f.get('sample')}: {f.get('reason')}" for f in failures
            if isinstance(f, dict) and f.get("layer") == "L1"][:20]


# ---- init ----------------------------------------------------------------------------


class DesignSummary(_Open):
    unified_scenario_design: str
    business_rules_key_points: list[str]
    format_specifications: str | dict[str, Any]


class FeedbackSummary(_Open):
    execution_output_dir: str | None
    total_failure_samples: int
    layer1_problems_summary: list[str]


class InitSummary(SummarySchema):
    label: ClassVar[str] = "init"
    narrative: ClassVar[tuple[str, ...]] = (*SummarySchema.narrative, "analysis_conclusions")

    current_design_summary: DesignSummary
    execute_feedback_summary: FeedbackSummary
    analysis_conclusions: list[str]
    pending_actions: list[str]
    # The decision points a human reviews at the approval step; optional: a summary without it costs no retry.
    decisions_awaiting_review: list[str | dict[str, Any]] = Field(default_factory=list)
    key_paths: dict[str, Any]

    @classmethod
    def fallback(cls, evidence: FallbackEvidence) -> dict[str, Any]:
        facts, report = evidence.facts, evidence.report
        layer1 = _layer1_problems(report)
        return {
            "current_design_summary": {
                "unified_scenario_design": evidence.last_text,
                "business_rules_key_points": [],
                "format_specifications": "",
            },
            "execute_feedback_summary": {
                "execution_output_dir": facts.execution_output_dir,
                "total_failure_samples": int(report.get("failed", 0) or 0),
                "layer1_problems_summary": layer1,
            },
            "analysis_conclusions": [],
            "pending_actions": evidence.todos,
            # every design problem Execute reported is a decision the revised design takes and a human reviews
            "decisions_awaiting_review": [f"settle in the design (L1): {p}" for p in layer1],
            "key_paths": {**evidence.key_paths, "design_files": facts.design_files or evidence.written},
        }


# ---- execute -------------------------------------------------------------------------


class GeneratedComponents(_Open):
    tools: list[str]
    checkers: list[str]
    samples: int | list[str] | str


class EvaluationProgress(_Open):
    current_iteration: int
    success_rate: float | str | None  # a rate, or as a report says it: "12/15 (80%)"
    layer_status: dict[str, Any] | str


class DecisionBasis(_Open):
    """What Execute's next decision rests on: keep fixing, hand back to Init, or stop."""

    decision: str = "undecided"  # "continue", "return_to_init", "stop" (free text: no retry for a synonym)
    evidence: list[str] = Field(default_factory=list)


class IdentifiedIssues(_Open):
    layer2_problems: list[str]
    layer3_problems: list[str]
    fix_attempts: list[str]


class ExecuteKeyPaths(_Open):
    execution_output_dir: str | None


class ExecuteSummary(SummarySchema):
    label: ClassVar[str] = "execute"
    narrative: ClassVar[tuple[str, ...]] = (*SummarySchema.narrative, "identified_issues.fix_attempts")

    generated_components: GeneratedComponents
    evaluation_progress: EvaluationProgress
    identified_issues: IdentifiedIssues
    pending_work: list[str]
    # Optional, as a string or an object: a summary without it costs no retry.
    decision_basis: DecisionBasis | str = Field(default_factory=DecisionBasis)
    key_paths: ExecuteKeyPaths

    @classmethod
    def fallback(cls, evidence: FallbackEvidence) -> dict[str, Any]:
        facts, report, written, key_paths = evidence.facts, evidence.report, evidence.written, evidence.key_paths
        return {
            "generated_components": {
                "tools": [p for p in written if "/tools/" in p],
                "checkers": [p for p in written if "/checkers/" in p],
                "samples": len([p for p in written if "/samples/" in p]),
            },
            "evaluation_progress": {
                "current_iteration": facts.iteration,
                "success_rate": report.get("success_rate"),
                "layer_status": report.get("failures_per_layer", {}),
            },
            "identified_issues": {"layer2_problems": [], "layer3_problems": [], "fix_attempts": []},
            "pending_work": evidence.todos,
            "decision_basis": _decision_basis(report, facts.target_success_rate),
            "key_paths": {
                **key_paths,
                "execution_output_dir": facts.execution_output_dir or key_paths.get("execution_output_dir"),
            },
        }


def _decision_basis(report: dict[str, Any], target: float | None) -> dict[str, Any]:
    """The decision the latest report supports: fixable failures (L2-L4) left -> continue; only design
    failures (L1) -> return_to_init; none, or the target met -> stop."""
    if not report:
        return {"decision": "undecided", "evidence": ["no evaluation report yet: run RunEvaluation"]}
    layers = report.get("failures_per_layer") or {}
    count = {name: int(layers.get(name, 0) or 0) for name in ("L1", "L2", "L3", "L4")}
    rate = report.get("success_rate")
    evidence = [
        f"latest evaluation: {report.get('passed')}/{report.get('total')} passed, success rate {rate}"
        + (f" (target {target})" if target is not None else ""),
        "failures per layer: " + ", ".join(f"{name}={n}" for name, n in count.items()),
    ]
    met = target is not None and isinstance(rate, (int, float)) and rate >= target
    fixable = count["L2"] + count["L3"] + count["L4"]
    decision = "stop" if met or not any(count.values()) else "continue" if fixable else "return_to_init"
    return {"decision": decision, "evidence": evidence}


#: The schema of each agent role.
SUMMARY_SCHEMAS: dict[str, type[SummarySchema]] = {"init": InitSummary, "execute": ExecuteSummary}

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

from pydantic import BaseModel, ConfigDict

from context.compaction import FallbackEvidence, SummarySchema


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


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

    current_design_summary: DesignSummary
    execute_feedback_summary: FeedbackSummary
    analysis_conclusions: list[str]
    pending_actions: list[str]
    key_paths: dict[str, Any]

    @classmethod
    def fallback(cls, evidence: FallbackEvidence) -> dict[str, Any]:
        facts, report = evidence.facts, evidence.report
        return {
            "current_design_summary": {
                "unified_scenario_design": evidence.last_text,
                "business_rules_key_points": [],
                "format_specifications": "",
            },
            "execute_feedback_summary": {
                "execution_output_dir": facts.execution_output_dir,
                "total_failure_samples": int(report.get("failed", 0) or 0),
                "layer1_problems_summary": list(report.get("layer1_problems_summary", []))[:20],
            },
            "analysis_conclusions": [],
            "pending_actions": evidence.todos,
            "key_paths": {**evidence.key_paths, "design_files": facts.design_files or evidence.written},
        }


# ---- execute -------------------------------------------------------------------------


class GeneratedComponents(_Open):
    tools: list[str]
    checkers: list[str]
    samples: int | list[str] | str


class EvaluationProgress(_Open):
    current_iteration: int
    success_rate: float | None
    layer_status: dict[str, Any] | str


class IdentifiedIssues(_Open):
    layer2_problems: list[str]
    layer3_problems: list[str]
    fix_attempts: list[str]


class ExecuteKeyPaths(_Open):
    execution_output_dir: str | None


class ExecuteSummary(SummarySchema):
    label: ClassVar[str] = "execute"

    generated_components: GeneratedComponents
    evaluation_progress: EvaluationProgress
    identified_issues: IdentifiedIssues
    pending_work: list[str]
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
            "key_paths": {
                **key_paths,
                "execution_output_dir": facts.execution_output_dir or key_paths.get("execution_output_dir"),
            },
        }


#: The schema of each agent role.
SUMMARY_SCHEMAS: dict[str, type[SummarySchema]] = {"init": InitSummary, "execute": ExecuteSummary}

"""The evaluation's shapes at its boundaries: samples as written by Execute, results
and reports as written to disk, and what the child process reports back."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proving.evaluation.user_part import UserPart

Layer = Literal["L1", "L2", "L3", "L4"]
LAYERS: tuple[Layer, ...] = ("L1", "L2", "L3", "L4")


class Action(BaseModel):
    # Unknown keys are refused: {"tool": ..., "arguments": ...} must not silently run with no args.
    model_config = ConfigDict(extra="forbid")
    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class Sample(BaseModel):
    # Refused too: a misspelt "expected_state" would otherwise make a sample pass unchecked.
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=200)
    instruction: str = Field(min_length=1)
    actions: list[Action]
    expected_outputs: list[dict[str, Any] | None] | None = None
    expected_state: dict[str, Any] = Field(default_factory=dict)
    rules: list[str] = Field(default_factory=list)
    description: str | None = None  # free text for people; not used by the harness
    notes: str | None = None
    # A conversational sample (docs/conversations.md): the instruction is then the user's opening message, and
    # the rest of what the user knows and wants is here, told to the user simulator and never to the agent.
    user: UserPart | None = None
    # What the agent must tell the user, each text found in its messages (lower case, commas dropped), as tau2-bench
    # scores communicate_info: the exported task's scorer checks it; a replay of the actions has no messages.
    communicate_info: list[str] = Field(default_factory=list, max_length=20)
    # Statements about a good run, in words (tau2-bench's nl_assertions): kept and shown with the score, not scored.
    nl_assertions: list[str] = Field(default_factory=list, max_length=20)
    # The expected actions leave out lookups an agent makes to learn the ids it passes (tau2-bench's gold lists the
    # calls that matter to the state, not every call): whether the user's words reach the goal is then not
    # checked on them (reachable.py). Set by `baton import`, for such tasks only, and said in its report.
    lookups_omitted: bool = False

    @field_validator("id")
    @classmethod
    def _id_has_text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("id must not be blank")
        return value

    @model_validator(mode="after")
    def _one_expected_output_per_action(self) -> Sample:
        if self.expected_outputs is not None and len(self.expected_outputs) != len(self.actions):
            raise ValueError(
                f"expected_outputs has {len(self.expected_outputs)} entries but there are "
                f"{len(self.actions)} actions; give one per action (null = not checked)"
            )
        return self

    @model_validator(mode="after")
    def _opening_keeps_what_is_withheld(self) -> Sample:
        if self.user is not None:
            said = self.user.said_unasked(self.instruction)
            if said:
                raise ValueError(f"the instruction is the user's opening message, before the agent asked anything, "
                                 f"and it gives away what the user holds back: {said}")
        return self


class SampleResult(BaseModel):
    id: str
    file: str
    passed: bool
    layer: Layer | None
    reason: str
    duration_s: float
    outputs: list[Any] = Field(default_factory=list)


class Failure(BaseModel):
    sample: str
    layer: Layer
    reason: str


class Limits(BaseModel):
    timeout_s: float
    memory_mb: int
    disk_mb: int | None = None  # the size of each sample's folder; None in reports from before it had one


class RunSummary(BaseModel):
    """An earlier evaluation of the same iteration, kept so fixes stay visible."""

    run: int
    total: int
    passed: int
    success_rate: float
    failures_per_layer: dict[Layer, int]
    generated_at: str
    only: list[str] | None = None


class Report(BaseModel):
    iteration: int
    total: int
    passed: int
    failed: int
    success_rate: float
    failures_per_layer: dict[Layer, int]
    failures: list[Failure]
    limits: Limits
    duration_s: float
    generated_at: str
    model_label: str | None = None
    only: list[str] | None = None  # set when a subset of the samples was re-run
    run: int = 1  # the how-many-th evaluation of this iteration
    previous_runs: list[RunSummary] = Field(default_factory=list)
    sandbox: Literal["bwrap", "none"] = "bwrap"  # none: a person ran the samples unconfined (BATON_EVAL_SANDBOX)
    notes: list[str] | None = None  # e.g. the entries of tools/ that were not copied into the samples


class ChildError(BaseModel):
    model_config = ConfigDict(extra="allow")
    phase: str = ""
    kind: str = ""
    message: str = ""


class CheckerVerdict(BaseModel):
    model_config = ConfigDict(extra="allow")
    checker: str
    passed: bool | None = None
    reason: str = ""
    error: str | None = None  # None | "design_issue" | "raised" | "bad_type"


class ChildResult(BaseModel):
    """What child_main.py writes. Parsed defensively: generated code runs in that
    process and could have damaged the file; then the child counts as crashed."""

    model_config = ConfigDict(extra="ignore")
    completed: bool = False
    phase: str = ""
    tools: list[str] = Field(default_factory=list)
    outputs: list[Any] = Field(default_factory=list)
    final_data: Any = None
    error: ChildError | None = None
    checkers: list[CheckerVerdict] = Field(default_factory=list)
    checker_errors: list[dict[str, Any]] = Field(default_factory=list)
    design_issues: list[dict[str, Any]] = Field(default_factory=list)


class ChildProgress(BaseModel):
    model_config = ConfigDict(extra="allow")
    phase: str = "load"
    design_issues: list[dict[str, Any]] = Field(default_factory=list)

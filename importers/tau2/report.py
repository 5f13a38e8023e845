"""The import's report: what was carried from the checkout, what was not and why, task by task. Written as
``design/import_report.md`` (people and Init read it) and ``design/import_report.json``, and printed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

# What tau2-bench has that no import carries, whatever the domain (docs/import.md, "What is not carried over").
NEVER_CARRIED = [
    "tau2's user simulator (a model prompted with the task's user scenario): baton's user part holds the same "
    "instructions, played by baton's scripted user or by any model ([proving] user_simulator, -T user=...)",
    "nl_assertions: kept in each sample and shown by the scorer, not scored (tau2 does not score them by default)",
    "tau2's tool messages: a tool's output is JSON (a model as its fields, anything else under \"result\"), where "
    "tau2 shows the model's string form; an error is the tool's exception message, as in tau2",
    "solo mode, the domain's other task sets (tasks_*.json) and tau2's own runner, metrics and leaderboard files",
]


class SkippedTask(BaseModel):
    task: str
    why: str


class TaskNote(BaseModel):
    sample: str
    notes: list[str]


class ImportReport(BaseModel):
    source: str
    domain: str
    commit: str | None
    scenario: str
    samples: int
    tasks: int
    tools: dict[str, str]  # name -> tau2 tool type
    modules_carried: list[str]
    licence: str | None
    policy_files: list[str]
    rules: int
    database_file: str
    sandbox: str  # where the domain's code ran to replay the tasks
    do_nothing_passes: list[str] = Field(default_factory=list)  # samples tau2's reward gives a run with no action
    failing_gold: list[str] = Field(default_factory=list)  # samples with an expected action tau2's own code refuses
    lookups_omitted: list[str] = Field(default_factory=list)  # samples whose gold leaves out the lookups of an id
    skipped: list[SkippedTask] = Field(default_factory=list)
    task_notes: list[TaskNote] = Field(default_factory=list)
    not_carried: list[str] = Field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"# Import of tau2-bench's {self.domain} domain", "",
                 f"From `{self.source}`{f' at commit {self.commit}' if self.commit else ''}, by `baton import tau2`: "
                 f"{self.samples} samples of {self.tasks} tasks, {len(self.tools)} tools, {self.rules} numbered rules "
                 f"(from {', '.join(self.policy_files)}), the database from {self.database_file}.", "",
                 f"- Carried code (tools/tau2/domains/{self.domain}/): {', '.join(self.modules_carried)}; "
                 f"licence: {self.licence or 'none found in the checkout'}.",
                 f"- The tasks' expected actions were replayed with the domain's own code ({self.sandbox}).",
                 f"- By tau2's own reward a run that does nothing passes {len(self.do_nothing_passes)} of "
                 f"{self.samples} samples (no expected state change and nothing to communicate)"
                 + (f": {', '.join(self.do_nothing_passes)}." if self.do_nothing_passes else "."),
                 f"- {len(self.failing_gold)} samples have an expected action that fails in the domain's own code "
                 f"(named below); {len(self.lookups_omitted)} leave out the lookups that find an id they pass "
                 "(lookups_omitted).", ""]
        lines += ["## Not carried over", ""] + [f"- {item}" for item in self.not_carried]
        if self.skipped:
            lines += ["", f"## Tasks not imported ({len(self.skipped)})", ""]
            lines += [f"- task {s.task}: {s.why}" for s in self.skipped]
        if self.task_notes:
            lines += ["", f"## Samples with notes ({len(self.task_notes)})", ""]
            for note in self.task_notes:
                lines += [f"- {note.sample}: " + " ".join(note.notes)]
        return "\n".join(lines) + "\n"

    def summary(self) -> dict[str, Any]:
        return {"samples": self.samples, "tasks": self.tasks, "skipped": len(self.skipped),
                "with_notes": len(self.task_notes), "do_nothing_passes": len(self.do_nothing_passes),
                "failing_gold": len(self.failing_gold), "lookups_omitted": len(self.lookups_omitted)}

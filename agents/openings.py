"""The opening user message of each turn: what the agent is asked to do now.

Every opening starts with ``Iteration: <n>`` so the agent (and the simulated
model) always knows which iteration the turn belongs to. Payloads are carried
in their tagged form (docs/architecture.md, "The iteration loop").
"""

from __future__ import annotations

from typing import Any

from agents.payloads import ExecuteToInit, InitToExecute, render_payload
from context.redaction import redact


def scenario_line(scenario: str, example: str | None = None) -> str:
    """``Scenario: <name>``, and for an unedited copy of a shipped example which one (``scenarios.run.
    example_copied``): true for any model, and what lets the simulated model behind the API double, which sees
    requests only, play a copy as it plays the example (agents.simulated, ``Conversation.script_name``)."""
    return f"Scenario: {scenario}" + (f" (a copy of the example {example})" if example else "")


def init_opening(
    scenario: str, iteration: int, *, feedback: str | None = None, report: ExecuteToInit | None = None,
    note: str | None = None, example: str | None = None, gates: dict[str, Any] | None = None,
) -> str:
    """Init's opening: the brief (iteration 1), a human's rejection, or Execute's report. ``note``: what
    baton adds at the end (agents.mentions: the files the brief or the feedback mentions). ``gates``: what the
    gates said of the iteration (``quality``: figures, unmet targets; ``findings``, each with its class), merged
    into the execute_to_init payload Init reads."""
    lines = [f"Iteration: {iteration}", scenario_line(scenario, example), ""]
    if feedback is not None:
        lines += [
            "A human reviewed your design and rejected it with this feedback:",
            f"<human_feedback>\n{redact(feedback.strip())}\n</human_feedback>",
            "",
            "Revise the design documents under design/ to address it, "
            f"then call SubmitHandoff again for iteration {iteration}.",
        ]
    elif report is not None and gates:
        unmet = (gates.get("quality") or {}).get("unmet_targets") or []
        missed = f" ({'; '.join(unmet)})" if unmet else ""
        lines += [
            f"Iteration {report.iteration} did not meet every target{missed}. Execute's report, with what baton's "
            "gates found after it (quality: the figures; findings: each with its gate, defect and its category, "
            "sample, action, rule, class and evidence):",
            render_payload(report, gates),
            "",
            ("Fix the design problems (layer 1) it lists and answer every finding: an L1 finding by changing the "
             "design documents, an L4 finding by telling Execute which samples to fix, add or remove (in "
             "changes_since_last_iteration or acceptance_criteria.notes). Then call SubmitHandoff with an "
             f"init_to_execute payload for iteration {iteration}, listing what you changed."),
        ]
    elif report is not None:
        lines += [
            f"Execute finished iteration {report.iteration} below the target success rate. Its report:",
            render_payload(report),
            "",
            (f"Fix the design problems (layer 1) it lists in the design documents, then call SubmitHandoff "
             f"with an init_to_execute payload for iteration {iteration}, listing what you changed."),
        ]
    else:
        lines += [
            "Design the scenario described in brief.md (read scenario.toml for the target success rate).",
            "Write your design documents under design/, "
            f"then call SubmitHandoff with an init_to_execute payload for iteration {iteration}.",
        ]
    if note:
        lines += ["", note]
    return "\n".join(lines)


def execute_opening(payload: InitToExecute, example: str | None = None) -> str:
    n = payload.iteration
    return "\n".join([
        f"Iteration: {n}",
        scenario_line(payload.scenario, example),
        "",
        render_payload(payload),
        "",
        (f"Generate the tools, checkers and samples under execution_outputs/iteration_{n}/, run RunEvaluation, "
         "fix the layer 2-4 failures yourself, re-run, then call SubmitHandoff with an execute_to_init payload."),
    ])

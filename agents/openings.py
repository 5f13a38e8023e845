"""The opening user message of each turn: what the agent is asked to do now.

Every opening starts with ``Iteration: <n>`` so the agent (and the simulated
model) always knows which iteration the turn belongs to. Payloads are carried
in their tagged form (docs/architecture.md, "The iteration loop").
"""

from __future__ import annotations

from agents.payloads import ExecuteToInit, InitToExecute, render_payload
from context.redaction import redact


def scenario_line(scenario: str, example: str | None = None) -> str:
    """``Scenario: <name>``, and for an unedited copy of a shipped example which one (``scenarios.run.
    example_copied``): true for any model, and what lets the simulated model behind the API double, which sees
    requests only, play a copy as it plays the example (agents.simulated, ``Conversation.script_name``)."""
    return f"Scenario: {scenario}" + (f" (a copy of the example {example})" if example else "")


def init_opening(
    scenario: str, iteration: int, *, feedback: str | None = None, report: ExecuteToInit | None = None,
    note: str | None = None, example: str | None = None,
) -> str:
    """Init's opening: the brief (iteration 1), a human's rejection, or Execute's report. ``note``: what
    baton adds at the end (agents.mentions: the files the brief or the feedback mentions)."""
    lines = [f"Iteration: {iteration}", scenario_line(scenario, example), ""]
    if feedback is not None:
        lines += [
            "A human reviewed your design and rejected it with this feedback:",
            f"<human_feedback>\n{redact(feedback.strip())}\n</human_feedback>",
            "",
            "Revise the design documents under design/ to address it, "
            f"then call SubmitHandoff again for iteration {iteration}.",
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

"""What the gates' deterministic agents say besides their calls, and a run judged on it: a sample's
``communicate_info`` (tau2-bench's "the agent told the user ...") is read in those words as the exported task's
scorer reads a model's messages (communicate.py), so a run that changes nothing passes a sample that asks for
words only if its agent said them, as under tau2's own reward."""

from __future__ import annotations

from typing import Any

from proving.evaluation.communicate import explanation, unsaid
from proving.evaluation.exported import RunOutcome
from proving.export.runtime.agents import REFUSAL_TEXT

# runtime/agents.py's closings; do_nothing is Inspect's mockllm/model, whose one answer is this text.
SAYS = {"do_nothing": "Default output from mockllm/model", "refuse_all": REFUSAL_TEXT, "reckless": "Done."}


def words(run: dict[str, Any], sample: dict[str, Any]) -> str:
    """A script replays a sample's expected actions as its author would, so it says what the sample asks to be said:
    a mutant of it is then judged on its state alone."""
    return SAYS.get(str(run.get("agent")), " ".join(["Done.", *(sample.get("communicate_info") or [])]))


def with_words(runs: list[dict[str, Any]], samples: list[dict[str, Any]],
               outcomes: dict[str, RunOutcome]) -> dict[str, RunOutcome]:
    """``outcomes`` with each passing run whose agent left something of its sample's communicate_info unsaid
    failed, saying what."""
    by_id = {str(s["id"]): s for s in samples}
    judged = dict(outcomes)
    for run in runs:
        outcome, sample = judged.get(str(run["id"])), by_id.get(str(run["sample"]))
        if outcome is None or sample is None or not outcome.passed:
            continue
        missing = unsaid(sample.get("communicate_info") or [], [words(run, sample)])
        if missing:
            judged[str(run["id"])] = RunOutcome(False, f"failed: {explanation(missing)}\n{outcome.explanation}",
                                                outcome.calls)
    return judged

"""Summaries that stay bounded (context/summary_cap.py, issue 13.4): 20 consecutive compactions of
one run, with a model whose summary accretes (each one the previous plus the new steps' story),
stay under the cap; key_paths survive every one of them; without the cap the summary grows."""

from __future__ import annotations

import json

import pytest

from context.assembly import Assembler, StaticPrefix
from context.compaction import CircuitBreaker, SummaryReply, SummaryRequest, compact
from context.history import History
from context.messages import Message
from context.policy import Policy
from context.summary_cap import CONDENSE, cap_tokens, condense_note, enforce, summary_tokens
from context.summary_schemas import ExecuteSummary, InitSummary
from tests.logs import NO_SHARED_TRAJECTORIES, TRAJECTORIES, load_trajectories, trajectory_messages
from tests.synthetic_trajectories import write_synthetic

COMPACTIONS = 20


class AccretingModel:
    """A summariser that keeps everything: the previous summary plus a paragraph and a key path per
    compaction. ``obliging``: it condenses when asked (drops the narrative), as the prompt asks."""

    def __init__(self, obliging: bool):
        self.obliging, self.previous, self.n, self.asked = obliging, None, 0, 0

    def __call__(self, request: SummaryRequest, timeout_s: float) -> SummaryReply:
        self.n += 1
        asked = "Write a condensed one this time" in request.prompt
        self.asked += asked
        summary = self.previous or {
            "generated_components": {"tools": ["tools/tools.py"], "checkers": [], "samples": 0},
            "evaluation_progress": {"current_iteration": 1, "success_rate": None, "layer_status": {}},
            "identified_issues": {"layer2_problems": [], "layer3_problems": [], "fix_attempts": []},
            "pending_work": ["write the samples"], "key_paths": {"execution_output_dir": "execution_outputs/it_1"},
        }
        summary = json.loads(json.dumps(summary))
        story = f"compaction {self.n}: tried the parser again, read the logs, " + "looked at every sample; " * 50
        summary["identified_issues"]["fix_attempts"].append(story)
        summary["key_paths"][f"file_{self.n}"] = f"execution_outputs/it_1/tools/part_{self.n}.py"
        if asked and self.obliging:
            summary["identified_issues"]["fix_attempts"] = [story[:80]]
        self.previous = summary
        return SummaryReply(text=f"<compact_summary>{json.dumps(summary)}</compact_summary>")


def compact_repeatedly(messages: list[Message], policy: Policy, model: AccretingModel) -> list:
    """Replay ``messages`` and compact whenever due, until ``COMPACTIONS`` compactions: their events."""
    history = History(redact=False)
    assembler = Assembler(history, policy, agent="execute", static=StaticPrefix(system="You are Execute."))
    events, breaker = [], CircuitBreaker()
    for message in messages:
        if message.role == "assistant" and history.view and not history.pending_tool_ids:
            event = events[-1] if events else None
            if assembler.should_compact(assembler.assemble(event), event):
                events.append(compact(schema=ExecuteSummary, assembler=assembler, previous=event,
                                      prompt="Summarise.", call=model, breaker=breaker))
                if len(events) == COMPACTIONS:
                    break
        history.append(message)
    assert len(events) == COMPACTIONS, f"only {len(events)} compactions: lower the threshold"
    return events


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> list[Message]:
    """The synthetic Claude Code runs back to back: one long session of the recorded format. Made once per
    module: messages are frozen, and each test replays them into its own history."""
    folder = write_synthetic(tmp_path_factory.mktemp("runs"), runs=8, shapes=("claude-code",))
    return [m for run in load_trajectories("claude-code", folder) for m in trajectory_messages(run)]


POLICY = Policy(window=60_000, threshold=12_000, keep_last_steps=3, batch=2, max_tokens=2_000, start_tokens=0)


def check_bounded(events: list, cap: int) -> None:
    sizes = [summary_tokens(e.summary) for e in events]
    assert max(sizes) <= 2 * cap, sizes
    assert {f"file_{n}" for n in range(1, COMPACTIONS + 1)} <= set(events[-1].summary["key_paths"])  # never dropped
    ExecuteSummary.model_validate(events[-1].summary)  # still the schema's shape


@pytest.mark.parametrize("obliging", [True, False], ids=["condenses-when-asked", "ignores-the-ask"])
def test_twenty_compactions_stay_under_the_cap(long_run: list[Message], obliging: bool) -> None:
    model = AccretingModel(obliging)
    events = compact_repeatedly(long_run, POLICY, model)
    cap = cap_tokens(POLICY.summary_cap_share, POLICY.threshold)
    check_bounded(events, cap)
    assert model.asked > 0 and any(e.condensed for e in events)
    if obliging:  # asked and done: the model's own condensed summaries were enough
        assert all(e.condensed in (None, "asked") for e in events)


def test_without_the_cap_the_summary_grows_past_it(long_run: list[Message]) -> None:
    events = compact_repeatedly(long_run, POLICY.model_copy(update={"summary_cap_share": 0.0}),
                                AccretingModel(obliging=True))
    cap = cap_tokens(Policy().summary_cap_share, POLICY.threshold)
    assert summary_tokens(events[-1].summary) > 2 * cap
    assert not any(e.condensed for e in events)


@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason=NO_SHARED_TRAJECTORIES)
def test_twenty_compactions_of_a_recorded_run_stay_under_the_cap() -> None:
    runs = sorted(load_trajectories("claude-code"), key=lambda r: len(r["messages"]), reverse=True)
    messages = [m for run in runs for m in trajectory_messages(run)]  # the longest runs, as one session
    policy = POLICY.model_copy(update={"threshold": 15_000})
    events = compact_repeatedly(messages, policy, AccretingModel(obliging=False))
    check_bounded(events, cap_tokens(policy.summary_cap_share, policy.threshold))


def test_the_ask_names_the_size_and_what_to_keep() -> None:
    small, big = {"key_paths": {}}, {"key_paths": {}, "story": "word " * 3_000}
    assert condense_note(small, 1_000) == "" and condense_note(None, 1_000) == ""
    note = condense_note(big, 1_000)
    assert note == CONDENSE.format(tokens=summary_tokens(big), cap=1_000)
    assert "every entry of key_paths" in note and "decisions awaiting review" in note
    assert condense_note(big, None) == ""  # summary_cap_share = 0


def test_enforcing_empties_the_narrative_first_and_keeps_types_and_key_paths() -> None:
    summary = {
        "current_design_summary": {"unified_scenario_design": "design " * 400, "business_rules_key_points": ["R1"] * 40,
                                   "format_specifications": "spec " * 300},
        "execute_feedback_summary": {"execution_output_dir": None, "total_failure_samples": 2,
                                     "layer1_problems_summary": ["p " * 50] * 30},
        "analysis_conclusions": ["we tried " * 100] * 10, "pending_actions": ["do x"] * 30,
        "key_paths": {f"k{i}": f"design/part_{i}.md" for i in range(30)},
        "last_assistant_text": "talk " * 500,
    }
    out, done = enforce(summary, InitSummary.narrative, 600)
    assert done and summary_tokens(out) <= 1_200
    assert out["key_paths"] == summary["key_paths"]  # untouched, however long
    assert out["analysis_conclusions"] == [] and out["last_assistant_text"] == ""
    InitSummary.model_validate(out)
    assert enforce(summary, InitSummary.narrative, None) == (summary, False)  # no cap: left alone

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from context.assembly import Assembler
from context.compaction import (
    CircuitBreaker,
    KnownFacts,
    SummaryError,
    SummaryReply,
    compact,
    parse_summary,
    summary_request,
)
from context.history import History
from context.messages import ToolUseBlock, Usage, assistant, user
from context.policy import Policy
from context.protocol import validate
from context.summary_schemas import ExecuteSummary, InitSummary
from tests.test_assembly import run_log, step

EXECUTE = {
    "generated_components": {"tools": ["tools/refunds.py"], "checkers": ["checkers/c.py"], "samples": 12},
    "evaluation_progress": {"current_iteration": 1, "success_rate": 0.5, "layer_status": {"L2": 3}},
    "identified_issues": {"layer2_problems": ["x"], "layer3_problems": [], "fix_attempts": []},
    "pending_work": ["rerun"],
    "key_paths": {"execution_output_dir": "execution_outputs/iteration_1"},
}
INIT = {
    "current_design_summary": {
        "unified_scenario_design": "d",
        "business_rules_key_points": ["r"],
        "format_specifications": "f",
    },
    "execute_feedback_summary": {
        "execution_output_dir": None,
        "total_failure_samples": 0,
        "layer1_problems_summary": [],
    },
    "analysis_conclusions": [],
    "pending_actions": [],
    "key_paths": {"design": "design/scenario.md"},
}


def tagged(data) -> str:
    return f"Here it is.\n<compact_summary>{json.dumps(data)}</compact_summary>"


def test_parse_valid_summaries_for_both_roles():
    assert parse_summary(tagged(EXECUTE), ExecuteSummary)["pending_work"] == ["rerun"]
    assert parse_summary(tagged(INIT), InitSummary)["key_paths"]["design"] == "design/scenario.md"


@pytest.mark.parametrize(
    "text, words",
    [
        ("no tag at all", "no <compact_summary>"),
        ("<compact_summary>{not json</compact_summary>", "not valid JSON"),
        ("<compact_summary>[1, 2]</compact_summary>", "JSON object"),
        (tagged({k: v for k, v in EXECUTE.items() if k != "pending_work"}), "pending_work"),
        (
            tagged(
                {**EXECUTE, "evaluation_progress": {"current_iteration": "one", "success_rate": 1, "layer_status": {}}}
            ),
            "current_iteration",
        ),
    ],
)
def test_unusable_summaries_say_what_is_wrong(text, words):
    with pytest.raises(SummaryError, match=words):
        parse_summary(text, ExecuteSummary)


def test_summary_request_appends_prompt_to_the_last_user_message():
    h = run_log(3)
    msgs = summary_request(Assembler(h, Policy()).assemble(), "Summarise now.")
    validate(msgs)
    assert msgs[-1].text.endswith("Summarise now.") and msgs[-1].tool_results


def make(keep=2):
    h = run_log(8)
    return h, Assembler(h, Policy(keep_last_steps=keep), agent="execute")


def test_model_summary_used_and_retry_after_invalid_answer():
    h, asm = make()
    seen = []

    def call(messages, timeout):
        seen.append(messages)
        return SummaryReply(
            text="oops" if len(seen) == 1 else tagged(EXECUTE), usage=Usage(input_tokens=10, output_tokens=5)
        )

    breaker = CircuitBreaker()
    ev = compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="P", call=call, breaker=breaker)
    assert not ev.fallback and ev.summary["pending_work"] == ["rerun"]
    assert len(seen) == 2 and "not usable" in seen[1][-1].text  # the retry carried the error back
    assert ev.usage.output_tokens == 5 and breaker.consecutive_failures == 0
    validate(asm.assemble(ev).messages)


def test_fallback_after_two_invalid_answers_and_on_model_error():
    h, asm = make()
    breaker = CircuitBreaker()
    ev = compact(
        schema=ExecuteSummary,
        assembler=asm,
        previous=None,
        prompt="P",
        call=lambda m, t: SummaryReply(text="bad"),
        breaker=breaker,
        facts=KnownFacts(scenario="refunds", iteration=2, execution_output_dir="execution_outputs/iteration_2"),
    )
    assert ev.fallback and ev.summary["fallback"] is True and "no <compact_summary>" in ev.error
    assert ev.summary["key_paths"]["execution_output_dir"] == "execution_outputs/iteration_2"
    assert ev.summary["scenario"] == "refunds" and ev.summary["evaluation_progress"]["current_iteration"] == 2
    parse_summary(tagged(ev.summary), ExecuteSummary)  # the fallback satisfies the schema too

    def down(m, t):
        raise TimeoutError("no answer in 120 s")

    ev2 = compact(schema=ExecuteSummary, assembler=asm, previous=ev, prompt="P", call=down, breaker=breaker)
    assert ev2.fallback and "TimeoutError" in ev2.error and ev2.id == 2


def test_circuit_breaker_stops_calling_after_three_failures():
    h, asm = make()
    breaker, calls = CircuitBreaker(), []

    def down(m, t):
        calls.append(1)
        raise ConnectionError("overloaded")

    ev = None
    for _ in range(5):
        ev = compact(schema=ExecuteSummary, assembler=asm, previous=ev, prompt="P", call=down, breaker=breaker)
    assert len(calls) == 3 and breaker.open and "off for this session" in breaker.status
    assert ev.fallback and "off for this session" in ev.error


def test_fallback_summary_collects_what_baton_knows():
    h = History(redact=False)
    h.append(user("build it"))
    h.append(
        assistant(
            ToolUseBlock(
                id="w1",
                name="Write",
                input={"file_path": "execution_outputs/iteration_1/tools/refunds.py", "content": "x"},
            )
        )
    )
    h.append(user(step(0)[1].content[0].model_copy(update={"tool_use_id": "w1"})))
    h.append(
        assistant(
            "Wrote the tools.",
            ToolUseBlock(
                id="t1",
                name="TodoWrite",
                input={
                    "todos": [
                        {"content": "write checkers", "status": "pending"},
                        {"content": "tools", "status": "completed"},
                    ]
                },
            ),
        )
    )
    h.append(user(step(0)[1].content[0].model_copy(update={"tool_use_id": "t1"})))
    for i in range(1, 4):
        for m in step(i):
            h.append(m)
    asm = Assembler(h, Policy(keep_last_steps=2), agent="execute")
    ev = compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="P", call=None, breaker=CircuitBreaker())
    s = ev.summary
    assert s["generated_components"]["tools"] == ["execution_outputs/iteration_1/tools/refunds.py"]
    assert s["pending_work"] == ["write checkers"]
    assert s["last_assistant_text"].startswith("step 1") or "Wrote the tools." in s["last_assistant_text"]
    assert any("state/execute/tool_results/w1.txt" in r for r in s["recent_tool_results"])


def test_key_paths_carry_forward_across_compactions():
    h, asm = make()
    first = compact(
        schema=InitSummary,
        assembler=asm,
        previous=None,
        prompt="P",
        call=lambda m, t: SummaryReply(text=tagged(INIT)),
        breaker=CircuitBreaker(),
    )
    later = {**INIT, "key_paths": {"report": "execution_outputs/iteration_1/report.json"}}
    for m in step(50):
        h.append(m)
    second = compact(
        schema=InitSummary,
        assembler=asm,
        previous=first,
        prompt="P",
        call=lambda m, t: SummaryReply(text=tagged(later)),
        breaker=CircuitBreaker(),
    )
    assert second.summary["key_paths"] == {
        "design": "design/scenario.md",
        "report": "execution_outputs/iteration_1/report.json",
    }
    # the second summary request started from the first summary
    assert "<compact_summary>" in asm.assemble(first).messages[1].text


def test_secrets_in_a_summary_are_redacted():
    h, asm = make()
    leaky = {**EXECUTE, "pending_work": ["use key sk-ant-api03-" + "a" * 40]}
    ev = compact(
        schema=ExecuteSummary,
        assembler=asm,
        previous=None,
        prompt="P",
        call=lambda m, t: SummaryReply(text=tagged(leaky)),
        breaker=CircuitBreaker(),
    )
    assert "sk-ant" not in json.dumps(ev.summary) and "<REDACTED>" in ev.summary["pending_work"][0]


def test_event_records_range_tokens_and_duration():
    h, asm = make(keep=3)
    ticks = iter([10.0, 12.5])
    ev = compact(
        schema=ExecuteSummary,
        assembler=asm,
        previous=None,
        prompt="P",
        call=None,
        breaker=CircuitBreaker(),
        clock=lambda: next(ticks),
    )
    assert ev.in_view(h).kept_from == h.steps_in(0)[-3] and ev.in_view(h).kept_until == len(h)
    assert ev.duration_s == 2.5 and ev.tokens_before > ev.tokens_after > 0
    again = type(ev).model_validate_json(ev.model_dump_json())
    assert again == ev


@pytest.mark.parametrize("rate", ["12/15 (80%)", 0.8, 1, None])
def test_execute_success_rate_may_be_written_as_the_design_does(rate):
    progress = {**EXECUTE["evaluation_progress"], "success_rate": rate}
    assert parse_summary(tagged({**EXECUTE, "evaluation_progress": progress}), ExecuteSummary)


def test_the_new_keys_are_optional_and_cost_no_retry():
    h, asm = make()
    calls = []

    def call(messages, timeout):
        calls.append(1)
        return SummaryReply(text=tagged(EXECUTE))  # no decision_basis

    ev = compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="P", call=call, breaker=CircuitBreaker())
    assert len(calls) == 1 and not ev.fallback
    assert parse_summary(tagged(INIT), InitSummary)  # no decisions_awaiting_review
    basis = {"decision": "return_to_init", "evidence": ["success 12/15 (80%), target 0.85", "L1=2 open"]}
    for given in (basis, "return to Init: only L1 problems remain"):
        assert parse_summary(tagged({**EXECUTE, "decision_basis": given}), ExecuteSummary)
    review = ["R2 vs R3 on damaged final-sale items: chose R3", {"rule": "R4", "choice": "escalate above $500"}]
    assert parse_summary(tagged({**INIT, "decisions_awaiting_review": review}), InitSummary)


REPORT = {
    "iteration": 1, "total": 10, "passed": 8, "failed": 2, "success_rate": 0.8,
    "failures_per_layer": {"L1": 2, "L2": 0, "L3": 0, "L4": 0},
    "failures": [{"layer": "L1", "sample": "s09", "reason": "R2 and R3 both apply"},
                 {"layer": "L1", "sample": "s10", "reason": "R2 and R3 both apply"}],
}


def test_fallbacks_fill_the_decision_points_and_the_decision_basis():
    h, asm = make()
    facts = KnownFacts(scenario="refunds", iteration=1, last_report=REPORT, target_success_rate=0.85)

    def fallback(schema):
        return compact(schema=schema, assembler=asm, previous=None, prompt="P", call=None, breaker=CircuitBreaker(),
                       facts=facts).summary

    execute, init = fallback(ExecuteSummary), fallback(InitSummary)
    assert execute["decision_basis"]["decision"] == "return_to_init"  # only design failures are left
    assert "8/10 passed, success rate 0.8 (target 0.85)" in execute["decision_basis"]["evidence"][0]
    assert init["execute_feedback_summary"]["layer1_problems_summary"] == ["s09: R2 and R3 both apply",
                                                                           "s10: R2 and R3 both apply"]
    assert init["decisions_awaiting_review"] == ["settle in the design (L1): s09: R2 and R3 both apply",
                                                 "settle in the design (L1): s10: R2 and R3 both apply"]
    parse_summary(tagged(execute), ExecuteSummary)
    parse_summary(tagged(init), InitSummary)


@pytest.mark.parametrize("layers, decision", [
    ({"L1": 0, "L2": 1}, "continue"), ({"L1": 0}, "stop"), ({"L1": 1, "L4": 1}, "continue"),
])
def test_the_fallback_decision_follows_the_report(layers, decision):
    h, asm = make()
    report = {**REPORT, "failures_per_layer": layers}
    ev = compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="P", call=None, breaker=CircuitBreaker(),
                 facts=KnownFacts(last_report=report))
    assert ev.summary["decision_basis"]["decision"] == decision
    without = compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="P", call=None,
                      breaker=CircuitBreaker())
    assert without.summary["decision_basis"]["decision"] == "undecided"


@pytest.mark.parametrize("role, schema", [("init", InitSummary), ("execute", ExecuteSummary)])
def test_each_compact_prompt_asks_for_every_key_of_its_schema(role, schema):
    text = (Path(__file__).resolve().parents[1] / "prompts" / role / "compact.md").read_text("utf-8")
    shape = json.loads(text.split("<compact_summary>")[-1].split("</compact_summary>")[0])
    for name, field in schema.model_fields.items():
        assert f"`{name}`" in text and name in shape, name
        nested = field.annotation if isinstance(field.annotation, type) else None
        for sub in (nested.model_fields if nested and issubclass(nested, BaseModel) else {}):
            assert f"`{sub}`" in text, f"{name}.{sub}"
    parse_summary(tagged(shape), schema)  # the prompt's own example validates


def test_a_summary_reply_that_calls_a_tool_is_asked_once_more_then_falls_back():
    """The summary request keeps the steps' tools (a tool_choice change would invalidate the cached messages),
    so a reply may call one: each call gets an error result and the model is asked once more (issue 22)."""
    h, asm = make()
    seen = []
    grep = ToolUseBlock(id="toolu_sum1", name="Grep", input={"pattern": "refund"})

    def call(messages, timeout):
        seen.append(messages)
        if len(seen) == 1:
            return SummaryReply(text="Let me check first.", tool_uses=[grep])
        return SummaryReply(text=tagged(EXECUTE))

    ev = compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="P", call=call,
                 breaker=CircuitBreaker())
    assert not ev.fallback and ev.summary["pending_work"] == ["rerun"]
    assert "called Grep instead of answering" in ev.error  # recorded, though the second answer was good
    retry = list(seen[1])
    assert retry[-2].tool_uses == [grep] and retry[-1].tool_results[0].is_error
    assert "No tool runs while the context is being summarised" in retry[-1].tool_results[0].text
    validate(retry)  # every tool_use answered: a valid request

    always = compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="P",
                     call=lambda m, t: SummaryReply(text="", tool_uses=[grep]), breaker=CircuitBreaker())
    assert always.fallback and "called Grep" in always.error

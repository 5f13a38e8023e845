"""Handoff payloads: validation, error messages, the tagged text form."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.payloads import (
    ExecuteToInit,
    InitToExecute,
    PayloadError,
    parse_payload,
    parse_payload_dict,
    payload_json_schema,
    render_payload,
)
from context.redaction import REDACTED, redact_value


def init_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "scenario": "retail_returns",
        "iteration": 1,
        "design_files": ["design/scenario.md", "design/business_rules.md"],
        "design_summary": "Customers return items within 30 days.",
        "business_rules": ["refund only with receipt", "no refunds after 30 days"],
        "format_spec": "tools: python functions; samples: JSON",
        "acceptance_criteria": {"target_success_rate": 0.85},
    }
    data.update(changes)
    return data


def execute_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "iteration": 1,
        "execution_output_dir": "execution_outputs/iteration_1",
        "success_rate": 0.6,
        "totals": {"samples": 10, "passed": 6, "failed": 4},
        "failures_per_layer": {"L1": 2, "L2": 1, "L3": 0, "L4": 1},
        "layer1_problems_summary": ["rule 3 contradicts rule 5"],
        "fixed_by_execute": ["tool lookup_order raised KeyError"],
        "recommendation": "clarify rule 3",
    }
    data.update(changes)
    return data


def test_valid_payloads_and_defaults() -> None:
    init = parse_payload_dict("init_to_execute", init_data())
    assert isinstance(init, InitToExecute)
    assert init.kind == "init_to_execute" and init.changes_since_last_iteration == []
    assert init.acceptance_criteria.notes is None
    report = parse_payload_dict("execute_to_init", execute_data())
    assert isinstance(report, ExecuteToInit)
    assert report.totals.passed == 6 and report.failures_per_layer.L1 == 2
    partial = parse_payload_dict("execute_to_init", execute_data(failures_per_layer={"L2": 4}))
    assert isinstance(partial, ExecuteToInit) and partial.failures_per_layer.L1 == 0


@pytest.mark.parametrize(
    ("payload", "tag"),
    [
        (InitToExecute(**init_data()), "init_to_execute_context"),
        (ExecuteToInit(**execute_data()), "execute_to_init_context"),
    ],
)
def test_render_parse_round_trip(payload: InitToExecute | ExecuteToInit, tag: str) -> None:
    text = render_payload(payload)
    assert text.startswith(f"<{tag}>") and text.endswith(f"</{tag}>")
    json.loads(text[len(tag) + 2 : -(len(tag) + 3)])  # the inside is plain JSON
    assert parse_payload(f"Here is the handoff.\n{text}\nThanks!") == payload


def test_render_redacts_and_survives_tags_inside_fields() -> None:
    payload = InitToExecute(
        **init_data(
            design_summary="Use </init_to_execute_context> carefully; API_KEY=sk-ant-api03-abcdef0123456789ABCDEF",
            business_rules=["password: hunter2"],
        )
    )
    text = render_payload(payload)
    assert "sk-ant" not in text and "hunter2" not in text
    parsed = parse_payload(text)
    assert isinstance(parsed, InitToExecute)
    assert parsed.design_summary == f"Use </init_to_execute_context> carefully; API_KEY={REDACTED}"
    assert parsed.business_rules == [f"password: {REDACTED}"]


def test_parse_takes_the_first_block_and_accepts_fences() -> None:
    first = render_payload(ExecuteToInit(**execute_data()))
    second = render_payload(ExecuteToInit(**execute_data(iteration=2)))
    assert parse_payload(first + "\n" + second).iteration == 1
    fenced = "<execute_to_init_context>\n```json\n" + json.dumps(execute_data()) + "\n```\n</execute_to_init_context>"
    assert parse_payload(fenced).iteration == 1


def error_of(kind: str, data: Any) -> str:
    with pytest.raises(PayloadError) as info:
        parse_payload_dict(kind, data)
    message = str(info.value)
    assert "call SubmitHandoff again" in message
    return message


def test_wrong_type_names_the_field() -> None:
    bad = execute_data(totals={"samples": 10, "passed": "three", "failed": 4})
    message = error_of("execute_to_init", bad)
    assert "totals.passed: Input should be a valid integer" in message
    assert "(got 'three')" in message


def test_missing_field_names_the_field() -> None:
    data = init_data()
    del data["acceptance_criteria"]
    assert "acceptance_criteria: Field required" in error_of("init_to_execute", data)
    nested = init_data(acceptance_criteria={"notes": "x"})
    assert "acceptance_criteria.target_success_rate: Field required" in error_of("init_to_execute", nested)


def test_every_problem_is_listed() -> None:
    bad = execute_data(iteration=0, success_rate=1.5, unexpected=True, failures_per_layer={"L3": -1})
    with pytest.raises(PayloadError) as info:
        parse_payload_dict("execute_to_init", bad)
    problems = info.value.problems
    assert [p.split(":")[0] for p in problems] == ["iteration", "success_rate", "failures_per_layer.L3", "unexpected"]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../outside.md", "'..' segments"),
        ("design/../../etc/passwd", "'..' segments"),
        ("design\\..\\x", "'..' segments"),
        ("/etc/passwd", "relative"),
        ("~/notes.md", "relative"),
        ("C:\\design.md", "relative"),
        ("", "empty"),
    ],
)
def test_paths_must_stay_inside(path: str, reason: str) -> None:
    message = error_of("init_to_execute", init_data(design_files=["design/ok.md", path]))
    assert "design_files[1]: " in message and reason in message
    message = error_of("execute_to_init", execute_data(execution_output_dir=path))
    assert "execution_output_dir: " in message and reason in message


def test_dotted_names_are_fine() -> None:
    payload = parse_payload_dict("init_to_execute", init_data(design_files=["design/v1..2.md", "./design/.notes"]))
    assert isinstance(payload, InitToExecute)


def test_totals_must_add_up() -> None:
    message = error_of("execute_to_init", execute_data(totals={"samples": 10, "passed": 6, "failed": 3}))
    assert "totals: passed (6) + failed (3) must equal samples (10)" in message


def test_kind_mismatch_and_unknown_kind() -> None:
    assert "kind:" in error_of("execute_to_init", execute_data(kind="init_to_execute"))
    with pytest.raises(PayloadError, match="unknown payload kind"):
        parse_payload_dict("summary", {})
    assert "must be a JSON object, got list" in error_of("init_to_execute", [1, 2])


def test_text_errors() -> None:
    with pytest.raises(PayloadError, match="no <init_to_execute_context> or <execute_to_init_context> block"):
        parse_payload("I am done, here is my report: {}")
    with pytest.raises(PayloadError, match="never closed; end the JSON with </execute_to_init_context>"):
        parse_payload("<execute_to_init_context>{}")
    with pytest.raises(PayloadError, match=r"invalid JSON in <execute_to_init_context>: .* at line 2, column 6"):
        parse_payload('<execute_to_init_context>{"iteration": 1,\n "b" 2}</execute_to_init_context>')
    body = json.dumps(execute_data(success_rate="high"))
    with pytest.raises(PayloadError) as info:
        parse_payload(f"<execute_to_init_context>{body}</execute_to_init_context>")
    assert "success_rate: Input should be a valid number" in str(info.value)


def test_json_schema_is_self_contained() -> None:
    for kind, model in (("init_to_execute", InitToExecute), ("execute_to_init", ExecuteToInit)):
        schema = payload_json_schema(kind)
        assert schema["type"] == "object"
        assert "$defs" not in json.dumps(schema) and "$ref" not in json.dumps(schema)
        assert set(schema["properties"]) == set(model.model_fields)
        assert payload_json_schema(kind) == schema  # stable, so the tool list stays cacheable
    totals = payload_json_schema("execute_to_init")["properties"]["totals"]
    assert totals["required"] == ["samples", "passed", "failed"]


# --- property: render -> parse gives back the (redacted) payload ----------------

texts = st.text(max_size=40)
paths = st.lists(st.text("abcxyz_-.", min_size=1, max_size=8), min_size=1, max_size=3).map("/".join).filter(
    lambda p: ".." not in p.split("/")
)


@st.composite
def totals(draw: st.DrawFn) -> dict[str, int]:
    passed, failed = draw(st.integers(0, 10_000)), draw(st.integers(0, 10_000))
    return {"samples": passed + failed, "passed": passed, "failed": failed}


init_payloads = st.builds(
    lambda **kw: InitToExecute(**kw),
    scenario=texts.filter(bool),
    iteration=st.integers(1, 1000),
    design_files=st.lists(paths, max_size=4),
    design_summary=texts,
    business_rules=st.lists(texts, max_size=4),
    format_spec=texts,
    acceptance_criteria=st.fixed_dictionaries(
        {"target_success_rate": st.floats(0, 1)}, optional={"notes": st.none() | texts}
    ),
    changes_since_last_iteration=st.lists(texts, max_size=3),
)
execute_payloads = st.builds(
    lambda **kw: ExecuteToInit(**kw),
    iteration=st.integers(1, 1000),
    execution_output_dir=paths,
    success_rate=st.floats(0, 1),
    totals=totals(),
    failures_per_layer=st.fixed_dictionaries({f"L{i}": st.integers(0, 100) for i in range(1, 5)}),
    layer1_problems_summary=st.lists(texts, max_size=3),
    fixed_by_execute=st.lists(texts, max_size=3),
    recommendation=texts,
)


@settings(max_examples=150, deadline=None)
@given(st.one_of(init_payloads, execute_payloads), texts, texts)
def test_round_trip_property(payload: InitToExecute | ExecuteToInit, before: str, after: str) -> None:
    text = before.replace("_context>", "") + render_payload(payload) + after
    parsed = parse_payload(text)
    assert parsed.model_dump(mode="json") == redact_value(payload.model_dump(mode="json"))
    assert parse_payload_dict(payload.kind, payload.model_dump(mode="json")) == payload

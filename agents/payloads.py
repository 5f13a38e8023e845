"""The two handoff payloads, the contract between the agents (docs/agents.md), and their text form.

The agents never share memory: Init ends its turn by calling ``SubmitHandoff``
with an ``init_to_execute`` payload, Execute with an ``execute_to_init`` one. A
payload is validated here; an invalid one becomes a tool error that names each
bad field, so the model can fix it and call the tool again. The receiving
agent's opening user message carries it as
``<init_to_execute_context>{json}</init_to_execute_context>``.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from context.redaction import redact_value

# A payload is a summary that points at files (design_files, execution_output_dir), and it opens the other
# agent's next turn whole: 64 KiB is some 16k tokens, under a tenth of Init's 200k window and far above the
# few kilobytes a real handoff takes (the refund_desk script's are under 1.7 KB). More belongs in a file it names.
MAX_PAYLOAD_BYTES = 64 * 1024


def _retry(what: str) -> str:
    return f"Fix {what} and call SubmitHandoff again."


class PayloadError(ValueError):
    """An invalid payload; ``str(err)`` is written for the agent that sent it."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


def _relative_path(value: str) -> str:
    # Agents are confined to the scenario folder (docs/agents.md, "Tools"): a payload path that
    # escapes it would make the other agent read or write outside.
    if not value.strip():
        raise ValueError("path must not be empty")
    if value.startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:", value):
        raise ValueError("path must be relative to the scenario folder")
    if ".." in re.split(r"[\\/]", value):
        raise ValueError("path must not contain '..' segments")
    return value


RelPath = Annotated[str, AfterValidator(_relative_path)]
Count = Annotated[int, Field(ge=0)]
Rate = Annotated[float, Field(ge=0.0, le=1.0)]
Iteration = Annotated[int, Field(ge=1, description="Iteration number, starting at 1.")]


class _Payload(BaseModel):
    # Unknown keys are errors: a misspelt field should be reported, not dropped.
    model_config = ConfigDict(extra="forbid", frozen=True)


class AcceptanceCriteria(_Payload):
    target_success_rate: Rate = Field(description="Fraction of samples that must pass, 0..1.")
    notes: str | None = None


class InitToExecute(_Payload):
    kind: Literal["init_to_execute"] = "init_to_execute"
    scenario: str = Field(min_length=1, description="Scenario name.")
    iteration: Iteration
    design_files: list[RelPath] = Field(description="Design documents, relative to the scenario folder.")
    design_summary: str = Field(description="The unified scenario design in a few paragraphs.")
    business_rules: list[str] = Field(description="Key points of the business rules.")
    format_spec: str = Field(description="Formats of tools, checkers and samples.")
    acceptance_criteria: AcceptanceCriteria
    changes_since_last_iteration: list[str] = Field(default_factory=list)


class Totals(_Payload):
    samples: Count
    passed: Count
    failed: Count

    @model_validator(mode="after")
    def _adds_up(self) -> Totals:
        if self.passed + self.failed != self.samples:
            raise ValueError(
                f"passed ({self.passed}) + failed ({self.failed}) must equal samples ({self.samples})"
            )
        return self


class FailuresPerLayer(_Payload):
    L1: Count = Field(0, description="Design: rules contradict or leave the sample ambiguous.")
    L2: Count = Field(0, description="Tool: exception or wrong output format.")
    L3: Count = Field(0, description="Checker: crashed or disagrees with the design.")
    L4: Count = Field(0, description="Sample: expected outcome wrong.")


class ExecuteToInit(_Payload):
    kind: Literal["execute_to_init"] = "execute_to_init"
    iteration: Iteration
    execution_output_dir: RelPath = Field(description="e.g. execution_outputs/iteration_1")
    success_rate: Rate
    totals: Totals
    failures_per_layer: FailuresPerLayer
    layer1_problems_summary: list[str] = Field(description="Design problems Init has to fix.")
    fixed_by_execute: list[str] = Field(default_factory=list, description="Layer 2-4 problems fixed already.")
    recommendation: str


Payload = Union[InitToExecute, ExecuteToInit]
_MODELS: dict[str, type[InitToExecute] | type[ExecuteToInit]] = {
    "init_to_execute": InitToExecute,
    "execute_to_init": ExecuteToInit,
}
_TAG = re.compile(r"<(init_to_execute|execute_to_init)_context>")


def _model_for(kind: str) -> type[InitToExecute] | type[ExecuteToInit]:
    model = _MODELS.get(kind.removesuffix("_context"))
    if model is None:
        raise PayloadError(f"unknown payload kind {kind!r}; expected one of {sorted(_MODELS)}")
    return model


def payload_dict(payload: Payload) -> dict[str, Any]:
    """The JSON-ready form, secrets redacted: what gets rendered and written to disk."""
    return redact_value(payload.model_dump(mode="json"))


def render_payload(payload: Payload, extra: dict[str, Any] | None = None) -> str:
    """``<kind_context>{json}</kind_context>`` for the receiving agent's opening message. ``extra``: what baton
    adds to the agent's payload (the gates' ``quality`` and ``findings`` on an execute_to_init one), merged in
    after it, redacted like it."""
    tag = f"{payload.kind}_context"
    body = json.dumps(payload_dict(payload) | redact_value(extra or {}), ensure_ascii=False, indent=2)
    # "</" cannot appear in the JSON (JSON allows "\/"), so text inside a field
    # can never close the tag early.
    body = body.replace("</", "<\\/")
    return f"<{tag}>\n{body}\n</{tag}>"


def _describe(errors: list[Any]) -> list[str]:
    problems = []
    for err in errors:
        path = ""
        for part in err["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        line = f"{path or '(payload)'}: {err['msg'].removeprefix('Value error, ')}"
        value = err.get("input")
        if err["type"] != "missing" and not isinstance(value, (dict, list)):
            shown = repr(value)
            line += f" (got {shown[:77] + '...' if len(shown) > 80 else shown})"
        problems.append(line)
    return problems


def parse_payload_dict(kind: str, data: Any) -> Payload:
    """Validate a payload given as a dict (the ``SubmitHandoff`` tool input)."""
    model = _model_for(kind)
    if not isinstance(data, dict):
        got = type(data).__name__
        raise PayloadError(f"the {kind} payload must be a JSON object, got {got}. {_retry('the payload')}")
    kind = model.model_fields["kind"].default
    size = len(json.dumps(data, ensure_ascii=False, default=str).encode("utf-8"))
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadError(
            f"the {kind} payload is {size:,} bytes of JSON, over the limit of {MAX_PAYLOAD_BYTES:,} (it opens the "
            "other agent's turn whole); nothing was written. Keep the fields to summaries and put long text in a "
            f"file of the scenario folder that the payload names. {_retry('the payload')}"
        )
    try:
        return model.model_validate({"kind": kind, **data})
    except ValidationError as exc:
        problems = _describe(exc.errors(include_url=False))
        bullets = "\n".join(f"- {p}" for p in problems)
        raise PayloadError(f"invalid {kind} payload:\n{bullets}\n{_retry('the field(s)')}", problems) from None


def parse_payload(text: str) -> Payload:
    """Find the first ``<..._context>`` block in ``text`` and validate its JSON."""
    opening = _TAG.search(text)
    if opening is None:
        raise PayloadError(
            "no <init_to_execute_context> or <execute_to_init_context> block found; "
            f"wrap the payload JSON in one. {_retry('the message')}"
        )
    kind = opening.group(1)
    closing_tag = f"</{kind}_context>"
    end = text.find(closing_tag, opening.end())
    if end < 0:
        raise PayloadError(
            f"<{kind}_context> is never closed; end the JSON with {closing_tag}. {_retry('the message')}"
        )
    body = text[opening.end() : end].strip()
    # Models like to fence JSON even inside tags.
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise PayloadError(f"invalid JSON in <{kind}_context>: {exc.msg} at {where}. {_retry('the JSON')}") from None
    return parse_payload_dict(kind, data)


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    # Tool schemas read better (for the model) with nested objects spelt out.
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            return _inline_refs({**target, **{k: v for k, v in node.items() if k != "$ref"}}, defs)
        return {
            k: _inline_refs(v, defs)
            for k, v in node.items()
            if k != "$defs" and not (k == "title" and isinstance(v, str))  # titles only repeat names
        }
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def payload_json_schema(kind: str) -> dict[str, Any]:
    """JSON schema of one payload kind, self-contained, for the SubmitHandoff tool (a copy: callers may change it)."""
    return copy.deepcopy(_payload_schema(kind))


@functools.cache
def _payload_schema(kind: str) -> dict[str, Any]:
    # Built once per process: pydantic's schema generation cost a step several milliseconds, every step.
    schema = _model_for(kind).model_json_schema()
    return _inline_refs(schema, schema.get("$defs", {}))


__all__ = [
    "MAX_PAYLOAD_BYTES", "AcceptanceCriteria", "ExecuteToInit", "FailuresPerLayer", "InitToExecute", "Payload",
    "PayloadError", "Totals", "parse_payload", "parse_payload_dict", "payload_dict", "payload_json_schema",
    "render_payload",
]

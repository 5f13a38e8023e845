"""The span tree of the example's run, checked against what the run left on disk (tests/test_tracing.py).

Spans come as ``Recorded`` (from the SDK's in-memory exporter, or decoded from OTLP by
``tests/otlp_receiver.py``), so the same checks hold in-process and across worker processes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.events import CompactionRecord, StepEvent, read_events
from scenarios.store import Layout

CONTENT = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
           "gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


@dataclass
class Recorded:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any] = field(default_factory=dict)
    error: bool = False


def from_sdk(spans) -> list[Recorded]:
    """ReadableSpans of the SDK's InMemorySpanExporter."""
    return [Recorded(name=s.name, trace_id=f"{s.context.trace_id:032x}", span_id=f"{s.context.span_id:016x}",
                     parent_id=f"{s.parent.span_id:016x}" if s.parent else None, attributes=dict(s.attributes or {}),
                     error=s.status.status_code.name == "ERROR") for s in spans]


def check_run_tree(spans: list[Recorded], root: Path) -> dict[str, list[Recorded]]:
    """One trace; the run, its iterations, every step, model call, tool call and compaction the disk records,
    each under the right parent. Returns the spans by kind."""
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans), "a span was exported twice"
    assert len({s.trace_id for s in spans}) == 1, Counter(s.trace_id for s in spans)
    runs = [s for s in spans if s.name.startswith("run ")]
    assert [(s.name, s.parent_id) for s in runs] == [(f"run {root.name}", None)]
    iterations = [s for s in spans if s.name.startswith("iteration ")]
    assert sorted(s.name for s in iterations) == ["iteration 1", "iteration 2"]
    assert {s.parent_id for s in iterations} == {runs[0].span_id}
    iteration_ids = {s.span_id for s in iterations}
    kinds = {kind: [s for s in spans if s.attributes.get("baton.task") == kind] for kind in ("step", "compaction")}
    steps, compactions = kinds["step"], kinds["compaction"]
    chats = [s for s in spans if s.name.startswith("chat ")]
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert all(s.parent_id in iteration_ids for s in steps + [p for p in spans if p.name == "phase"])
    layout = Layout(root)
    for role in ("init", "execute"):
        events, _ = read_events(layout.events(role))
        stepped = {e.step for e in events if isinstance(e, StepEvent)}
        mine = {s.span_id: s for s in steps if s.attributes["baton.agent"] == role}
        called = {mine[c.parent_id].attributes["baton.number"] for c in chats if c.parent_id in mine}
        assert called == stepped, f"{role}: steps with a chat span {sorted(called)} != steps on disk {sorted(stepped)}"
        compacted = [e for e in events if isinstance(e, CompactionRecord)]
        theirs = [s for s in compactions if s.attributes["baton.agent"] == role
                  and s.attributes["baton.status"] == "compacted"]
        assert len(theirs) == len(compacted), f"{role}: {len(theirs)} compaction spans, {len(compacted)} on disk"
        for span, event in zip(sorted(theirs, key=lambda s: s.attributes["baton.number"]), compacted, strict=True):
            assert span.attributes["baton.compaction.tokens_before"] == event.tokens_before
            assert span.attributes["baton.compaction.tokens_after"] == event.tokens_after
            assert span.attributes["baton.compaction.fallback"] == event.fallback
            assert span.attributes["baton.compaction.trigger"] == "threshold"
            # What asked for it, whichever worker ran it: the step before the one that must wait for it, or the
            # phase that opened the turn whose first step must (workers/loop.py first_steps), or the proving task,
            # which opens Init's turn after the gates.
            asked = by_id[span.parent_id]
            assert (asked.attributes["baton.task"], asked.attributes.get("baton.status")) in (
                ("step", "compaction_needed"), ("phase", None), ("proving", None)), asked
    archived = sum(len(list(layout.tool_results(role).glob("*.txt"))) for role in ("init", "execute"))
    assert len(tools) == archived, f"{len(tools)} tool spans, {archived} archived results"
    step_ids = {s.span_id for s in steps}
    assert all(t.parent_id in step_ids for t in tools)
    for tool in tools:
        assert tool.attributes["baton.tool.archive"].startswith("state/")
        assert (root / tool.attributes["baton.tool.archive"]).is_file()
    compaction_ids = {s.span_id for s in compactions}
    for chat in chats:
        purpose = chat.attributes["baton.request.purpose"]
        assert chat.parent_id in (step_ids if purpose == "step" else compaction_ids), chat
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "anthropic"
        assert chat.attributes["gen_ai.request.model"] and chat.attributes["gen_ai.response.model"]
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0 and chat.attributes["gen_ai.usage.output_tokens"] > 0
        for key in ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_creation.input_tokens"):
            assert chat.attributes[key] >= 0
        assert list(chat.attributes["gen_ai.response.finish_reasons"])
    for chat in (c for c in chats if c.attributes["baton.request.purpose"] == "step"):
        assert chat.attributes["baton.context.tokens"] > 0 and chat.attributes["baton.context.threshold"] > 0
    return {"steps": steps, "compactions": compactions, "chats": chats, "tools": tools}


def content_keys(spans: list[Recorded]) -> set[str]:
    return {key for s in spans for key in s.attributes if key in CONTENT}

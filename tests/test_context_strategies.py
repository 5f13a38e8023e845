"""The strategy seams of assembly: result compressor and compactor, chosen by name in Policy."""

from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

from context.api_compaction import ApiCompactor
from context.api_editing import ApiEditingCompressor
from context.assembly import Assembler
from context.compaction import CircuitBreaker, SummaryCompactor, SummaryError, SummarySchema, parse_summary
from context.messages import ToolResultBlock, ToolUseBlock
from context.per_tool_compression import PerToolCompressor
from context.policy import Policy
from context.strategies import COMPACTORS, COMPRESSORS, check_name, instantiate
from context.summary_schemas import SUMMARY_SCHEMAS, ExecuteSummary, InitSummary
from tests.test_assembly import policy, run_log


def test_unknown_compressor_is_refused_with_the_known_names():
    with pytest.raises(ValidationError, match="unknown compressor 'clear'; the known compressors are: api, per_tool"):
        Policy(compressor="clear")


def test_unknown_compactor_is_refused_with_the_known_names():
    with pytest.raises(ValidationError, match="unknown compactor 'server'; the known compactors are: api, summary"):
        Policy(compactor="server")


def test_registry_names_load_their_classes():
    assert isinstance(instantiate("compressor", "per_tool", COMPRESSORS), PerToolCompressor)
    assert isinstance(instantiate("compactor", "summary", COMPACTORS), SummaryCompactor)
    assert isinstance(instantiate("compressor", "api", COMPRESSORS), ApiEditingCompressor)
    assert isinstance(instantiate("compactor", "api", COMPACTORS), ApiCompactor)
    with pytest.raises(ValueError, match="known compactors are: api, summary"):
        check_name("compactor", "nope", COMPACTORS)


def test_assembler_uses_the_strategies_its_policy_names():
    asm = Assembler(run_log(2), Policy())
    assert isinstance(asm.compressor, PerToolCompressor) and isinstance(asm.compactor, SummaryCompactor)


class Blank:
    """A compressor that replaces every older result with one word."""

    def compress_result(self, call: ToolUseBlock | None, result: ToolResultBlock, ref: str, *, read_lines: int):
        return ToolResultBlock(tool_use_id=result.tool_use_id, content=f"blank {ref}")

    def cap_result(self, result: ToolResultBlock, ref: str, *, cap_chars: int, head: int, tail: int):
        return result

    def compress_call(self, call: ToolUseBlock) -> ToolUseBlock:
        return call


def test_a_given_compressor_shrinks_the_older_steps():
    h = run_log(10)
    a = Assembler(h, policy(), agent="execute", compressor=Blank()).assemble()
    assert a.messages[2].tool_results[0].text == "blank state/execute/tool_results/toolu_0001.txt"
    assert a.messages[-1] is h.view[-1]  # the verbatim window is untouched


class Fields(SummaryCompactor):
    """A compactor that never compacts and adds a field to every request."""

    def should_compact(self, assembler, assembled, event) -> bool:
        return False

    def request_fields(self, event) -> dict[str, Any]:
        return {"context_management": {"edits": []}}


def test_compactor_decides_and_adds_request_fields():
    h = run_log(10)
    asm = Assembler(h, policy(threshold=10), compactor=Fields())
    a = asm.assemble()
    assert not asm.should_compact(a, None)
    body = a.to_request(asm.static, model="m", max_tokens=10)
    assert body["context_management"] == {"edits": []}
    assert Assembler(h, policy(threshold=10)).should_compact(a, None)  # the summary compactor would


def test_summary_compactor_compacts_with_the_schema_passed_in():
    h = run_log(10)
    asm = Assembler(h, policy(keep_last_steps=3))
    ev = asm.compactor.compact(asm, None, schema=InitSummary, prompt="P", call=None, breaker=CircuitBreaker())
    assert ev.fallback and "design_files" in ev.summary["key_paths"]  # the init schema's fallback shape
    InitSummary.model_validate(ev.summary)


def test_role_schemas_are_looked_up_by_the_agent_not_the_compactor():
    assert SUMMARY_SCHEMAS == {"init": InitSummary, "execute": ExecuteSummary}
    assert [s.label for s in SUMMARY_SCHEMAS.values()] == ["init", "execute"]


def test_a_summary_schema_must_carry_key_paths():
    with pytest.raises(TypeError, match="needs a key_paths field"):

        class NoPaths(SummarySchema):  # noqa: F841 (defining it is the test)
            label: ClassVar[str] = "none"
            notes: str


def test_schema_errors_name_the_schema():
    with pytest.raises(SummaryError, match="does not match the init schema: current_design_summary"):
        parse_summary('<compact_summary>{"key_paths": {}}</compact_summary>', InitSummary)

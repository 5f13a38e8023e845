"""Context editing (beta ``context-management-2025-06-27``): the server clears old tool results and old
thinking from what the model reads, bills and caches; the client keeps sending its history unchanged.

The rules (platform docs "Context editing", digested in docs/fake-api.md; shapes from the SDK's
``BetaClearToolUses20250919EditParam``, ``BetaClearThinking20251015EditParam`` and
``BetaContextManagementResponse``):

- ``context_management: {"edits": [...]}`` needs the beta header; ``clear_thinking_20251015`` "must
  be listed first in the ``edits`` array" when both strategies are used.
- ``clear_thinking_20251015``: ``keep`` is ``{"type": "thinking_turns", "value": N}`` ("N must be > 0"),
  ``"all"`` or ``{"type": "all"}``; by default the model's own (all turns for the models after Opus 4.1,
  Sonnet 4.5 and Haiku 4.5, the last turn for those). Older assistant turns lose their thinking.
- ``clear_tool_uses_20250919``: once the prompt exceeds ``trigger`` (default 100,000 input tokens, or
  a number of tool uses), "the API automatically clears the oldest tool results in chronological
  order", keeping the last ``keep`` tool use/result pairs (default 3) and those of ``exclude_tools``,
  replacing each result with placeholder text; ``clear_tool_inputs`` clears the calls' inputs too
  (``true``: all of them; a list: those tools'). "If the API can't clear at least [``clear_at_least``],
  the strategy will not be applied."
- The reply's ``context_management.applied_edits`` lists each edit that cleared something, with
  ``cleared_tool_uses`` or ``cleared_thinking_turns`` and ``cleared_input_tokens``.

Edits never touch the prefix check: it runs on the messages as sent ("server-side context management
never invalidates thinking blocks"). What they change is read from the first cleared piece on, so the
cache key changes there too ("Invalidates cached prompt prefixes when content is cleared").
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workers.fake_api.rules import invalid

EDITING_BETA = "context-management-2025-06-27"
# The docs say only "placeholder text indicating to Claude that it was removed"; this is the double's.
PLACEHOLDER = "[tool result cleared to save context]"
CLEAR_TOOL_USES, CLEAR_THINKING = "clear_tool_uses_20250919", "clear_thinking_20251015"
THINKING_KINDS = ("thinking", "redacted_thinking")
LAST_TURN_ONLY = ("claude-opus-4-1", "claude-opus-4-0", "claude-sonnet-4-5", "claude-sonnet-4-0", "claude-haiku-4-5")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputTokens(_Strict):
    type: Literal["input_tokens"]
    value: int = Field(ge=0)


class ToolUses(_Strict):
    type: Literal["tool_uses"]
    value: int = Field(ge=0)


class ThinkingTurns(_Strict):
    type: Literal["thinking_turns"]
    value: int = Field(gt=0)  # "N must be > 0"


class AllTurns(_Strict):
    type: Literal["all"]


class ClearToolUses(_Strict):
    type: Literal["clear_tool_uses_20250919"]
    trigger: Annotated[Union[InputTokens, ToolUses], Field(discriminator="type")] = \
        InputTokens(type="input_tokens", value=100_000)
    keep: ToolUses = ToolUses(type="tool_uses", value=3)
    clear_at_least: InputTokens | None = None
    exclude_tools: list[str] | None = None
    clear_tool_inputs: bool | list[str] | None = None


class ClearThinking(_Strict):
    type: Literal["clear_thinking_20251015"]
    keep: Union[ThinkingTurns, AllTurns, Literal["all"], None] = None  # None: the model's default


Edit = Annotated[Union[ClearToolUses, ClearThinking], Field(discriminator="type")]


class ContextManagement(_Strict):
    edits: list[Edit] = Field(default_factory=list)


def requested(raw: Any, betas: list[str]) -> ContextManagement | None:
    """The request's ``context_management``, checked; None when absent."""
    if not isinstance(raw, dict) or raw.get("context_management") is None:
        return None
    if EDITING_BETA not in betas:
        raise invalid("context_management: Extra inputs are not permitted")
    edits = raw["context_management"].get("edits") if isinstance(raw["context_management"], dict) else None
    for n, edit in enumerate(edits if isinstance(edits, list) else []):
        if isinstance(edit, dict) and edit.get("type") == "compact_20260112":
            raise invalid(f"context_management.edits.{n}: the fake API does not model threshold compaction "
                          "(`compact_20260112`); use on-demand compaction (`compaction`)")
    try:
        config = ContextManagement.model_validate(raw["context_management"])
    except ValidationError as err:
        first = err.errors()[0]
        raise invalid(".".join(["context_management", *(str(p) for p in first["loc"])]) + f": {first['msg']}") \
            from None
    kinds = [edit.type for edit in config.edits]
    if len(set(kinds)) != len(kinds):  # the docs are silent; each strategy once is what they describe
        raise invalid("context_management.edits: each strategy may be listed once")
    if CLEAR_THINKING in kinds and kinds[0] != CLEAR_THINKING:
        raise invalid(f"context_management.edits: when using multiple strategies, the `{CLEAR_THINKING}` "
                      "strategy must be listed first")
    return config


def apply(config: ContextManagement, raw: dict[str, Any], count: Callable[[dict[str, Any]], int],
          model_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The request as the server edits it, and the reply's ``applied_edits``. ``count``: a request's input
    tokens, as ``count_tokens`` says."""
    applied = []
    for edit in config.edits:
        before = count(raw)
        edited, entry = (_clear_thinking(edit, raw, model_id) if isinstance(edit, ClearThinking)
                         else _clear_tool_uses(edit, raw, before))
        if entry is None:
            continue
        cleared = before - count(edited)
        if isinstance(edit, ClearToolUses) and edit.clear_at_least and cleared < edit.clear_at_least.value:
            continue  # "the strategy will not be applied"
        raw = edited
        applied.append({"type": edit.type, **entry, "cleared_input_tokens": cleared})
    return raw, applied


def _keep_turns(edit: ClearThinking, model_id: str) -> int | None:
    """How many recent assistant turns keep their thinking; None: all."""
    if edit.keep is None:
        return 1 if model_id.startswith(LAST_TURN_ONLY) else None
    return edit.keep.value if isinstance(edit.keep, ThinkingTurns) else None


def _clear_thinking(edit: ClearThinking, raw: dict[str, Any], model_id: str
                    ) -> tuple[dict[str, Any], dict[str, int] | None]:
    keep = _keep_turns(edit, model_id)
    messages = raw.get("messages") or []
    # A turn here is an assistant message holding thinking; one holding nothing else keeps it (no empty message).
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and isinstance(m.get("content"), list)
             and any(_kind(b) in THINKING_KINDS for b in m["content"])
             and any(_kind(b) not in THINKING_KINDS for b in m["content"])]
    cleared = turns[:-keep] if keep is not None else []
    if not cleared:
        return raw, None
    edited = list(messages)
    for i in cleared:
        edited[i] = {**messages[i], "content": [b for b in messages[i]["content"] if _kind(b) not in THINKING_KINDS]}
    return {**raw, "messages": edited}, {"cleared_thinking_turns": len(cleared)}


def _clear_tool_uses(edit: ClearToolUses, raw: dict[str, Any], input_tokens: int
                     ) -> tuple[dict[str, Any], dict[str, int] | None]:
    messages = raw.get("messages") or []
    uses = [(i, j, b) for i, m in enumerate(messages) if m.get("role") == "assistant"
            for j, b in enumerate(m["content"] if isinstance(m.get("content"), list) else []) if _kind(b) == "tool_use"]
    fired = input_tokens > edit.trigger.value if edit.trigger.type == "input_tokens" \
        else len(uses) > edit.trigger.value  # "Once the prompt exceeds this threshold"
    if not fired:
        return raw, None
    results = {b.get("tool_use_id"): (i, j) for i, m in enumerate(messages) if m.get("role") == "user"
               for j, b in enumerate(m["content"] if isinstance(m.get("content"), list) else [])
               if _kind(b) == "tool_result"}
    pairs = [(i, j, b) for i, j, b in uses if b.get("id") in results]
    kept = pairs[len(pairs) - edit.keep.value:] if edit.keep.value else []
    excluded = set(edit.exclude_tools or ())
    cleared = [use for use in pairs if use not in kept and use[2].get("name") not in excluded]
    if not cleared:
        return raw, None
    edited = copy.deepcopy(messages)
    for i, j, use in cleared:
        ri, rj = results[use["id"]]
        edited[ri]["content"][rj] = _placeholder(edited[ri]["content"][rj])
        inputs = edit.clear_tool_inputs
        if inputs is True or (isinstance(inputs, list) and use.get("name") in inputs):
            edited[i]["content"][j]["input"] = {}
    return {**raw, "messages": edited}, {"cleared_tool_uses": len(cleared)}


def _placeholder(result: dict[str, Any]) -> dict[str, Any]:
    """The result with its content replaced; a breakpoint set on a part of it stays where the client put it."""
    parts = result.get("content")
    marker = next((p["cache_control"] for p in reversed(parts) if isinstance(p, dict) and p.get("cache_control")),
                  None) if isinstance(parts, list) else None
    text = {"type": "text", "text": PLACEHOLDER, **({"cache_control": marker} if marker else {})}
    return {**result, "content": [text] if marker else PLACEHOLDER}


def _kind(block: Any) -> str | None:
    return block.get("type") if isinstance(block, dict) else None

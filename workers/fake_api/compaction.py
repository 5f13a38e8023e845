"""On-demand compaction (beta ``compact-2026-09-04``): a request with a top-level ``compaction`` is answered
with a signed summary block, not a reply.

The rules (platform docs "Compaction on demand", digested in docs/fake-api.md):

- ``compaction: {"type": "summarize", "instructions"?: str}`` needs the beta header; it cannot be
  combined with ``context_management``, ``stop_sequences``, ``output_config.format``,
  ``output_config.task_budget.remaining`` or a ``tool_choice`` of type ``any`` or ``tool``;
  ``instructions`` are at most 16,384 characters, and blank ones count as absent.
- The messages must hold ``user`` or ``assistant`` content (``compaction_nothing_to_summarize``) and
  their last ``assistant`` turn may not end in a tool call with no result (``compaction_incomplete_turn``).
- "The summarization call uses the request's model, ``system``, ``tools``, thinking settings, and
  ``max_tokens``": here the simulated model reads the messages followed by the instructions (or the
  double's own ``DEFAULT_PROMPT``). Its prompt is cache-accounted on the request's breakpoints.
- The answer is ``content: [{"type": "compaction", "content": ..., "signature": ...}]``,
  ``stop_reason: "compaction"``, top-level usage all zero and the call's usage in
  ``usage.iterations[0]`` (``type: "compaction"``). A call that ends otherwise (a tool call, no text,
  the ``max_tokens`` cap, no room for the prompt, a refusal) is a 200 with empty ``content`` and the
  call's own ``stop_reason``, "still billed and reported in ``usage.iterations``, with zero usage when
  no call could be made".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from agents.models import ModelError, ModelRequest
from agents.simulated import SimulatedModel
from context.tokens import count_text
from workers.fake_api.answer import message
from workers.fake_api.cache import CacheUse, PromptCache
from workers.fake_api.compaction_block import (
    COMPACTION_BETA,
    CompactionError,
    as_read,
    sealed_block,
    task_budget_remaining,
)
from workers.fake_api.counting import PER_BLOCK, PER_MESSAGE, Piece, claude_tokens
from workers.fake_api.rules import ApiError, CheckedRequest, invalid
from workers.fake_api.seal import short_hash
from workers.fake_api.thinking import Checked, preserves_thinking

MAX_INSTRUCTIONS = 16_384
# The docs do not give the API's own prompt; the double's asks for prose, so its summary is plain text.
DEFAULT_PROMPT = ("Summarize the conversation above for a continuation that will not see it: the task, what "
                  "was done and found, the files touched, and what is left to do. Write prose. Do not call tools.")
SUMMARY_THINKING_TOKENS = 52  # what the summariser thinks on a model that thinks by default: billed, capped
# Models that take on-demand compaction (the page's list, Sonnet 5.5 and Haiku 5.5 from its newer versions);
# the Models API's capabilities.compaction is the source of truth the double's catalogue does not serve.
SUPPORTED = ("claude-fable-5-1", "claude-mythos-5-1", "claude-fable-5", "claude-mythos-5", "claude-mythos-preview",
             "claude-opus-5-5", "claude-opus-5", "claude-opus-4-8", "claude-opus-4-7", "claude-opus-4-6",
             "claude-sonnet-5-5", "claude-sonnet-5", "claude-sonnet-4-6", "claude-haiku-5-5")
SUMMARY_TAG = re.compile(r"<compact_summary>(.*?)</compact_summary>", re.DOTALL)


class CompactionConfig(BaseModel):
    """The ``compaction`` parameter (the SDK's ``BetaCompactionConfigParam``)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["summarize"]
    instructions: str | None = None

    @property
    def prompt(self) -> str | None:
        """The instructions that replace the default prompt; "An empty or whitespace-only value counts as absent"."""
        return self.instructions if self.instructions and self.instructions.strip() else None


def requested(raw: Any, betas: list[str]) -> CompactionConfig | None:
    """The request's ``compaction`` parameter, checked with what it may not be sent with; None when absent."""
    if not isinstance(raw, dict) or raw.get("compaction") is None:
        return None
    if COMPACTION_BETA not in betas:
        raise invalid(f"compaction: the `compaction` parameter requires `anthropic-beta: {COMPACTION_BETA}`")
    try:
        config = CompactionConfig.model_validate(raw["compaction"])
    except ValidationError as err:
        first = err.errors()[0]
        raise invalid(".".join(["compaction", *(str(p) for p in first["loc"])]) + f": {first['msg']}") from None
    if raw.get("context_management") is not None:
        raise invalid("compaction: can't be combined with `context_management` on one request")
    choice = raw.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        raise invalid(f"tool_choice: a `tool_choice` of type `{choice['type']}` can't be sent with `compaction`")
    if raw.get("stop_sequences"):
        raise invalid("stop_sequences: can't be sent with `compaction`")
    output = raw.get("output_config") if isinstance(raw.get("output_config"), dict) else {}
    if output.get("format") is not None:
        raise invalid("output_config.format: can't be sent with `compaction`")
    if task_budget_remaining(raw):
        raise invalid("output_config.task_budget.remaining: can't be sent with `compaction`")
    if config.instructions is not None and len(config.instructions) > MAX_INSTRUCTIONS:
        raise invalid(f"compaction.instructions: at most {MAX_INSTRUCTIONS} characters, got "
                      f"{len(config.instructions)}")
    _check_messages(raw.get("messages"))
    return config


def _check_messages(messages: Any) -> None:
    messages = messages if isinstance(messages, list) else []
    if not any(_has_content(m) for m in messages):
        raise CompactionError("compaction_nothing_to_summarize",
                              "messages: no `user` or `assistant` content to summarize")
    last = messages[-1] if isinstance(messages[-1], dict) else {}
    content = last.get("content")
    if last.get("role") == "assistant" and isinstance(content, list) and \
            any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content):
        raise CompactionError("compaction_incomplete_turn", f"messages.{len(messages) - 1}: the last `assistant` "
                              "turn ends in a tool call with no result yet; send that turn's tool results first")


def _has_content(message: Any) -> bool:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        return False
    content = message.get("content")
    if isinstance(content, str):
        return bool(content)
    return isinstance(content, list) and any(
        not (isinstance(b, dict) and b.get("type") == "compaction" and b.get("content") is None) for b in content)


def unsupported(model_id: str) -> ApiError:
    """The docs give no text for a model without on-demand compaction; this one says what to do."""
    return invalid(f"compaction: {model_id} does not support on-demand compaction; the Models API's "
                   "`capabilities.compaction` lists the models that do")


@dataclass
class Compacted:
    """A compaction request's answer, and what /stats counts of it."""

    message: dict[str, Any]
    use: CacheUse
    output_tokens: int

    @property
    def produced(self) -> bool:
        return bool(self.message["content"])


def compact(config: CompactionConfig, checked: CheckedRequest, raw: dict[str, Any], bound: Checked,
            model: SimulatedModel, cache: PromptCache, settings: str, serial: int,
            empty: str | None = None) -> Compacted:
    """Summarise the request's messages with the simulated model; ``empty``: a ``compaction_empty`` fault's
    stop reason (the call runs and is billed, its summary is not returned)."""
    model_id, max_tokens = checked.model.id, checked.body.max_tokens or 0
    if model_id not in SUPPORTED:
        raise unsupported(model_id)
    prompt = config.prompt or DEFAULT_PROMPT
    appended = raw["messages"][-1].get("role") == "user"  # the instructions join that message, or start one
    instructions = Piece("compaction instructions", claude_tokens(count_text(prompt)) + PER_BLOCK
                         + (0 if appended else PER_MESSAGE))
    pieces = [*checked.pieces, instructions]
    if sum(p.tokens for p in pieces) > checked.model.max_input_tokens or empty == "model_context_window_exceeded":
        return _empty(checked, "model_context_window_exceeded", CacheUse(), 0)  # no call could be made
    use = cache.account(pieces, settings)
    thinking = SUMMARY_THINKING_TOKENS if preserves_thinking(model_id) and \
        (raw.get("thinking") or {}).get("type") != "between_tools" else 0
    try:
        reply = model.create(ModelRequest(
            model=checked.body.model, max_tokens=max_tokens, messages=_with_prompt(as_read(raw["messages"]), prompt),
            system=checked.body.system, tools=checked.body.tools,
            purpose="step" if config.prompt else "summary"))  # the default prompt always gets a summary
    except ModelError:
        return _empty(checked, empty or "end_turn", use, thinking)  # "The call returned no text."
    texts = [b.text for b in reply.content if b.type == "text"]
    summary = "\n".join(texts) if config.prompt else _plain("\n".join(texts))
    output = thinking + claude_tokens(sum(b.tokens for b in reply.content))
    if empty is not None:  # what the call cost when it stopped that way
        cost = {"refusal": 0, "end_turn": thinking, "max_tokens": max_tokens}.get(empty, min(output, max_tokens))
        return _empty(checked, empty, use, cost)
    if output > max_tokens:
        return _empty(checked, "max_tokens", use, max_tokens)
    if reply.stop_reason == "tool_use" or any(b.type == "tool_use" for b in reply.content):
        return _empty(checked, "tool_use", use, output)  # "The summarizer ... never runs a tool"
    if not summary.strip():
        return _empty(checked, "end_turn", use, output)
    block = sealed_block(summary, raw, bound, model_id, serial)
    return Compacted(_message(checked, [block], "compaction", use, output), use, output)


def _with_prompt(messages: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The messages and then the instructions: in the last message when it is a user one (roles alternate)."""
    ask = {"type": "text", "text": prompt}
    last = messages[-1]
    if last.get("role") != "user":
        return [*messages, {"role": "user", "content": [ask]}]
    content = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
    return [*messages[:-1], {**last, "content": [*content, ask]}]


def _plain(text: str) -> str:
    """The simulated model's summary as prose: it answers with baton's ``<compact_summary>`` JSON, which the
    double's own prompt does not ask for."""
    found = SUMMARY_TAG.search(text)
    if found is None:
        return text
    try:
        facts = json.loads(found.group(1))
    except ValueError:
        facts = {}
    lines = [f"{key.replace('_', ' ')}: {value if isinstance(value, str) else json.dumps(value)}"
             for key, value in (facts.items() if isinstance(facts, dict) else [])]
    return (text[:found.start()] + "\n".join(lines) + text[found.end():]).strip()


def _empty(checked: CheckedRequest, stop_reason: str, use: CacheUse, output_tokens: int) -> Compacted:
    message = _message(checked, [], stop_reason, use, output_tokens)
    if stop_reason == "refusal":
        message["stop_details"] = {"type": "refusal", "category": None, "explanation": None}
    return Compacted(message, use, output_tokens)


def _message(checked: CheckedRequest, content: list[dict[str, Any]], stop_reason: str, use: CacheUse,
             output_tokens: int) -> dict[str, Any]:
    """A compaction answer: the top-level usage is zero ("no reply was generated"); the summarisation call is
    the ``compaction`` iteration."""
    usage = CacheUse().usage(0) | {"iterations": [{"type": "compaction", **use.usage(output_tokens)}]}
    return message(checked, content, stop_reason, usage, "msg_sim" + short_hash(json.dumps(content) + stop_reason))

"""The thinking and effort fields every request of an agent carries, the summary's included.

The Claude 5.5 models think by default (Opus 5.5 always; Sonnet 5.5 adaptively, and refuses
``{"type": "disabled"}``), so baton names the role's setting on every request rather than leave it
to the model's default. A change of the thinking parameters or of ``output_config.effort`` between
requests invalidates the cached message blocks (the prompt-caching page's table), so the steps and the
compaction summary send exactly the same fields.

- ``adaptive`` asks for ``block_binding.prefix_mismatch_behavior: "drop_block"`` (beta header
  ``thinking-binding-controls-2026-08-01``): a safety net only, since baton sends a thinking block back
  only while its prefix is unchanged (``context.prefix``); a reply whose ``input_transformations``
  lists a dropped block is recorded as a warning. ``display: "updates"`` (beta header
  ``thinking-display-updates-2026-08-18``) returns the notes the model writes between tool calls as
  text (on Opus 5.5 they come back inside thinking blocks, empty under the default ``omitted``), so the
  log, ``baton status`` and Flower show what the agent says; the display never changes what is billed.
- ``between_tools`` (Sonnet 5.5 only): no up-front thinking; the API takes no other field with it.
- ``off``: no thinking field, for models from before preserved thinking.

Docs: platform.claude.com/docs/en/build-with-claude/preserved-thinking, .../thinking, .../effort.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from agents.config import ModelSettings
from agents.models import ModelRequest
from context.messages import Message, is_signed

CLAUDE_PER_RAW = 1.19  # Claude tokens per cl100k token (the estimator's prior)

BINDING_BETA = "thinking-binding-controls-2026-08-01"
UPDATES_BETA = "thinking-display-updates-2026-08-18"


def thinking_fields(settings: ModelSettings) -> dict[str, Any]:
    """``thinking``, ``output_config`` and ``betas`` for a ``ModelRequest`` of a model with these settings."""
    thinking: dict[str, Any] | None = None
    betas: list[str] = []
    if settings.thinking == "adaptive":
        thinking = {"type": "adaptive", "display": settings.thinking_display,
                    "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
        betas.append(BINDING_BETA)
        if settings.thinking_display == "updates":
            betas.append(UPDATES_BETA)
    elif settings.thinking == "between_tools":
        thinking = {"type": "between_tools"}
    output_config = {"effort": settings.effort} if settings.effort else None
    return {"thinking": thinking, "output_config": output_config, "betas": betas}


def with_billed_thinking(message: Message, output_tokens: int) -> Message:
    """``message`` with its thinking blocks' share of the reply's billed thinking (``ThinkingBlock.billed``): the
    output the reply was billed for beyond what it shows (its text and calls, in Claude-like tokens). Sent back,
    a block is billed as input at that size (platform docs, "Preserved thinking"), so baton's estimate counts it
    too; the 5.5 models show no thinking text by default."""
    signed = [b for b in message.content if is_signed(b)]
    if not signed:
        return message
    shown = sum(b.tokens for b in message.content if not is_signed(b))
    thinking = max(0, output_tokens - math.ceil(shown * CLAUDE_PER_RAW))
    share, extra = divmod(thinking, len(signed))
    blocks, k = [], 0
    for block in message.content:
        if is_signed(block):
            block = block.model_copy(update={"billed": share + (1 if k < extra else 0)})
            k += 1
        blocks.append(block)
    return Message(role=message.role, content=blocks, usage=message.usage)


def request_of(body: dict[str, Any], settings: ModelSettings, *, temperature: float | None, betas: Iterable[str] = (),
               **fields: Any) -> ModelRequest:
    """The ``ModelRequest`` of an assembled Messages body (model, max_tokens, messages, system, tools), with the
    role's thinking fields, which every request of an agent carries unchanged (a change of them misses the
    cached message blocks), and the beta headers the body's blocks or fields need besides theirs."""
    thinking = thinking_fields(settings)
    thinking["betas"] = [*thinking["betas"], *(b for b in betas if b not in thinking["betas"])]
    return ModelRequest(model=body["model"], max_tokens=body["max_tokens"], messages=body["messages"],
                        system=body.get("system"), tools=body.get("tools", []), temperature=temperature,
                        **fields, **thinking)

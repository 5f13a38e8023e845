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

from typing import Any

from agents.config import ModelSettings

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

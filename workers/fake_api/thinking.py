"""Preserved thinking as the API enforces it: thinking blocks signed over their prefix, and checked.

The rules (platform docs, "Preserved thinking", "Prefix checks on thinking blocks", "Fix a thinking
block bound to a different conversation", and the SDK's ``block_binding`` / ``input_transformations``
types), for the models that run the prefix check (here: the 5.5 models):

- Every reply carries a ``thinking`` block, signed. Its text is empty unless the request asked for
  ``display: "summarized"`` (the 5.5 models default to ``omitted``); ``updates`` returns the notes
  between tool calls, which the double does not write, so its reasoning block stays empty too.
  ``between_tools`` (Sonnet 5.5) has no up-front thinking: one signed note before the first tool call.
  Now and then (``REDACTED_EVERY``) a ``redacted_thinking`` block follows, its ``data`` opaque.
- A signature covers the block's own text, the model, the content before it (top-level ``system``,
  ``tools``, every earlier message and the earlier blocks of its own message, ``cache_control`` aside,
  thinking blocks aside) and the thinking block before it (its predecessor). So thinking may be dropped
  from the start or the end, but a block left out or moved in the middle invalidates every block produced
  after it, and a block put back invalidates those produced while it was gone.
- A block whose text or signature was edited is refused (400) whatever the setting. A block whose
  prefix changed fails the prefix check: a 400 naming it (this double is an account created after
  2026-08-31, where the check is enforced), or, with ``thinking.block_binding.prefix_mismatch_behavior:
  "drop_block"`` and the beta header, the block is dropped and listed in ``input_transformations``.

- After an on-demand compaction the check starts at the compaction block (``Start``, made by
  ``compaction_block.adopt``): the prefix the block's summarised messages ended at, so kept turns stay
  valid exactly when the docs' conditions hold, and thinking produced after a block is bound to it (``b``).
- Each seal records the thinking tokens its block cost (``n``): a kept block is billed as input at that
  count (``counting``), not at its visible text.

Signatures are HMACs with a key of the double's own (``seal``): they are opaque to baton, as the real ones are.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from workers.fake_api.rules import invalid
from workers.fake_api.seal import canonical, link, open_seal, seal

BINDING_BETA = "thinking-binding-controls-2026-08-01"
UPDATES_BETA = "thinking-display-updates-2026-08-18"
SIGNED = ("thinking", "redacted_thinking")
REDACTED_EVERY = 7  # about one reply in this many also carries a redacted_thinking block
PER_SIGNED_BLOCK = 12  # thinking tokens every signed block costs, on top of the reply's reasoning
MISMATCH = ("{path}: Invalid `signature` in `thinking` block. The block is bound to a different conversation. "
            "Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to \"drop_block\".")
NEEDS_BETA = f" That setting requires the `{BINDING_BETA}` value in the `anthropic-beta` header."
TAMPERED = "{path}: Invalid `signature` in `thinking` block"


def preserves_thinking(model_id: str) -> bool:
    """Models that think by default and run the prefix check (in the double's catalogue: the 5.5 models)."""
    return "-5-5" in model_id


def system_tools_digest(body: dict[str, Any]) -> str:
    """Where every prefix starts: the top-level ``system`` and ``tools``."""
    return link("", canonical({"system": body.get("system"), "tools": body.get("tools") or []}))


@dataclass(frozen=True)
class Start:
    """Where the prefix check starts when a compaction block stands first (``compaction_blocks.adopt``): the
    digest the block recorded (changed where the docs' conditions for kept thinking fail), and the blocks
    thinking may be bound to: the one in place, then those it summarised, newest first."""

    digest: str
    binding: tuple[str, ...]


@dataclass
class Checked:
    """A request's thinking after the check: what was sent back, kept, dropped; where the reply's prefix stands."""

    digest: str  # the content digest after the whole request (thinking aside)
    last_id: str | None  # the last thinking block kept: the reply's first block names it as its predecessor
    binding: tuple[str, ...] = ()  # Start.binding: thinking produced now is bound to its first block
    sent: int = 0
    redacted_sent: int = 0
    kept: int = 0
    dropped: list[dict[str, str]] = field(default_factory=list)  # input_transformations entries
    messages: list[dict[str, Any]] = field(default_factory=list)  # the messages with dropped blocks removed


def _is_compaction(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "compaction"


def check(body: dict[str, Any], model_id: str, betas: list[str], start: Start | None = None) -> Checked:
    """Run the prefix check on every thinking block ``body`` sends back (raises the API's 400).

    With ``start`` (a compaction block first), the running digest starts where the block's summarised
    messages ended; the block itself, and a message holding nothing else, are not part of the chain: the
    summary stands for the messages it replaced ("Compaction and preserved thinking")."""
    thinking = body.get("thinking") if isinstance(body.get("thinking"), dict) else {}
    binding = (thinking.get("block_binding") or {}).get("prefix_mismatch_behavior")
    drop = binding == "drop_block" and BINDING_BETA in betas
    out = Checked(start.digest if start else system_tools_digest(body), None, start.binding if start else ())
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if blocks and all(_is_compaction(b) for b in blocks):
            out.messages.append(message)
            continue
        out.digest = link(out.digest, "message:" + str(message.get("role")))
        kept_blocks = []
        for j, block in enumerate(blocks):
            if _is_compaction(block):
                kept_blocks.append(block)
                continue
            if not (isinstance(block, dict) and block.get("type") in SIGNED):
                out.digest = link(out.digest, canonical(block))
                kept_blocks.append(block)
                continue
            out.sent += 1
            out.redacted_sent += block["type"] == "redacted_thinking"
            path = f"messages.{i}.content.{j}"
            fields = open_seal(block.get("signature") if block["type"] == "thinking" else block.get("data"))
            if fields is None or (block["type"] == "thinking" and fields.get("t") != _text_hash(block)):
                raise invalid(TAMPERED.format(path=path))
            # Valid: the content before it is what it was signed under, its predecessor is the thinking block
            # kept before it (or none was kept: thinking may be dropped from the start), and a block produced
            # after a compaction block comes with that block or one that summarised it.
            if fields.get("p") == out.digest and (out.last_id is None or fields.get("pred") == out.last_id) \
                    and fields.get("b") in (None, *out.binding):
                out.last_id, out.kept = fields.get("id"), out.kept + 1
                kept_blocks.append(block)
                continue
            if not drop:
                raise invalid(MISMATCH.format(path=path) + ("" if BINDING_BETA in betas else NEEDS_BETA))
            out.dropped.append({"type": "thinking_dropped", "path": path, "reason": "prefix_binding_mismatch"})
        out.messages.append({**message, "content": kept_blocks} if isinstance(content, list) else message)
    return out


def _text_hash(block: dict[str, Any]) -> str:
    return hashlib.sha256(str(block.get("thinking", "")).encode()).hexdigest()[:16]


def sign_reply(content: list[dict[str, Any]], checked: Checked, model_id: str, thinking: dict[str, Any],
               serial: int) -> tuple[list[dict[str, Any]], int]:
    """The reply's content with its signed thinking blocks in place, and how many thinking tokens they cost.

    Each seal records what its block cost (``n``): sent back, the block is billed as input at that count
    (``counting``), whatever its visible text."""
    kind = thinking.get("type", "adaptive")
    display = thinking.get("display") or "omitted"
    if kind == "between_tools":
        first_tool = next((k for k, b in enumerate(content) if b.get("type") == "tool_use"), None)
        if first_tool is None:
            return content, 0
        notes = [{"type": "thinking", "thinking": "[simulated] progress note before the tool call"}]
        content = content[:first_tool] + notes + content[first_tool:]
    else:
        text = "[simulated] thinking summary: deciding the next step" if display == "summarized" else ""
        extra = [{"type": "redacted_thinking"}] if serial % REDACTED_EVERY == REDACTED_EVERY - 1 else []
        content = [{"type": "thinking", "thinking": text}, *extra, *content]
    reasoning = 0 if kind == "between_tools" else 40 + (serial % 5) * 20  # the up-front block carries it
    digest, last_id, signed, total = link(checked.digest, "message:assistant"), checked.last_id, [], 0
    bound_to = {"b": checked.binding[0]} if checked.binding else {}  # thinking after a block is bound to it
    for k, block in enumerate(content):
        if block.get("type") not in SIGNED:
            digest = link(digest, canonical(block))
            signed.append(block)
            continue
        block_id = hashlib.sha256(f"{digest}|{last_id}|{k}|{serial}".encode()).hexdigest()[:16]
        cost = PER_SIGNED_BLOCK + (reasoning if total == 0 else 0)
        fields = {"m": model_id, "p": digest, "pred": last_id, "id": block_id, "n": cost, **bound_to}
        if block["type"] == "thinking":
            signed.append({**block, "signature": seal({**fields, "t": _text_hash(block)})})
        else:
            signed.append({"type": "redacted_thinking", "data": seal(fields)})
        last_id, total = block_id, total + cost
    return signed, total


def check_parameters(body: dict[str, Any], model_id: str, betas: list[str]) -> None:
    """The thinking parameter as the 5.5 models take it (``thinking`` in the API's rules and the digest of
    platform docs: "Adaptive thinking", the Sonnet 5.5 migration guide)."""
    thinking = body.get("thinking")
    if thinking is None:
        return
    if not isinstance(thinking, dict) or not isinstance(thinking.get("type"), str):
        raise invalid("thinking: must be an object with a type")
    kind, sonnet = thinking["type"], "sonnet-5-5" in model_id
    if not preserves_thinking(model_id):
        return
    if kind == "disabled" and sonnet:
        raise invalid('To turn thinking off on this model, send "thinking": {"type": "between_tools"} instead of '
                      '{"type": "disabled"}. The model does not think before responding. The short updates it '
                      "writes between tool calls come back as thinking blocks.")
    if kind in ("disabled", "enabled") and "haiku" not in model_id:
        raise invalid(f'"thinking.type.{kind}" is not supported for this model. Use "thinking.type.adaptive" and '
                      '"output_config.effort" to control thinking behavior.')
    if kind == "between_tools":
        if not sonnet:
            raise invalid('"thinking.type.between_tools" is not supported for this model.')
        extra = sorted(set(thinking) - {"type"})
        if extra:
            raise invalid(f"thinking.{extra[0]}: Extra inputs are not permitted with thinking type between_tools")
    if "block_binding" in thinking and BINDING_BETA not in betas:
        raise invalid("thinking.block_binding: Extra inputs are not permitted")
    if thinking.get("display") == "updates" and UPDATES_BETA not in betas:
        raise invalid("thinking.display: Input should be 'summarized' or 'omitted'")


def cache_settings(body: dict[str, Any], model_id: str) -> str:
    """What of the request's settings the message blocks' cache depends on: tool_choice, the thinking mode and
    effort (the prompt-caching page's table; an explicit default equals none). Display and block_binding are
    not part of it."""
    thinking = body.get("thinking") if isinstance(body.get("thinking"), dict) else {}
    effort = (body.get("output_config") or {}).get("effort") if isinstance(body.get("output_config"), dict) else None
    default_effort = "high" if "sonnet-5-5" in model_id else "medium"
    return canonical({
        "tool_choice": body.get("tool_choice") or {"type": "auto"},
        "thinking": thinking.get("type", "adaptive" if preserves_thinking(model_id) else "off"),
        "effort": effort or default_effort,
    })



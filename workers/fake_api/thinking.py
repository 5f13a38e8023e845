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

Signatures are HMACs with a key of the double's own: they are opaque to baton, as the real ones are.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any

from context.prefix import without_cache_control
from workers.fake_api.rules import invalid

BINDING_BETA = "thinking-binding-controls-2026-08-01"
UPDATES_BETA = "thinking-display-updates-2026-08-18"
SIGNED = ("thinking", "redacted_thinking")
REDACTED_EVERY = 7  # about one reply in this many also carries a redacted_thinking block
_KEY = b"baton fake-api thinking signatures"
MISMATCH = ("{path}: Invalid `signature` in `thinking` block. The block is bound to a different conversation. "
            "Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to \"drop_block\".")
NEEDS_BETA = f" That setting requires the `{BINDING_BETA}` value in the `anthropic-beta` header."
TAMPERED = "{path}: Invalid `signature` in `thinking` block"


def preserves_thinking(model_id: str) -> bool:
    """Models that think by default and run the prefix check (in the double's catalogue: the 5.5 models)."""
    return "-5-5" in model_id


def _canonical(value: Any) -> str:
    return json.dumps(without_cache_control(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _link(digest: str, part: str) -> str:
    return hashlib.sha256(f"{digest}|{part}".encode()).hexdigest()


def _mac(fields: dict[str, Any]) -> str:
    return hmac.new(_KEY, _canonical(fields).encode(), hashlib.sha256).hexdigest()[:32]


def _seal(fields: dict[str, Any]) -> str:
    return base64.b64encode(_canonical({**fields, "mac": _mac(fields)}).encode()).decode()


def _open(sealed: Any) -> dict[str, Any] | None:
    """The fields of a signature (or redacted data) this double sealed, or None when it is not one."""
    try:
        fields = json.loads(base64.b64decode(str(sealed), validate=True))
        mac = fields.pop("mac")
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return fields if isinstance(fields, dict) and hmac.compare_digest(str(mac), _mac(fields)) else None


@dataclass
class Checked:
    """A request's thinking after the check: what was sent back, kept, dropped; where the reply's prefix stands."""

    digest: str  # the content digest after the whole request (thinking aside)
    last_id: str | None  # the last thinking block kept: the reply's first block names it as its predecessor
    sent: int = 0
    redacted_sent: int = 0
    kept: int = 0
    dropped: list[dict[str, str]] = field(default_factory=list)  # input_transformations entries
    messages: list[dict[str, Any]] = field(default_factory=list)  # the messages with dropped blocks removed


def check(body: dict[str, Any], model_id: str, betas: list[str]) -> Checked:
    """Run the prefix check on every thinking block ``body`` sends back (raises the API's 400)."""
    digest = _link("", _canonical({"system": body.get("system"), "tools": body.get("tools") or []}))
    thinking = body.get("thinking") if isinstance(body.get("thinking"), dict) else {}
    binding = (thinking.get("block_binding") or {}).get("prefix_mismatch_behavior")
    drop = binding == "drop_block" and BINDING_BETA in betas
    out = Checked(digest, None)
    for i, message in enumerate(body.get("messages") or []):
        out.digest = _link(out.digest, "message:" + str(message.get("role")))
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        kept_blocks = []
        for j, block in enumerate(blocks):
            if not (isinstance(block, dict) and block.get("type") in SIGNED):
                out.digest = _link(out.digest, _canonical(block))
                kept_blocks.append(block)
                continue
            out.sent += 1
            out.redacted_sent += block["type"] == "redacted_thinking"
            path = f"messages.{i}.content.{j}"
            fields = _open(block.get("signature") if block["type"] == "thinking" else block.get("data"))
            if fields is None or (block["type"] == "thinking" and fields.get("t") != _text_hash(block)):
                raise invalid(TAMPERED.format(path=path))
            # Valid: the content before it is what it was signed under, and its predecessor is the thinking
            # block kept before it, or none was kept (thinking may be dropped from the start).
            if fields.get("p") == out.digest and (out.last_id is None or fields.get("pred") == out.last_id):
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
    """The reply's content with its signed thinking blocks in place, and how many thinking tokens they cost."""
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
    digest, last_id, signed = _link(checked.digest, "message:assistant"), checked.last_id, []
    for k, block in enumerate(content):
        if block.get("type") not in SIGNED:
            digest = _link(digest, _canonical(block))
            signed.append(block)
            continue
        block_id = hashlib.sha256(f"{digest}|{last_id}|{k}|{serial}".encode()).hexdigest()[:16]
        fields = {"m": model_id, "p": digest, "pred": last_id, "id": block_id}
        if block["type"] == "thinking":
            signed.append({**block, "signature": _seal({**fields, "t": _text_hash(block)})})
        else:
            signed.append({"type": "redacted_thinking", "data": _seal(fields)})
        last_id = block_id
    thinking_tokens = 0 if kind == "between_tools" else 40 + (serial % 5) * 20
    return signed, thinking_tokens + 12 * sum(1 for b in signed if b.get("type") in SIGNED)


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
    return _canonical({
        "tool_choice": body.get("tool_choice") or {"type": "auto"},
        "thinking": thinking.get("type", "adaptive" if preserves_thinking(model_id) else "off"),
        "effort": effort or default_effort,
    })



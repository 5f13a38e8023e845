"""The double's signatures: fields sealed with an HMAC of its own key, and the running digests they record.

Thinking signatures (``thinking``) and compaction-block signatures (``compaction``) are both seals:
the base64 of canonical JSON holding the fields and their MAC. They are opaque to baton, as the
real ones are; only the double opens them. This module imports nothing of the double, so the
token count (``counting``) can read what a seal recorded without an import cycle.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from context.prefix import without_cache_control

_KEY = b"baton fake-api thinking signatures"


def canonical(value: Any) -> str:
    """The JSON a digest or MAC runs over: sorted keys, ``cache_control`` left out (moving a marker is no edit)."""
    return json.dumps(without_cache_control(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def link(digest: str, part: str) -> str:
    """One step of a running digest: the prefix so far, then ``part``."""
    return hashlib.sha256(f"{digest}|{part}".encode()).hexdigest()


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _mac(fields: dict[str, Any]) -> str:
    return hmac.new(_KEY, canonical(fields).encode(), hashlib.sha256).hexdigest()[:32]


def seal(fields: dict[str, Any]) -> str:
    return base64.b64encode(canonical({**fields, "mac": _mac(fields)}).encode()).decode()


def open_seal(sealed: Any) -> dict[str, Any] | None:
    """The fields of a signature (or redacted data) this double sealed, or None when it is not one."""
    try:
        fields = json.loads(base64.b64decode(str(sealed), validate=True))
        mac = fields.pop("mac")
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return fields if isinstance(fields, dict) and hmac.compare_digest(str(mac), _mac(fields)) else None


def thinking_cost(block: Any) -> int | None:
    """The thinking tokens a signed thinking or redacted_thinking block cost when it was produced (its seal's
    ``n``), or None for a block this double did not sign. A kept block is billed as input at that count
    ("Preserved thinking": usable blocks stay in context and are billed as input), not at its visible text,
    which is empty under the 5.5 models' default display."""
    if not isinstance(block, dict) or block.get("type") not in ("thinking", "redacted_thinking"):
        return None
    fields = open_seal(block.get("signature") if block["type"] == "thinking" else block.get("data"))
    cost = fields.get("n") if fields else None
    return cost if isinstance(cost, int) else None

"""A ``compaction`` block: sealed when the double writes one, checked when a request sends one back.

The rules (platform docs "Compaction on demand" and "Compaction and preserved thinking", digested in
docs/fake-api.md; error codes from the SDK's ``compaction_*_error_details`` types):

- The block is sent back first: the first block of the first message, a ``user`` or ``assistant`` one
  (``compaction_block_misplaced`` otherwise, or in a ``system`` message). At most one block with content
  (``compaction_block_ambiguous``); a block with null content is a no-op and is removed.
- Its ``content`` and ``signature`` come back exactly as returned (``compaction_content_mismatch``,
  ``compaction_signature_invalid``), with no field the API did not return (a ``model_dump()`` adds
  ``citations: null``: "Extra inputs are not permitted"). Without the beta header the block is not a
  content block type the API knows.
- The API puts the summary where the block stands (``as_read``) and passes every later message unchanged.

The seal records what the docs' conditions for kept thinking need: the digest of ``system`` and
``tools``, the running prefix digest after the summarised messages (``thinking.Checked.digest``), the
role of the last summarised message, the model and whether it preserves thinking, a hash of the summary,
and the blocks it descends from. ``adopt`` turns it into the prefix check's ``thinking.Start``: the
recorded digest when the conditions hold, a digest no kept block was signed under when one fails.
"""

from __future__ import annotations

from typing import Any

from workers.fake_api.rules import ApiError, invalid
from workers.fake_api.seal import link, open_seal, seal, short_hash
from workers.fake_api.thinking import Checked, Start, preserves_thinking, system_tools_digest

COMPACTION_BETA = "compact-2026-09-04"
BLOCK_FIELDS = ("type", "content", "signature", "encrypted_content", "tool_changes", "cache_control")
KNOWN_TYPES = ("'text', 'image', 'document', 'search_result', 'tool_use', 'tool_result', 'thinking', "
               "'redacted_thinking', 'container_upload'")
LINEAGE = 32  # blocks a seal remembers it descends from: thinking bound to an older one is long summarised


class CompactionError(ApiError):
    """A compaction error that carries ``error.details.error_code`` (the docs: "Some also carry an
    ``error.details.error_code`` that starts with ``compaction_``"; parameter errors carry the message only)."""

    def __init__(self, code: str, message: str, status: int = 400, error_type: str = "invalid_request_error"):
        super().__init__(status, error_type, message)
        self.code = code

    def body(self) -> dict[str, Any]:
        body = super().body()
        body["error"]["details"] = {"error_code": self.code}
        return body


def sealed_block(summary: str, raw: dict[str, Any], bound: Checked, model_id: str, serial: int) -> dict[str, Any]:
    """The block a compaction request returns: the summary and a signature over what kept thinking needs."""
    messages = raw.get("messages") or []
    block_id = short_hash(f"{bound.digest}|{summary}|{serial}")
    fields = {
        "k": "compaction",
        "st": system_tools_digest(raw),
        "p": bound.digest,  # continues from an earlier block's start when the request began with one
        "role": str(messages[-1].get("role")) if messages else None,
        "m": model_id,
        "pres": preserves_thinking(model_id),
        "c": short_hash(summary),
        "lin": [block_id, *bound.binding][:LINEAGE],
    }
    return {"type": "compaction", "content": summary, "signature": seal(fields)}


def positions(raw: dict[str, Any]) -> list[tuple[int, int, dict[str, Any]]]:
    """(message index, block index, block) of every compaction block in the request."""
    found = []
    for i, message in enumerate(raw.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            if isinstance(block, dict) and block.get("type") == "compaction":
                found.append((i, j, block))
    return found


def adopt(raw: Any, betas: list[str]) -> tuple[Any, Start | None]:
    """The request with its no-op blocks removed, and where its prefix check starts (None: no block).
    Raises the API's 400 for a block sent back wrong."""
    if not isinstance(raw, dict):
        return raw, None
    found = positions(raw)
    if not found:
        return raw, None
    i, j, _ = found[0]
    if COMPACTION_BETA not in betas:  # the docs: the message "doesn't mention the header"
        raise invalid(f"messages.{i}.content.{j}: Input tag 'compaction' found using 'type' does not match any "
                      f"of the expected tags: {KNOWN_TYPES}")
    for i, j, block in found:
        extra = [key for key in block if key not in BLOCK_FIELDS]
        if extra:
            raise invalid(f"messages.{i}.content.{j}.compaction.{extra[0]}: Extra inputs are not permitted")
        if block.get("content") == "":
            raise invalid(f"messages.{i}.content.{j}.compaction.content: Empty string content is not allowed")
    raw = _without_no_ops(raw)
    found = positions(raw)
    if len(found) > 1:
        raise CompactionError("compaction_block_ambiguous", f"messages: {len(found)} `compaction` blocks with "
                              "content; send only the block the conversation returned last")
    if not found:
        return raw, None
    i, j, block = found[0]
    if (i, j) != (0, 0) or raw["messages"][0].get("role") == "system":
        raise CompactionError("compaction_block_misplaced", f"messages.{i}.content.{j}: a `compaction` block must "
                              "be the first block of the first message; remove the messages it summarizes")
    if task_budget_remaining(raw):
        raise invalid("output_config.task_budget.remaining: not allowed on a request that carries a "
                      "`compaction` block")
    return raw, _start(raw, _opened(block))


def task_budget_remaining(raw: dict[str, Any]) -> bool:
    """Whether ``output_config.task_budget.remaining`` is sent, which a compaction request and a request
    carrying the block may not ("Doing so returns a 400 error")."""
    config = raw.get("output_config")
    budget = config.get("task_budget") if isinstance(config, dict) else None
    return isinstance(budget, dict) and budget.get("remaining") is not None


def _without_no_ops(raw: dict[str, Any]) -> dict[str, Any]:
    """The request without its null-content blocks ("the server treats them as no-ops"), and without a
    message they leave empty."""
    messages = []
    for message in raw.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            messages.append(message)
            continue
        kept = [b for b in content if not (isinstance(b, dict) and b.get("type") == "compaction"
                                           and b.get("content") is None)]
        if kept or not content:
            messages.append({**message, "content": kept} if len(kept) != len(content) else message)
    return {**raw, "messages": messages}


def _opened(block: dict[str, Any]) -> dict[str, Any]:
    fields = open_seal(block.get("signature"))
    if fields is None or fields.get("k") != "compaction":
        raise CompactionError("compaction_signature_invalid", "messages.0.content.0: the `compaction` block's "
                              "`signature` does not verify; send the block exactly as it was returned")
    if fields.get("c") != short_hash(str(block.get("content"))):
        raise CompactionError("compaction_content_mismatch", "messages.0.content.0: the `compaction` block's "
                              "`content` differs from the summary its `signature` recorded")
    if block.get("tool_changes") is not None:  # the double computes none: the block came back without them
        raise CompactionError("compaction_tool_changes_mismatch", "messages.0.content.0: the `compaction` "
                              "block's `tool_changes` differs from what was returned with the block")
    return fields


def _start(raw: dict[str, Any], fields: dict[str, Any]) -> Start:
    """Where the prefix check starts: the recorded digest, changed by each condition for kept thinking that
    fails ("Compaction and preserved thinking"), so the kept turns' blocks fail and the blocks produced
    from now on are bound to the changed digest (the docs: a later request "can use a different `system`,
    different `tools`, or a different model ... Such a change can invalidate the thinking in the kept turns,
    but it has no other effect")."""
    digest, now = fields["p"], system_tools_digest(raw)
    if now != fields.get("st"):
        digest = link(digest, "system or tools changed since the compaction: " + now)
    if not fields.get("pres"):
        digest = link(digest, "summarised by a model without preserved thinking")
    messages = raw["messages"]
    first_kept = messages[0] if len(messages[0]["content"]) > 1 else (messages[1] if len(messages) > 1 else None)
    if first_kept is not None and first_kept.get("role") in (fields.get("role"), "system"):
        # Same role as the last summarised message (or a system message): the API merges the two, so the
        # kept message is no longer the one that followed the summarised ones.
        digest = link(digest, "first kept message merged into the last summarised one")
    return Start(digest, tuple(fields.get("lin") or ()))


def as_read(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the model reads them: "The API puts the summary where the block stands"."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "compaction" for b in content):
            content = [{"type": "text", "text": b["content"]} if b.get("type") == "compaction" else b
                       for b in content]
            message = {**message, "content": content}
        out.append(message)
    return out

"""Which thinking blocks a request may send back: a running fingerprint of what comes before each block.

The Claude 5.5 models sign every ``thinking`` and ``redacted_thinking`` block over its prefix: the
top-level system prompt, the tools, every earlier message and the blocks before it in its own message,
``cache_control`` aside. A block sent back after anything in that prefix changed fails the API's prefix
check (a 400 for accounts created since 2026-08-31, or the block is dropped when the request asks for
``drop_block``). baton rewrites history on purpose (compressed batches, compactions), so it must know
which blocks are still valid before it sends them (docs/agents.md, "Thinking and the prefix").

``PrefixChain`` is a running digest over what a request sends, block by block, in order. When a reply
comes back, ``bind_reply`` stamps each of its signed blocks with the digest of everything before it
(``ThinkingBlock.prefix``, stored in the log, never sent). On the next requests ``PrefixChain.admit``
keeps a signed block only while the digest before it is the one it was stamped with; otherwise the
block is left out, and since leaving it out changes what follows, every later block stamped under the
old prefix is left out too, while blocks produced after the change, under the new prefix, stay valid:
exactly the API's rule. A block whose thinking text holds a secret is left out rather than edited
(an edited text is refused whatever the setting).

Pure: no I/O. The digests are baton's own (sha256 over canonical JSON); they only need to change when
what is sent changes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from context.identity_memo import IdentityMemo
from context.messages import Message, RedactedThinkingBlock, TextBlock, ThinkingBlock, is_signed
from context.redaction import redact

LEFT_OUT = "[baton] (this reply's thinking was left out: the conversation before it changed)"


def _link(digest: str, part: str) -> str:
    return hashlib.sha256(f"{digest}\x00{part}".encode()).hexdigest()[:32]


def static_digest(system: str, tools: list[dict[str, Any]], epoch: int = 0) -> str:
    """The chain's start: the system prompt and the tool definitions (without cache_control), and the
    thinking epoch (raised after the API refused a block: every block stamped before is then left out)."""
    body = json.dumps({"system": system, "tools": without_cache_control(tools), "epoch": epoch}, sort_keys=True,
                      ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def without_cache_control(value: Any) -> Any:
    """``value`` with every ``cache_control`` key removed, at any depth: a breakpoint is part of no prefix."""
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def _withheld_text(block: ThinkingBlock) -> bool:
    return redact(block.thinking) != block.thinking


_WITHHELD = IdentityMemo(_withheld_text, size=8192)  # blocks are frozen and shared between steps


def withheld(block: Any) -> bool:
    """A thinking block whose text held a secret (redacted when it was stored, ``ThinkingBlock.withheld``) or
    would need redaction: it is never sent back, since the API refuses an edited text."""
    return isinstance(block, ThinkingBlock) and (block.withheld or _WITHHELD(block))


@dataclass
class PrefixChain:
    """The digest of a request so far; ``admit`` each message in order. Counts what it sent and left out."""

    digest: str
    sent: int = 0  # signed blocks sent back valid
    left_out: int = 0  # signed blocks left out (prefix changed, or a secret in the text)
    ends: list[str] = field(default_factory=list)  # the digest after each admitted message
    # Leave out every signed block: the request did not fit the window even with tool results trimmed, and
    # kept thinking is billed at its full size (context.assembly). The API accepts a request without them.
    shed: bool = False

    def copy(self) -> PrefixChain:
        return PrefixChain(self.digest, self.sent, self.left_out, list(self.ends), self.shed)

    def admit(self, message: Message) -> Message:
        """``message`` as it may be sent: signed blocks whose prefix changed (or with a secret) left out."""
        if not message.signed_blocks:
            self._close(_end_after(self.digest, message))
            return message
        digest = _link(self.digest, "message:" + message.role)
        kept = []
        for block in message.content:
            if is_signed(block):
                if self.shed or block.prefix != digest or withheld(block):
                    self.left_out += 1
                    continue
                self.sent += 1
            kept.append(block)
            digest = _link(digest, block.digest)
        if len(kept) == len(message.content):
            self._close(digest)
            return message
        if not kept:  # a reply that was thinking only: something must stand in its place
            kept = [TextBlock(text=LEFT_OUT)]
            digest = _link(_link(self.digest, "message:" + message.role), kept[0].digest)
        self._close(digest)
        return Message(role=message.role, content=kept, usage=message.usage)

    def admit_summary(self, message: Message, start: str | None, cut: str | None) -> Message:
        """The API's compaction block (``context.api_compaction``), first in the request: it stands for the
        messages it summarised, so when the request starts as the compacted one did (the same system, tools
        and thinking epoch), the chain goes on from where those messages ended (`cut`) and the kept turns'
        thinking stays valid, as the API's check starts at the block. Otherwise it is a message like any."""
        if cut is not None and not self.ends and self.digest == start:
            self._close(cut)
        else:
            self._close(_end_after(self.digest, message))
        return message

    def admit_all(self, messages: list[Message]) -> list[Message]:
        return [self.admit(m) for m in messages]

    def _close(self, digest: str) -> None:
        self.digest = digest
        self.ends.append(digest)


_ENDS_PER_MESSAGE = 8  # the prefixes one message is sent after: a few between compactions


def _end_after(digest: str, message: Message) -> str:
    """The chain digest after a message without signed blocks (sent whole), given the digest before it."""
    ends = message.chain_ends
    end = ends.get(digest)
    if end is None:
        end = _link(digest, "message:" + message.role)
        for block in message.content:
            end = _link(end, block.digest)
        if len(ends) >= _ENDS_PER_MESSAGE:
            ends.clear()
        ends[digest] = end
    return end


def bind_reply(chain_digest: str, reply: Message) -> tuple[Message, str]:
    """``reply`` with each signed block stamped with the digest before it (the request's chain, then its
    own earlier blocks), and the digest after the whole reply: what the next request's chain must reach
    after this message for it to extend this request exactly."""
    digest = _link(chain_digest, "message:" + reply.role)
    blocks = []
    for block in reply.content:
        if isinstance(block, ThinkingBlock):
            block = ThinkingBlock(thinking=block.thinking, signature=block.signature, prefix=digest,
                                  billed=block.billed)
        elif isinstance(block, RedactedThinkingBlock):
            block = RedactedThinkingBlock(data=block.data, prefix=digest, billed=block.billed)
        blocks.append(block)
        digest = _link(digest, block.digest)
    if not reply.signed_blocks:
        return reply, digest
    return Message(role=reply.role, content=blocks, usage=reply.usage), digest

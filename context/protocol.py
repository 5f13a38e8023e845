"""The request protocol of the Messages API: validation and repair.

Four rules: (1) the request starts with a user message, roles alternate and no
message is empty (an assistant message holding only the API's compaction block may
come first, and whatever follows it is the kept turns, of either role: platform docs,
"Compaction on demand"); (2) each assistant tool_use is answered by a tool_result in
the next user message, results first, each once; (3) the estimated input plus
max_tokens fits the window; (4) a mid-conversation ``system`` message (text only)
stands right after a user message and is the last message or followed by an
assistant message, so it is never the first and never next to another one
(platform docs, "Mid-conversation system messages"). A system message is left out
when rule 1 checks that roles alternate.

`repair` is written as a fold (`Repairer.push`) so the same code serves two
uses: repairing a whole recorded log at once, and keeping the repaired view of
an append-only log up to date one message at a time (`context.history`).
Only the last message of the view is ever rewritten by a push, so a message
keeps its view index once it is in the view.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from context.messages import Message, TextBlock, ToolResultBlock
from context.reminders import reminder

INTERRUPTED = (
    "[baton] This tool call was interrupted before it returned a result, so it did "
    "not complete. Run it again if you still need its result."
)
LEADING_ASSISTANT = "[baton] The conversation log began with an assistant message; this line keeps it valid."


class ProtocolError(ValueError):
    """A request that breaks a rule of the protocol, naming where and which."""

    def __init__(self, index: int, rule: int, detail: str):
        self.index, self.rule, self.detail = index, rule, detail
        super().__init__(f"message {index}: rule {rule} broken: {detail}")


# Rule 4's answers. The first is the API's own wording (seen on a misplaced one); the docs give no text for the
# others, only "returns a 400 error", so these say the documented rule.
SYSTEM_AFTER = ("role 'system' must follow a 'user' message or an 'assistant' message ending in a server "
                "tool result")
SYSTEM_FIRST = "role 'system' cannot be the first message; put instructions for the whole conversation in `system`"
SYSTEM_BEFORE = "role 'system' must be the last message or be followed by an 'assistant' message"
SYSTEM_TWICE = "two 'system' messages in a row; merge them into one message"
SYSTEM_TEXT = "a 'system' message holds text blocks only"


def _system_problems(messages: Sequence[Message], i: int) -> Iterable[ProtocolError]:
    """Rule 4 for the system message at ``i`` (baton sends no server tools, so only a user turn may precede it)."""
    if i == 0:
        yield ProtocolError(i, 4, SYSTEM_FIRST)
    elif messages[i - 1].role == "system":
        yield ProtocolError(i, 4, SYSTEM_TWICE)
    elif messages[i - 1].role != "user":
        yield ProtocolError(i, 4, SYSTEM_AFTER)
    if i + 1 < len(messages) and messages[i + 1].role not in ("assistant", "system"):
        yield ProtocolError(i, 4, SYSTEM_BEFORE)
    if any(not isinstance(b, TextBlock) for b in messages[i].content):
        yield ProtocolError(i, 4, SYSTEM_TEXT)


def _problems(messages: Sequence[Message], allow_pending: bool) -> Iterable[ProtocolError]:
    if not messages:
        yield ProtocolError(0, 1, "the request has no messages; it must start with a user message")
        return
    block_first = leads_with_compaction(messages)
    if messages[0].role == "assistant" and not block_first:
        yield ProtocolError(0, 1, "the first message must have role 'user'")
    expected: list[str] = []  # tool_use ids the next user message must answer
    previous = ""  # the role of the last message that was not a system message
    for i, msg in enumerate(messages):
        if i == 0 and block_first:
            continue  # the summary stands for the summarised messages: the kept turns follow it as they were
        if not msg.content:
            yield ProtocolError(i, 1, "message has empty content")
        if msg.role == "system":
            yield from _system_problems(messages, i)
            continue
        if msg.role == previous:
            yield ProtocolError(i, 1, f"two '{msg.role}' messages in a row; roles must alternate")
        previous = msg.role
        if msg.role == "assistant":
            if expected:
                yield ProtocolError(i, 2, f"tool_use ids {expected} of message {i - 1} were never answered")
            expected = [b.id for b in msg.tool_uses]
            continue
        answered = [r.tool_use_id for r in msg.tool_results]
        for rid in answered:
            if rid not in expected:
                yield ProtocolError(i, 2, f"tool_result {rid!r} answers no tool_use in the preceding assistant message")
        missing = [t for t in expected if t not in answered]
        if missing:
            yield ProtocolError(i, 2, f"tool_use ids {missing} of message {i - 1} are not answered here")
        if len(set(answered)) != len(answered):
            yield ProtocolError(i, 2, "a tool_use id is answered twice")
        n = len(msg.tool_results)
        if any(not isinstance(b, ToolResultBlock) for b in msg.content[:n]):
            yield ProtocolError(i, 2, "tool_result blocks must come before any other block in a user message")
        expected = []
    if expected and not allow_pending:
        yield ProtocolError(len(messages) - 1, 2, f"tool_use ids {expected} at the end are never answered")


def leads_with_compaction(messages: Sequence[Message]) -> bool:
    """The first message is the API's compaction block alone (``context.api_compaction``)."""
    first = messages[0] if messages else None
    return bool(first and first.role == "assistant" and len(first.content) == 1
                and getattr(first.content[0], "type", None) == "compaction")


def problems(messages: Sequence[Message], *, allow_pending: bool = False) -> list[ProtocolError]:
    """Every broken invariant (rules 1 and 2) in order; empty when the messages are valid."""
    return list(_problems(messages, allow_pending))


def validate(
    messages: Sequence[Message],
    *,
    window: int | None = None,
    max_tokens: int = 0,
    estimate: Callable[[Sequence[Message]], int] | None = None,
    allow_pending: bool = False,
) -> None:
    """Raise ProtocolError on the first broken rule of the protocol.

    Rule 3 (the request fits the window) is checked when a window and an
    estimator are given; `allow_pending` accepts an unanswered tool call at the
    very end (a log mid-step, not a request).
    """
    for problem in _problems(messages, allow_pending):
        raise problem
    if window is not None and estimate is not None:
        total = estimate(messages) + max_tokens
        if total > window:
            detail = f"estimated input plus max_tokens is {total}, over the window of {window}"
            raise ProtocolError(len(messages) - 1, 3, detail)


def interrupted_result(tool_use_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content=INTERRUPTED, is_error=True)


def _user_with_results_first(blocks: list) -> Message:
    results = [b for b in blocks if isinstance(b, ToolResultBlock)]
    rest = [b for b in blocks if not isinstance(b, ToolResultBlock)]
    return Message(role="user", content=results + rest)


@dataclass
class Repairer:
    """Folds messages into a protocol-valid view, one at a time.

    Unchanged messages are kept as the same objects (their cached token counts
    and serialisations stay valid); only the last view message is ever replaced.
    """

    view: list[Message] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # tool_use ids still unanswered

    def push(self, msg: Message) -> None:
        if not msg.content:
            return  # an empty message carries nothing and is invalid in a request
        if msg.role == "system":
            self._push_system(msg)
        elif msg.role == "user":
            self._push_user(msg)
        else:
            self._push_assistant(msg)

    def _push_system(self, msg: Message) -> None:
        # baton's view keeps an instruction as user text in the user message it follows, so the view's steps
        # and rounds stay user/assistant pairs (the assembler lays them down by those units); flagged as a
        # reminder, it goes out as a system message again where one may go (context.reminders).
        texts = [reminder(b.text) for b in msg.content if isinstance(b, TextBlock)]
        self._push_user(Message(role="user", content=texts))

    def _push_user(self, msg: Message) -> None:
        kept, changed = [], False
        for block in msg.content:
            if isinstance(block, ToolResultBlock):
                if block.tool_use_id not in self.pending:
                    changed = True  # orphan or duplicate result: it answers nothing
                    continue
                self.pending.remove(block.tool_use_id)
            kept.append(block)
        if not kept:
            return
        if self.view and self.view[-1].role == "user":
            self.view[-1] = _user_with_results_first(list(self.view[-1].content) + kept)
            return
        first_other = next((i for i, b in enumerate(kept) if not isinstance(b, ToolResultBlock)), len(kept))
        in_order = all(not isinstance(b, ToolResultBlock) for b in kept[first_other:])
        self.view.append(msg if not changed and in_order else _user_with_results_first(kept))

    def _push_assistant(self, msg: Message) -> None:
        self.close_pending()
        if not self.view:
            self.view.append(Message(role="user", content=[TextBlock(text=LEADING_ASSISTANT)]))
        if self.view[-1].role == "assistant":
            # The previous assistant message has no tool_use (pending is closed), so
            # appending this one's blocks after it keeps tool_use blocks last.
            merged = list(self.view[-1].content) + list(msg.content)
            self.view[-1] = Message(role="assistant", content=merged, usage=msg.usage)
        else:
            self.view.append(msg)
        self.pending = [b.id for b in self.view[-1].tool_uses]

    def close_pending(self) -> None:
        """Answer every unanswered tool call with an 'interrupted' error result."""
        if not self.pending:
            return
        closing = [interrupted_result(tid) for tid in self.pending]
        self.pending = []
        if self.view[-1].role == "user":
            self.view[-1] = _user_with_results_first(list(self.view[-1].content) + closing)
        else:
            self.view.append(Message(role="user", content=closing))


def repair(messages: Iterable[Message], *, close_pending: bool = True) -> list[Message]:
    """A protocol-valid copy of a log: unanswered calls get an 'interrupted'
    error result, orphan results are dropped, same-role neighbours are merged,
    empty messages vanish and a leading assistant message gets a user line before it."""
    fold = Repairer()
    for msg in messages:
        fold.push(msg)
    if close_pending:
        fold.close_pending()
    return fold.view

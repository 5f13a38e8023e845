"""The derived view of an agent's append-only log, with its step and round index.

The log on disk is never rewritten. `History` folds each appended message into
a protocol-valid view (`context.protocol.Repairer`) and keeps, incrementally,
what assembly needs: where each step and each round starts and running token
sums. Appending costs O(size of the new message); nothing here re-reads or
re-tokenises old messages.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterable

from context.messages import Message
from context.protocol import Repairer
from context.redaction import redact_message


class History:
    """Protocol-valid view of a log plus the indexes assembly reads."""

    def __init__(self, messages: Iterable[Message] = (), *, redact: bool = True):
        self._fold = Repairer()
        self._redact = redact
        self.raw_count = 0  # messages appended to the log (before repair)
        self.step_starts: list[int] = []  # view index of each step's assistant message
        self.round_starts: list[int] = []  # view index of each round's opening user message
        self._token_prefix: list[int] = [0]  # _token_prefix[i] = raw tokens of view[:i]
        for msg in messages:
            self.append(msg)

    @property
    def view(self) -> list[Message]:
        return self._fold.view

    @property
    def pending_tool_ids(self) -> list[str]:
        """Tool calls of the last assistant message that have no result yet."""
        return list(self._fold.pending)

    def __len__(self) -> int:
        return len(self._fold.view)

    def append(self, msg: Message) -> None:
        if self._redact:
            msg = redact_message(msg)  # secrets never enter the view, the requests or summaries
        view = self._fold.view
        before = len(view)
        self._fold.push(msg)
        self.raw_count += 1
        self._reindex(max(0, before - 1))

    def close_pending(self) -> None:
        """Answer unanswered tool calls as interrupted (a crash left them open)."""
        before = len(self._fold.view)
        self._fold.close_pending()
        self._reindex(max(0, before - 1))

    def _reindex(self, start: int) -> None:
        """Refresh the index from view[start:]; only the tail can have changed."""
        view = self._fold.view
        del self._token_prefix[start + 1 :]
        for i in range(start, len(view)):
            self._token_prefix.append(self._token_prefix[-1] + view[i].tokens)
        self.step_starts = self.step_starts[: bisect_left(self.step_starts, start)]
        self.round_starts = self.round_starts[: bisect_left(self.round_starts, start)]
        for i in range(start, len(view)):
            if view[i].role == "assistant":
                self.step_starts.append(i)
            elif i == 0 or not view[i - 1].tool_uses:
                # A user message after an assistant that called no tool opens a round:
                # the previous round ended with that assistant's final answer.
                self.round_starts.append(i)

    def tokens(self, start: int = 0, end: int | None = None) -> int:
        """Raw (uncalibrated) tokens of view[start:end], from running sums."""
        end = len(self._fold.view) if end is None else end
        return self._token_prefix[end] - self._token_prefix[start]

    def step_end(self, start: int) -> int:
        """Exclusive view index where the step starting at `start` ends: after the
        user message carrying its results, if it called tools and they returned."""
        view = self._fold.view
        if view[start].tool_uses and start + 1 < len(view):
            return start + 2
        return start + 1

    def steps_in(self, start: int, end: int | None = None) -> list[int]:
        """Step start indices within view[start:end]."""
        end = len(self._fold.view) if end is None else end
        lo, hi = bisect_left(self.step_starts, start), bisect_left(self.step_starts, end)
        return self.step_starts[lo:hi]

    def rounds_in(self, start: int, end: int | None = None) -> list[int]:
        end = len(self._fold.view) if end is None else end
        lo, hi = bisect_left(self.round_starts, start), bisect_left(self.round_starts, end)
        return self.round_starts[lo:hi]

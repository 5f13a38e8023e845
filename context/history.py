"""The derived view of an agent's append-only log, with its step and round index.

The log on disk is never rewritten. `History` folds each appended message into
a protocol-valid view (`context.protocol.Repairer`) and keeps, incrementally,
what assembly needs: where each step and each round starts and running token
sums. Appending costs O(size of the new message); nothing here re-reads or
re-tokenises old messages.

Log positions and view indices: the k-th message appended is log message k
(numbered from 1, as the agent's log records are). Repair merges neighbours of
the same role, drops messages that carry nothing and inserts synthetic ones, so
view indices are not log positions; `view_index`, `seq_at` and `view_length`
translate between the two for compaction events, which name log positions.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Iterable

from context.messages import Message, TextBlock
from context.protocol import Repairer
from context.redaction import redact_message

#: baton's own notes to the agent (the bridge after a summary, the reminder to hand off) start with this:
#: they never open a task.
NOTE_PREFIX = "[baton]"


def own_text(message: Message) -> str:
    """What a user message says of its own: its text blocks, without tool results and baton's notes."""
    texts = [b.text for b in message.content if isinstance(b, TextBlock) and not b.text.startswith(NOTE_PREFIX)]
    return "\n".join(texts).strip()


class History:
    """Protocol-valid view of a log plus the indexes assembly reads."""

    def __init__(self, messages: Iterable[Message] = (), *, redact: bool = True):
        self._fold = Repairer()
        self._redact = redact
        self.raw_count = 0  # messages appended to the log (before repair)
        self.step_starts: list[int] = []  # view index of each step's assistant message
        self.round_starts: list[int] = []  # view index of each round's opening user message
        self._token_prefix: list[int] = [0]  # _token_prefix[i] = raw tokens of view[:i]
        self._starts: list[int] = []  # per log message: the view index its content starts at
        self._view_lengths: list[int] = []  # per log message: the view length once it was appended
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
        before, last = len(view), (view[-1] if view else None)
        self._fold.push(msg)
        self.raw_count += 1
        self._locate(before, last)
        self._reindex(max(0, before - 1))

    def close_pending(self) -> None:
        """Answer unanswered tool calls as interrupted (a crash left them open)."""
        before = len(self._fold.view)
        self._fold.close_pending()
        if self._view_lengths:  # the closing answers the last log message's calls: it belongs to it
            self._view_lengths[-1] = len(self._fold.view)
        self._reindex(max(0, before - 1))

    def _locate(self, before: int, last: Message | None) -> None:
        """Record where the log message just appended went, given the view's length and last message before it."""
        view = self._fold.view
        if before == 0:
            start = 0  # the first message; a line repair puts before a leading assistant message belongs to it
        elif len(view) > before:
            start = len(view) - 1  # a new view message (an "interrupted" result put before it closes the step before)
        elif view[-1] is not last:
            start = before - 1  # merged into the last view message
        else:
            start = self._starts[-1]  # dropped (empty, or results that answer nothing): it added nothing
        self._starts.append(start)
        self._view_lengths.append(len(view))

    # ---- log positions <-> view indices ------------------------------------------

    def view_index(self, seq: int) -> int:
        """The view index where log message `seq` starts (1-based, as log records are numbered)."""
        self._check_seq(seq, first=1)
        return self._starts[seq - 1]

    def seq_at(self, index: int) -> int:
        """The first log message that starts at view index `index`: the inverse of `view_index`.

        Every view index a compaction can name (the view's start, a step's
        assistant message, a round's opening user message) has one; a synthetic
        "interrupted" result message has none and raises ValueError.
        """
        k = bisect_left(self._starts, index)
        if k == len(self._starts) or self._starts[k] != index:
            raise ValueError(f"no log message starts at view index {index} (the view has {len(self)} messages)")
        return k + 1

    def seqs_at(self, index: int) -> range:
        """The log messages whose content went into view[index] (several when merged; none if synthetic)."""
        return range(bisect_left(self._starts, index) + 1, bisect_right(self._starts, index) + 1)

    def view_length(self, seq: int) -> int:
        """The view's length once log messages 1..`seq` were appended (0 for none)."""
        self._check_seq(seq, first=0)
        return self._view_lengths[seq - 1] if seq else 0

    def _check_seq(self, seq: int, first: int) -> None:
        if not first <= seq <= self.raw_count:
            raise ValueError(f"log message {seq} is not in this history of {self.raw_count} messages")

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

    def latest_opening(self, end: int) -> int | None:
        """The view index of the latest opening before view[end]: a user message that says something of
        its own (the brief, a handoff payload, a human's feedback), whether or not it was merged after
        tool results (a turn that ended with a tool call), and not only baton's notes. Scans back from
        `end`: assembly asks once per compaction event."""
        for i in range(min(end, len(self.view)) - 1, -1, -1):
            if self.view[i].role == "user" and own_text(self.view[i]):
                return i
        return None

    def rounds_in(self, start: int, end: int | None = None) -> list[int]:
        end = len(self._fold.view) if end is None else end
        lo, hi = bisect_left(self.round_starts, start), bisect_left(self.round_starts, end)
        return self.round_starts[lo:hi]

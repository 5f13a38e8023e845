"""The agent's plan brought back into view: a short recap of its current TodoWrite list.

A plan written early in a long round scrolls into the compressed steps, or into a
summary, where the model reads it in its compressed form or not at all. The recap
keeps it in view: it is derived from the last valid TodoWrite call in the log, open
items first (in progress, then pending), one line each, at most ``MAX_OPEN`` of them,
then a count of the completed ones.

It is a new message at the end of the log (``recap_due`` says when), never an edit of
an earlier one: the Claude 5.5 models sign their thinking over everything before it, so
a recap that moved from call to call would invalidate the thinking after it on every
call (docs/agents.md, "Thinking and the prefix"). Once written, later requests carry it
unchanged, like any other message.
"""

from __future__ import annotations

from typing import Any

from context.form_parts import clip_line
from context.history import History

MAX_OPEN = 12  # open items listed; the rest are counted
ITEM_CHARS = 160
STATUSES = ("in_progress", "pending", "completed")  # the TodoWrite tool's (agents/tools/todo.py)
HEADER = "[baton] Your current plan (the last TodoWrite), open items first:"


def current_todos(history: History) -> list[tuple[str, str]] | None:
    """(content, status) of the last TodoWrite whose list the tool accepted; None if there was none."""
    for message in reversed(history.view):
        for use in reversed(message.tool_uses):
            if use.name == "TodoWrite" and (items := _valid(use.input.get("todos"))) is not None:
                return items
    return None


def _valid(todos: Any) -> list[tuple[str, str]] | None:
    """The list as the tool checks it (a refused call changed nothing, so it is skipped)."""
    if not isinstance(todos, list):
        return None
    items = []
    for todo in todos:
        if not isinstance(todo, dict):
            return None
        content, status = todo.get("content"), todo.get("status", "pending")
        if not isinstance(content, str) or not content.strip() or status not in STATUSES:
            return None
        items.append((content.strip(), status))
    return items


def recap(history: History) -> str | None:
    """The recap's text, or None when the agent has no plan (no TodoWrite yet, or an empty list)."""
    items = current_todos(history)
    return recap_of(items) if items else None


def recap_due(history: History, every: int, since: int = 0) -> str | None:
    """The recap to append now, or None: when the plan has open items and has been out of view for
    ``every`` steps (no TodoWrite call and no recap in the last ``every`` steps, counting only what
    lies at or after view index ``since``, where the request's verbatim part starts after a compaction)."""
    items = current_todos(history)
    if not items or all(status == "completed" for _, status in items):
        return None
    steps = 0
    for message in reversed(history.view[since:]):
        if message.role == "assistant":
            if any(use.name == "TodoWrite" for use in message.tool_uses):
                return None if steps < every else recap_of(items)
            steps += 1
        elif any(text.startswith(HEADER) for text in _texts(message)):
            return None if steps < every else recap_of(items)
    return recap_of(items) if steps >= min(every, 1) else None


def _texts(message: Any) -> list[str]:
    return [block.text for block in message.content if getattr(block, "type", None) == "text"]


def recap_of(items: list[tuple[str, str]]) -> str:
    """The recap of a plan: (content, status) pairs."""
    open_items = sorted((i for i in items if i[1] != "completed"), key=lambda i: STATUSES.index(i[1]))
    done = len(items) - len(open_items)
    lines = [HEADER]
    lines += [f"- [{status}] {clip_line(content, ITEM_CHARS)}" for content, status in open_items[:MAX_OPEN]]
    if len(open_items) > MAX_OPEN:
        lines.append(f"- ... and {len(open_items) - MAX_OPEN} more open items")
    if not open_items:
        lines.append("- (no open items)")
    lines.append(f"{done} of {len(items)} completed.")
    return "\n".join(lines)

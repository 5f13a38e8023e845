"""The agent's plan at the end of every request: a short recap of its current TodoWrite list.

A plan written early in a long round scrolls into the compressed steps, or into a
summary, where the model reads it in its compressed form or not at all. The recap
keeps it in view: it is derived from the last valid TodoWrite call in the log (the
log itself never changes), open items first (in progress, then pending), one line
each, at most ``MAX_OPEN`` of them, then a count of the completed ones. It is added as
the last block of the request, after the last cache breakpoint, so it costs its own
tokens on each call and never moves the cached prefix (``Assembled.to_request``).
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

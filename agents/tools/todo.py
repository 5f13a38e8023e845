"""``TodoWrite``: the agent's plan, kept in its tool memory across steps and compactions."""

from __future__ import annotations

from typing import Any, ClassVar

from agents.tools.base import FileTool, ToolContext, ToolInputError, ToolResult, ok

TODO_STATUSES = ("pending", "in_progress", "completed")
# The list ends every request (the context's todo recap), so its size is paid on every call: a plan, not a document.
MAX_TODOS = 100
MAX_TODO_CHARS = 20_000  # the whole list's text: some 5k tokens


class TodoWriteTool(FileTool):
    name = "TodoWrite"
    description = (
        "Replace your todo list with `todos` (the whole list each time). Use it to plan multi-step "
        "work and track progress: mark an item in_progress when you start it and completed as soon "
        "as it is done. The list is kept in your memory across steps and compactions."
    )
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "description": "What to do"},
                        "status": {"type": "string", "enum": list(TODO_STATUSES)},
                    },
                    "required": ["content", "status"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["todos"],
        "additionalProperties": False,
    }

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        todos = tool_input.get("todos")
        if not isinstance(todos, list):
            raise ToolInputError("input 'todos' must be a list of {content, status} objects")
        if len(todos) > MAX_TODOS:
            raise ToolInputError(f"{len(todos)} todos is over the limit of {MAX_TODOS} (the list ends every request); "
                                 "merge items or drop completed ones. The list was not changed")
        items = [self._item(i, t) for i, t in enumerate(todos, start=1)]
        size = sum(len(item["content"]) for item in items)
        if size > MAX_TODO_CHARS:
            raise ToolInputError(f"the todos hold {size:,} characters, over the limit of {MAX_TODO_CHARS:,} (the list "
                                 "ends every request); keep an item to a line and put details in a file. "
                                 "The list was not changed")
        ctx.memory["todos"] = items
        return ok({"todos": items})

    @staticmethod
    def _item(index: int, todo: Any) -> dict[str, str]:
        if not isinstance(todo, dict):
            raise ToolInputError(f"todo #{index} must be an object with 'content' and 'status'")
        content, status = todo.get("content"), todo.get("status", "pending")
        if not isinstance(content, str) or not content.strip():
            raise ToolInputError(f"todo #{index} needs a non-empty 'content' string")
        if status not in TODO_STATUSES:
            raise ToolInputError(f"todo #{index} has status {status!r}; use one of {', '.join(TODO_STATUSES)}")
        return {"content": content.strip(), "status": status}

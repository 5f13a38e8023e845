"""What a domain's toolkit imports from ``tau2.environment.toolkit``: ``ToolType``, ``is_tool`` and a
``ToolKitBase`` whose subclasses know their tools (written by baton; the names and meanings are tau2-bench's).

A tool is a method marked with ``@is_tool(kind)``; ``tools`` maps each name to the bound method, the marked
methods of base classes included, as tau2's toolkit does."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

TOOL_ATTR = "__tool__"
TOOL_TYPE_ATTR = "__tool_type__"


class ToolType(str, Enum):
    READ = "read"
    WRITE = "write"
    THINK = "think"
    GENERIC = "generic"


def is_tool(tool_type: ToolType = ToolType.READ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        setattr(func, TOOL_ATTR, True)
        setattr(func, TOOL_TYPE_ATTR, tool_type)
        return func

    return mark


class ToolKitBase:
    def __init__(self, db: Any = None) -> None:
        self.db = db

    @classmethod
    def tool_names(cls) -> list[str]:
        """The marked methods of this class and its bases, by name."""
        names: dict[str, None] = {}
        for klass in reversed(cls.__mro__):
            for name, member in vars(klass).items():
                target = member.fget if isinstance(member, property) else member
                if getattr(target, TOOL_ATTR, False):
                    names[name] = None
        return list(names)

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        return {name: getattr(self, name) for name in self.tool_names()}

    def has_tool(self, tool_name: str) -> bool:
        return tool_name in self.tool_names()

    def tool_type(self, tool_name: str) -> ToolType:
        return getattr(self.tools[tool_name], TOOL_TYPE_ATTR)

    def use_tool(self, tool_name: str, **kwargs: Any) -> Any:
        if tool_name not in self.tool_names():
            raise ValueError(f"Tool '{tool_name}' not found.")
        return getattr(self, tool_name)(**kwargs)

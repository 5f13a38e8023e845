"""The context engine's strategies by name: what ``Policy.compressor`` and ``Policy.compactor`` may say.

Each name maps to the import path of a class with no constructor arguments,
imported only when chosen: a new strategy is a new file and one line here, and
this module imports nothing from ``context`` (the strategies import the
assembler they serve, so the assembler cannot import them).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

#: Result compressors (layers 4 and 5 of assembly): name -> "module:Class".
COMPRESSORS: dict[str, str] = {
    "per_tool": "context.per_tool_compression:PerToolCompressor",
    "api": "context.api_editing:ApiEditingCompressor",
}

#: Compactors (when and how the context is summarised): name -> "module:Class".
COMPACTORS: dict[str, str] = {
    "summary": "context.compaction:SummaryCompactor",
    "api": "context.api_compaction:ApiCompactor",
}


def check_name(kind: str, name: str, registry: Mapping[str, str]) -> str:
    """`name` if `registry` has it; else a ValueError listing the names it has."""
    if name not in registry:
        raise ValueError(f"unknown {kind} {name!r}; the known {kind}s are: {', '.join(sorted(registry))}")
    return name


def instantiate(kind: str, name: str, registry: Mapping[str, str]) -> Any:
    """A new instance of the `kind` strategy called `name`."""
    module, _, cls = registry[check_name(kind, name, registry)].partition(":")
    return getattr(importlib.import_module(module), cls)()

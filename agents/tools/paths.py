"""Paths the model gives, confined to the scenario folder, and what the agent has seen.

Every path goes through ``ctx.path()``, so nothing leaves the scenario folder (no
``..``, absolute paths or symlinks out of it), and every path in a result is
relative to that folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from agents.tools.base import ToolContext, ToolInputError
from scenarios.store import relative

BINARY_SNIFF_BYTES = 8192


def existing_file(ctx: ToolContext, raw: str) -> tuple[Path, str]:
    """A model-given path that must be an existing regular file."""
    path = ctx.path(raw)
    rel = relative(ctx.root, path)
    if path.is_dir():
        raise ToolInputError(f"{rel} is a directory, not a file; use LS to list it")
    if not path.exists():
        raise ToolInputError(
            f"file not found: {rel}; use LS or Glob to see which files exist "
            "(paths are relative to the scenario folder)"
        )
    return path, rel


def writable(ctx: ToolContext, raw: str) -> tuple[Path, str]:
    """A model-given path the agent may write: not baton's own bookkeeping."""
    path = ctx.path(raw)
    rel = relative(ctx.root, path)
    if rel == "state" or rel.startswith("state/"):
        raise ToolInputError(
            f"{rel} is under state/, which holds the agents' logs and memory and is written by baton only; "
            "write your files elsewhere in the scenario folder (you may still Read state/)"
        )
    if rel == "run.json":
        raise ToolInputError(
            "run.json records the run's phase and status and is written by baton only; it cannot be changed by a tool"
        )
    if rel == ".":
        raise ToolInputError("give a file path, not the scenario folder itself")
    if path.is_dir():
        raise ToolInputError(f"{rel} is a directory; give a file path inside it")
    return path, rel


def directory(ctx: ToolContext, raw: str) -> tuple[Path, str]:
    """A model-given path that must be an existing directory."""
    path = ctx.path(raw)
    rel = relative(ctx.root, path)
    if not path.exists():
        raise ToolInputError(f"directory not found: {rel}; use LS on its parent to see what exists")
    if not path.is_dir():
        raise ToolInputError(f"{rel} is a file, not a directory; use Read to read it")
    return path, rel


def _inside_root(ctx: ToolContext, path: Path) -> bool:
    """True if a symlink found while walking resolves inside the folder."""
    root = ctx.root.resolve()
    target = path.resolve()
    return target == root or root in target.parents


def walk_files(ctx: ToolContext, base: Path) -> Iterator[Path]:
    """Regular files under ``base`` in sorted order; symlinked directories are not
    entered (no cycles, no escapes) and symlinked files only if they stay inside."""
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() and not (_inside_root(ctx, path) and path.is_file()):
                continue
            if path.is_file():
                yield path


def is_binary(path: Path) -> bool:
    with open(path, "rb") as fh:
        return b"\x00" in fh.read(BINARY_SNIFF_BYTES)


def seen_mtimes(ctx: ToolContext) -> dict[str, float]:
    """The mtime of each file as this agent last saw it (its Read, Write or Edit)."""
    return ctx.memory.setdefault("reads", {})


def changed_since_seen(ctx: ToolContext, rel: str, mtime: float) -> bool:
    seen = seen_mtimes(ctx).get(rel)
    return seen is not None and seen != mtime

"""Paths the model gives, confined to the scenario folder, and what the agent has seen.

Every path is split into components (no ``..``, no absolute path) and reached through
``scenarios.confined``: one real directory at a time from the folder's descriptor, no
symlink followed, no hard-linked file read or written, so a folder changed during a
call (a directory swapped for a symlink) never leads outside. Every path in a result is
relative to the folder. Writing is refused where baton or a person keeps what the agents
must not change, and for names that configure a program by being there (``refusal``,
``scenarios.configuring``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from agents.tools.base import ToolContext, ToolInputError
from scenarios import confined
from scenarios.configuring import configuring_part
from scenarios.confined import IsFolder, Missing, Parts
from scenarios.trees import MAX_DEPTH

BINARY_SNIFF_BYTES = 8192

# Files at the top of the scenario folder that a person writes and baton only reads.
PERSON_FILES = {
    "scenario.toml": "the scenario's settings (sandbox, limits, models, target)",
    "brief.md": "the brief the run is for",
    "conventions.md": "the team's rules for this scenario",
}
EVALUATION_FILES = ("report.json", "results.jsonl")  # with traces/: what RunEvaluation writes
# Components of a path the agents may write: below what a copy of an iteration's tools/ walks (scenarios.trees).
MAX_PARTS = MAX_DEPTH


def refusal(parts: Parts) -> str | None:
    """Why the agents may not write ``parts``, or None when they may."""
    rel, top = confined.shown(parts), parts[0] if parts else ""
    if not parts:
        return "give a file path, not the scenario folder itself"
    if top == "state":
        return (f"{rel} is under state/, which holds the agents' logs and memory and is written by baton only; "
                "write your files elsewhere in the scenario folder (you may still Read state/)")
    if parts == ("run.json",):
        return ("run.json records the run's phase and status and is written by baton only; "
                "it cannot be changed by a tool")
    if len(parts) == 1 and top.casefold() in PERSON_FILES:
        return (f"{rel} is a person's setting ({PERSON_FILES[top.casefold()]}); baton reads it and no agent may change "
                "it. You may Read it; if it should change, say so in your handoff")
    if top == "handoffs":
        return (f"{rel} is under handoffs/, written only by SubmitHandoff and by a person's approve or reject; "
                "end your turn with SubmitHandoff")
    evaluated = len(parts) >= 3 and (parts[2] == "traces" or (len(parts) == 3 and parts[2] in EVALUATION_FILES))
    if top == "execution_outputs" and evaluated:
        return (f"{rel} is written by RunEvaluation only (its report, results and traces are computed, not edited); "
                "change the tools, checkers or samples and run RunEvaluation again")
    if len(parts) > MAX_PARTS:
        return (f"{rel} is {len(parts)} folders deep; paths in a scenario folder go at most {MAX_PARTS} deep (every "
                "copy of a folder stops there)")
    if why := configuring_part(parts):
        return (f"{rel}: {why}. No file in a scenario folder may configure a program baton or a person runs there; "
                "put settings in a file of another name and pass them explicitly")
    return None


def components(raw: str) -> tuple[Parts, str]:
    parts = confined.split(raw)
    return parts, confined.shown(parts)


def writable(ctx: ToolContext, raw: str) -> tuple[Parts, str, os.stat_result | None]:
    """A model-given path the agent may write, and what is there now (None: nothing)."""
    parts, rel = components(raw)
    if reason := refusal(parts):
        raise ToolInputError(reason)
    st = confined.lstat(ctx.root, parts)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ToolInputError(f"{rel} is a directory; give a file path inside it")
    if st is not None:
        confined.check_regular(st, rel)
    return parts, rel, st


@contextmanager
def opened(ctx: ToolContext, raw: str) -> Iterator[tuple[BinaryIO, str, os.stat_result]]:
    """A model-given path that must be an existing regular file, open for reading, with its stat."""
    parts, rel = components(raw)
    try:
        with confined.open_file(ctx.root, parts) as (fd, st), os.fdopen(os.dup(fd), "rb") as fh:
            yield fh, rel, st
    except IsFolder:
        raise ToolInputError(f"{rel} is a directory, not a file; use LS to list it") from None
    except Missing:
        raise ToolInputError(
            f"file not found: {rel}; use LS or Glob to see which files exist "
            "(paths are relative to the scenario folder)"
        ) from None


def existing(ctx: ToolContext, raw: str, missing: str) -> tuple[Parts, str, bool]:
    """A model-given path to a file or folder that exists and is no symlink, and whether it is a folder.
    ``missing`` is the error when nothing is there ({rel} is filled in)."""
    parts, rel = components(raw)
    st = confined.lstat(ctx.root, parts)
    if st is None:
        raise ToolInputError(missing.format(rel=rel))
    if stat.S_ISLNK(st.st_mode):
        raise ToolInputError(confined.symlink_message(rel))
    return parts, rel, stat.S_ISDIR(st.st_mode)


def directory(ctx: ToolContext, raw: str) -> tuple[Parts, str]:
    """A model-given path that must be an existing directory."""
    parts, rel, is_dir = existing(ctx, raw, "directory not found: {rel}; use LS on its parent to see what exists")
    if not is_dir:
        raise ToolInputError(f"{rel} is a file, not a directory; use Read to read it")
    return parts, rel


def walk_files(ctx: ToolContext, base: Parts) -> Iterator[Parts]:
    """Files under ``base`` in sorted order, reached without following any symlink."""
    return confined.walk(ctx.root, base)


def is_binary(fh: BinaryIO) -> bool:
    """Whether the open file holds a NUL byte in its first bytes; leaves it at the start."""
    fh.seek(0)
    binary = b"\x00" in fh.read(BINARY_SNIFF_BYTES)
    fh.seek(0)
    return binary


def seen_mtimes(ctx: ToolContext) -> dict[str, float]:
    """The mtime of each file as this agent last saw it (its Read, Write or Edit)."""
    return ctx.memory.setdefault("reads", {})


def changed_since_seen(ctx: ToolContext, rel: str, mtime: float) -> bool:
    seen = seen_mtimes(ctx).get(rel)
    return seen is not None and seen != mtime

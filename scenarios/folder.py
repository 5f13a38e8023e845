"""A scenario folder as the rest of baton reads and writes it: every access through ``scenarios.confined``.

Everything a model wrote is hostile to every part of baton, not only to the agents' file tools: a
symlink planted where run.json, a report or a log should be, a FIFO in place of a result, a 10 GB
file. So the loop, the steps, status, rebuild, evaluate, export and try all go through this one door
(a structure test says nothing else opens a scenario path). It takes paths as ``Layout`` spells them
(absolute, under the folder) or relative ones, and for each:

- opens beneath the folder's descriptor, never following a link (``openat2`` where the kernel has it);
- reads regular files only, non-blocking and checked with ``fstat``, each read bounded;
- writes atomically (a temp file beside the target, renamed there) or appends with fsync, under the
  writer's lease when it has one, as ``scenarios.store`` always did.

A link, a FIFO or a device where a file should be reads as unusable (``confined.Refused``: callers
treat it as a damaged file and say so) and is never followed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scenarios import confined, trees
from scenarios.confined import READ_LIMIT, Missing, Refused
from scenarios.lease import Lease
from scenarios.store import AGENTS, JsonlRead, StoreError, json_text, load_json, parse_jsonl

PathLike = Path | str
EVERY = ("file", "folder", "link", "special")  # every kind of entry: for counting or moving what is there
# What one record baton reads whole may take: a report, a handoff, settings, a sample. Kilobytes in practice;
# the bound is what keeps a planted 10 GB file from being read into memory.
RECORD_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Folder:
    """The scenario folder at ``root`` (baton's own path: it is opened as given, and everything below it is
    reached without following links)."""

    root: Path

    def parts(self, path: PathLike) -> confined.Parts:
        """``path`` as components below the folder: an absolute path under it, or a relative one."""
        if isinstance(path, Path) and path.is_absolute():
            return confined.parts_under(self.root, path)
        return confined.split(str(path)) if str(path) not in ("", ".") else ()

    # ---- what is there ------------------------------------------------------------

    def kind(self, path: PathLike) -> str | None:
        """"file", "folder", "link", "special" or None (nothing there), never following a link."""
        return confined.kind(self.root, self.parts(path))

    def is_file(self, path: PathLike) -> bool:
        return self.kind(path) == "file"

    def is_dir(self, path: PathLike) -> bool:
        return self.kind(path) == "folder"

    def exists(self, path: PathLike) -> bool:
        """Something is at ``path`` (a link or a special file counts: it is there, just unusable)."""
        return self.kind(path) is not None

    def mtime(self, path: PathLike) -> float | None:
        """When the file or folder at ``path`` last changed; None for nothing, a link or a special file."""
        try:
            st = confined.lstat(self.root, self.parts(path))
        except confined.Refused:
            return None  # a link on the way there
        return st.st_mtime if st is not None and (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)) else None

    def names(self, path: PathLike, pattern: str = "*", *, kinds: tuple[str, ...] = ("file", "folder")) -> list[str]:
        """The names in the folder ``path`` matching ``pattern`` whose entries are of ``kinds`` (links and
        special files are left out unless asked for), sorted; [] when it is not a real folder."""
        try:
            found = confined.entries(self.root, self.parts(path))
        except (Missing, Refused, NotADirectoryError, FileNotFoundError):
            return []
        wanted = []
        for entry in found:
            if not fnmatch.fnmatchcase(entry.name, pattern):
                continue
            if entry.is_dir(follow_symlinks=False):
                what = "folder"
            elif entry.is_file(follow_symlinks=False):
                what = "file"
            else:
                what = "link" if entry.is_symlink() else "special"
            if what in kinds:
                wanted.append(entry.name)
        return wanted

    def iterations(self, path: PathLike) -> list[int]:
        """The numbers n of the real ``iteration_<n>`` folders in ``path`` (execution_outputs/, handoffs/), sorted."""
        names = self.names(path, "iteration_*", kinds=("folder",))
        return sorted(int(suffix) for name in names if (suffix := name.removeprefix("iteration_")).isdigit())

    def glob(self, path: PathLike, pattern: str, *, kinds: tuple[str, ...] = ("file", "folder")) -> list[Path]:
        """``names`` as absolute paths under the folder (one level: no '**')."""
        base = Path(self.root, *self.parts(path))
        return [base / name for name in self.names(path, pattern, kinds=kinds)]

    # ---- reading ------------------------------------------------------------------

    def read_bytes(self, path: PathLike, limit: int = READ_LIMIT) -> bytes:
        """The regular file's bytes (Missing, Refused, TooLarge: a StoreError saying which)."""
        return confined.read_bytes(self.root, self.parts(path), limit=limit)

    def read_text(self, path: PathLike, limit: int = READ_LIMIT) -> str:
        raw = self.read_bytes(path, limit)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StoreError(f"{confined.shown(self.parts(path))} is not UTF-8 text ({exc})") from None

    def read_text_or(self, path: PathLike, default: str = "", limit: int = READ_LIMIT) -> str:
        """The text, or ``default`` when nothing (or nothing usable) is there."""
        try:
            return self.read_text(path, limit)
        except StoreError:
            return default

    def read_json(self, path: PathLike, what: str, limit: int = READ_LIMIT) -> Any:
        """A JSON file, or a StoreError naming the file and what to do."""
        rel = confined.shown(self.parts(path))
        try:
            raw = self.read_bytes(path, limit)
        except Missing:
            raise StoreError(f"{what} not found at {rel}") from None
        except Refused as exc:
            raise StoreError(f"{what} at {rel} cannot be read: {exc}; remove it (baton writes it again)") from None
        try:
            return load_json(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StoreError(f"{what} at {rel} is not valid JSON ({exc}); fix or delete the file") from None

    def read_json_or_none(self, path: PathLike, limit: int = READ_LIMIT) -> Any:
        """The parsed JSON, or None when it is missing, unusable or not JSON (for optional files)."""
        try:
            return load_json(self.read_bytes(path, limit))
        except (StoreError, UnicodeDecodeError, ValueError):
            return None

    def read_jsonl(self, path: PathLike, limit: int = READ_LIMIT) -> JsonlRead:
        """All records of a ``.jsonl`` file (none when it is missing); unparsable lines are reported. A link or
        special file in its place is refused (StoreError), never followed."""
        try:
            raw = self.read_bytes(path, limit)
        except Missing:
            return JsonlRead()
        return parse_jsonl(raw)

    # ---- writing ------------------------------------------------------------------

    def write_atomic(self, path: PathLike, data: str | bytes, lease: Lease | None = None) -> None:
        confined.write_atomic(self.root, self.parts(path), data, lease)

    def write_json(self, path: PathLike, value: Any, lease: Lease | None = None) -> None:
        self.write_atomic(path, json_text(value), lease)

    def append_jsonl(self, path: PathLike, record: Any, lease: Lease | None = None) -> None:
        """Append one record as a line and fsync (a torn line left by a crash is ended first)."""
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
        if "\n" in line:  # json.dumps escapes newlines; this guards the one-line invariant
            raise StoreError("a JSONL record must serialise to one line")
        confined.append_line(self.root, self.parts(path), line.encode("utf-8") + b"\n", lease)

    def remove(self, path: PathLike, lease: Lease | None = None) -> None:
        """Delete the file (or link) at ``path`` if there is one; a link is removed, never followed."""
        confined.unlink(self.root, self.parts(path), lease)

    def remove_empty_folder(self, path: PathLike) -> bool:
        """Remove the folder ``path`` if it is empty (by its parent's descriptor); whether it was removed."""
        return confined.remove_empty_folder(self.root, self.parts(path))

    def remove_tree(self, path: PathLike) -> list[str]:
        """Delete the folder ``path`` and all below it, by descriptor (links are removed, never entered)."""
        return trees.remove_tree(self.root, self.parts(path))

    def copy_tree(self, path: PathLike, dest: Path, *, skip: Any = None, limit_bytes: int = trees.COPY_LIMIT,
                  max_entries: int = trees.MAX_ENTRIES) -> list[str]:
        """Regular files and folders of ``path`` into ``dest``; what was refused (``trees.copy_tree``)."""
        return trees.copy_tree(self.root, self.parts(path), dest, skip=skip or (lambda _: False),
                               limit_bytes=limit_bytes, max_entries=max_entries)


def of(path: Path) -> Folder:
    """The folder of a scenario root given as a path (resolved once: baton's own path)."""
    return Folder(Path(os.path.abspath(path)))


def scenario_folders(scenarios_dir: Path, marker: str = "scenario.toml") -> list[Path]:
    """The real folders in ``scenarios_dir`` that hold a regular file ``marker``, sorted (a link is no scenario)."""
    every = Folder(Path(scenarios_dir))
    if every.kind("") != "folder":
        return []
    names = every.names("", kinds=("folder",))
    return [every.root / name for name in names if Folder(every.root / name).is_file(marker)]


def of_state(path: Path) -> Folder:
    """The scenario folder of a path ``Layout`` made under ``<root>/state/<agent>/`` (logs, events, agent.json):
    the root is the parent of the last ``state/<agent>`` pair on the path."""
    parts = Path(os.path.abspath(path)).parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "state" and parts[i + 1] in AGENTS:
            return Folder(Path(*parts[:i]))
    raise StoreError(f"{path} is not under a scenario's state/<agent>/ folder")

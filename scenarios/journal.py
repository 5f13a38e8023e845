"""How a tool call writes files: fenced by the step's lease, and undoable until its result is archived.

A step archives each tool call's result (``tool_results/<id>.txt``) once the call
returned; a crash before that means the call runs again. Running it again must
start from the state it first saw, or its result differs (Write says "updated"
instead of "created", Edit no longer finds its old text, the evaluation counts
one more run). So every file a tool call writes or removes goes through its
``Journal``: before the first change to a path, its previous content (or its
absence) is saved under ``state/<agent>/journal/<tool_use_id>/`` and fsynced; the
change follows. When the result is archived the journal is dropped; when the
step finds a journal and no archived result, it rolls the files back first and
runs the call again on exactly what it first saw.

``FileWriter`` is the one interface tools write through; ``Direct`` is the
journal-less form (a lease, or nothing) for callers outside a step. Both write
the scenario folder's files through ``scenarios.confined`` when they know the
folder: reached by descriptor, never through a symlink, the temp file beside
the target.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from scenarios import confined
from scenarios.lease import Lease
from scenarios.store import append_jsonl, json_text, landing, read_jsonl, remove, write_atomic


class FileWriter(Protocol):
    def write(self, path: Path, data: str | bytes) -> None: ...

    def unlink(self, path: Path) -> None: ...


@dataclass(frozen=True)
class Direct:
    """Writes that land at once (under ``lease`` when given), with no undo; confined to ``root`` when given."""

    lease: Lease | None = None
    root: Path | None = None

    def write(self, path: Path, data: str | bytes) -> None:
        if self.root is None:
            write_atomic(path, data, self.lease)
        else:
            confined.write_atomic(self.root, confined.parts_under(self.root, path), data, self.lease)

    def unlink(self, path: Path) -> None:
        if self.root is None:
            remove(path, self.lease)
        else:
            confined.unlink(self.root, confined.parts_under(self.root, path), self.lease)


@dataclass
class Journal:
    """The undo log of one tool call of the scenario at ``root``, in ``folder``
    (``state/<agent>/journal/<tool_use_id>``). Paths are kept relative to ``root``, so a
    folder mounted elsewhere (another host) rolls back the same files."""

    root: Path
    folder: Path
    lease: Lease | None = None
    _saved: set[str] = field(default_factory=set)

    @property
    def manifest(self) -> Path:
        return self.folder / "manifest.jsonl"

    def write(self, path: Path, data: str | bytes) -> None:
        parts = confined.parts_under(self.root, path)
        self._before(parts)
        confined.write_atomic(self.root, parts, data, self.lease)

    def unlink(self, path: Path) -> None:
        parts = confined.parts_under(self.root, path)
        self._before(parts)
        confined.unlink(self.root, parts, self.lease)

    def _before(self, parts: confined.Parts) -> None:
        """Save what ``root/parts`` holds now, once per call, durably, before it changes."""
        key = confined.shown(parts)
        if key in self._saved:
            return
        saved, mtime_ns = None, None
        st = confined.lstat(self.root, parts)
        if st is not None:  # a file of this folder alone (a symlink or a hard link is refused, never read)
            with confined.open_file(self.root, parts) as (fd, st), open(os.dup(fd), "rb") as fh:
                saved, mtime_ns = f"{len(self._saved)}.before", st.st_mtime_ns
                write_atomic(self.folder / saved, fh.read(), self.lease)
        # The modification time too: the Read and Write tools compare it to tell the agent about outside edits.
        append_jsonl(self.manifest, {"path": key, "saved": saved, "mtime_ns": mtime_ns}, self.lease)
        self._saved.add(key)

    def rollback(self) -> int:
        """Put every path this call changed back as it was (newest change first); returns how many."""
        entries = read_jsonl(self.manifest).records  # a torn last line: that change never happened
        for entry in reversed(entries):
            parts = confined.split(entry["path"])
            if entry["saved"] is None:
                confined.unlink(self.root, parts, self.lease)
            else:
                before = (self.folder / entry["saved"]).read_bytes()
                confined.write_atomic(self.root, parts, before, self.lease, mtime_ns=entry["mtime_ns"])
        self.drop()
        return len(entries)

    def keep_memory(self, memory: dict[str, Any]) -> None:
        """The tools' memory after the call, kept until the step has saved it with the call's result."""
        write_atomic(self.folder / "memory.json", json_text(memory), self.lease)

    def kept_memory(self) -> dict[str, Any] | None:
        path = self.folder / "memory.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def drop(self) -> None:
        """Forget the undo log: the call's result is archived, its changes stand."""
        if self.folder.exists():
            with landing(self.lease, self.folder):
                shutil.rmtree(self.folder, ignore_errors=True)
                try:
                    self.folder.parent.rmdir()  # journal/ itself, when no other call's log is left
                except OSError:
                    pass
        self._saved.clear()


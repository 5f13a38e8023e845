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
the scenario folder's files through ``scenarios.confined``, the one way into it:
reached by descriptor, never through a symlink, the temp file beside the target.
The journal's own files, in ``state/``, go the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from scenarios import confined
from scenarios.folder import Folder
from scenarios.lease import Lease
from scenarios.store import json_text, landing


class FileWriter(Protocol):
    def write(self, path: Path, data: str | bytes) -> None: ...

    def unlink(self, path: Path) -> None: ...


@dataclass(frozen=True)
class Direct:
    """Writes that land at once (under ``lease`` when given), with no undo, confined to the scenario folder
    ``root`` like every write (there is no unconfined form: ``baton evaluate`` once wrote traces through a
    planted symlink with one)."""

    root: Path
    lease: Lease | None = None

    def write(self, path: Path, data: str | bytes) -> None:
        confined.write_atomic(self.root, confined.parts_under(self.root, path), data, self.lease)

    def unlink(self, path: Path) -> None:
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
            with confined.open_file(self.root, parts) as (fd, st):
                saved, mtime_ns = f"{len(self._saved)}.before", st.st_mtime_ns
                self._own.write_atomic(self.folder / saved, confined.read_bounded(fd, st, key, confined.READ_LIMIT),
                                       self.lease)
        # The modification time too: the Read and Write tools compare it to tell the agent about outside edits.
        self._own.append_jsonl(self.manifest, {"path": key, "saved": saved, "mtime_ns": mtime_ns}, self.lease)
        self._saved.add(key)

    def rollback(self) -> int:
        """Put every path this call changed back as it was (newest change first); returns how many."""
        entries = self._own.read_jsonl(self.manifest).records  # a torn last line: that change never happened
        for entry in reversed(entries):
            parts = confined.split(entry["path"])
            if entry["saved"] is None:
                confined.unlink(self.root, parts, self.lease)
            else:
                before = self._own.read_bytes(self.folder / entry["saved"])
                confined.write_atomic(self.root, parts, before, self.lease, mtime_ns=entry["mtime_ns"])
        self.drop()
        return len(entries)

    def keep_memory(self, memory: dict[str, Any]) -> None:
        """The tools' memory after the call, kept until the step has saved it with the call's result."""
        self._own.write_atomic(self.folder / "memory.json", json_text(memory), self.lease)

    def kept_memory(self) -> dict[str, Any] | None:
        path = self.folder / "memory.json"
        return self._own.read_json(path, "a tool call's kept memory") if self._own.exists(path) else None

    def pending(self) -> bool:
        """Whether this call's undo log is on disk (a crash left it, or the call is running)."""
        return self._own.is_dir(self.folder)

    def drop(self) -> None:
        """Forget the undo log: the call's result is archived, its changes stand."""
        if self._own.exists(self.folder):
            with landing(self.lease, self.folder):
                self._own.remove_tree(self.folder)
                self._own.remove_empty_folder(self.folder.parent)  # journal/ itself, when no other call's log is left
        self._saved.clear()

    @property
    def _own(self) -> Folder:
        """The journal's own files, under state/: through the same way in as the files it guards."""
        return Folder(self.root)


"""House rules for every scenario a team builds: ``CONVENTIONS.md``.

An optional ``CONVENTIONS.md`` in the scenarios folder (naming, data formats, the tone
of policies: what every scenario of the team shares) and an optional one in a
scenario's own folder go to both agents in the static layer, after the system
prompt: never trimmed, cached with the rest of the prefix. A file is read again only
when its modification time or size changes; when the text changes, the prefix changes
once, and the step says so in the agent's events. A missing file is simply absent; one
that cannot be used (unreadable, not UTF-8, a folder, too long to send on every call)
is an error that names it and says what to do.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

from agents.config import ConfigError
from scenarios import confined
from scenarios.folder import Folder
from scenarios.store import StoreError

FILE = "CONVENTIONS.md"
MAX_CHARS = 20_000  # sent on every call of both agents: a longer file is refused, not cut


class ConventionsError(ConfigError):
    """A CONVENTIONS.md that exists but cannot be used; the message names it and what to do."""


@dataclass(frozen=True)
class Conventions:
    """The conventions in force for one scenario: (label, text) per file, outermost first."""

    parts: tuple[tuple[str, str], ...] = ()

    @property
    def text(self) -> str:
        """What the system prompt gets after it, or "" when there are none."""
        if not self.parts:
            return ""
        sections = [f'<conventions source="{label}">\n{text.strip()}\n</conventions>' for label, text in self.parts]
        return "\n\n".join(["The team's conventions for its scenarios (follow them in everything you write):",
                            *sections])

    @property
    def fingerprint(self) -> str | None:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16] if self.parts else None

    @property
    def sources(self) -> str:
        return ", ".join(label for label, _ in self.parts) or "none"


_read: dict[Path, tuple[int, int, str]] = {}  # path -> (mtime_ns, size, text): reread only when they change
_read_lock = threading.Lock()


def conventions_for(root: Path) -> Conventions:
    """The conventions of the scenario in ``root``: its scenarios folder's file, then its own."""
    root = Path(root)
    found = []
    for path, label in ((root.parent / FILE, f"{root.parent.name}/{FILE}"), (root / FILE, f"{root.name}/{FILE}")):
        text = _text(path)
        if text is not None and text.strip():
            found.append((label, text))
    return Conventions(tuple(found))


def _text(path: Path) -> str | None:
    """The file's text, through the one way into its folder (no link followed, bounded), cached by mtime and size."""
    folder = Folder(path.parent)
    try:
        stat = confined.lstat(folder.root, (path.name,))
    except (FileNotFoundError, StoreError):
        return None
    except OSError as exc:
        raise ConventionsError(f"{path} cannot be read ({exc.strerror}): fix its permissions or remove it") from None
    if stat is None:
        return None
    if folder.kind(path.name) == "folder":
        raise ConventionsError(f"{path} is a folder; conventions go in a file of that name: remove or rename it")
    with _read_lock:
        cached = _read.get(path)
        if cached is not None and cached[:2] == (stat.st_mtime_ns, stat.st_size):
            return cached[2]
    try:
        text = folder.read_bytes(path.name, limit=4 * MAX_CHARS + 4).decode("utf-8")
    except PermissionError:
        raise ConventionsError(f"{path} cannot be read (permission denied): make it readable "
                               "(chmod a+r) or remove it") from None
    except confined.TooLarge:
        raise ConventionsError(f"{path} is larger than the {MAX_CHARS:,} characters that both agents can be sent "
                               "on every call; shorten it (link to longer documents instead)") from None
    except StoreError as exc:
        raise ConventionsError(f"{path} cannot be read: {exc}; replace it with a plain file") from None
    except UnicodeDecodeError as exc:
        raise ConventionsError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}): "
                               "save it as UTF-8") from None
    if len(text) > MAX_CHARS:
        raise ConventionsError(f"{path} has {len(text):,} characters, over the {MAX_CHARS:,} that both agents can "
                               "be sent on every call; shorten it (link to longer documents instead)")
    with _read_lock:
        _read[path] = (stat.st_mtime_ns, stat.st_size, text)
    return text

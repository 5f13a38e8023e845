"""@file mentions in what a human writes to the agents: the brief and a rejection's feedback.

``@design/business_rules.md`` (a path relative to the scenario folder) or, for a path
with spaces or quotes of its own, ``@"design/my rules.md"``. When the message is
written to Init's log, a short note is appended to it, so every later request
carries it: read these files first. A mention of a file that does not exist, or of a
path that leaves the scenario folder (absolute, ``..``, a symlink out), is listed as
such and never followed. An unquoted mention must look like a path (hold a ``/`` or a
``.``), so e-mail addresses and @handles are not mentions.
"""

from __future__ import annotations

import re
from pathlib import Path

from scenarios.folder import Folder
from scenarios.store import StoreError

# Not after a word character, a dot or another @: "ana@example.com" mentions nothing.
MENTION = re.compile(r"""(?<![\w.@])@(?:"([^"\n]+)"|'([^'\n]+)'|([^\s"'`<>()\[\]{},;|]+))""")
TRAILING = ".,:;!?"  # sentence punctuation after an unquoted mention is not part of it
MAX_MENTIONS = 20


def find_mentions(text: str) -> list[str]:
    """The mentioned paths in order of appearance, each once."""
    found: list[str] = []
    for match in MENTION.finditer(text):
        quoted = match.group(1) or match.group(2)
        path = quoted if quoted is not None else match.group(3).rstrip(TRAILING)
        if quoted is None and "/" not in path and "." not in path:
            continue  # @alice, @here: a handle, not a file
        if path.strip() and path not in found:
            found.append(path)
    return found[:MAX_MENTIONS]


def mention_note(root: Path, text: str | None) -> str | None:
    """The note to append to a human's message that mentions files, or None when it mentions none."""
    paths = find_mentions(text or "")
    if not paths:
        return None
    read, missing, outside = [], [], []
    for path in paths:
        try:
            kind = Folder(Path(root)).kind(path)
        except StoreError:
            outside.append(path)
            continue
        if kind == "folder":
            read.append(f"{path} (a folder: list it with LS)")
        elif kind == "file":
            read.append(path)
        elif kind is None:
            missing.append(path)
        else:  # a link or a special file: the file tools would refuse it too
            outside.append(path)
    lines = ["[baton] This message mentions files of the scenario."]
    if read:
        lines += ["Read them first (paths relative to the scenario folder):", *(f"- {p}" for p in read)]
    if missing:
        lines.append("Mentioned but not found, so there is nothing to read: " + ", ".join(missing))
    if outside:
        lines.append("Not followed, outside the scenario folder: " + ", ".join(outside))
    return "\n".join(lines)

"""Append-only JSONL files read again without parsing again.

Every step loads its agent's whole log and events (``agents.disk``): a run of n
steps parses O(n²) records, and at a hundred scenarios per worker process that
parsing, with its validation, was a tenth of the process's CPU. The files only
grow, so a process keeps what it parsed from each one, up to the end of its
last complete line, with a digest of those bytes. A read hashes that prefix and,
when it is unchanged, parses only the lines after it.

Nothing is trusted that the bytes do not prove: a file rewritten, truncated or
edited anywhere (by a human, a test, another host) fails the digest and is
parsed whole, exactly as ``scenarios.store.parse_jsonl`` would. A torn last line
is never kept: it is parsed on every read until a newline ends it.

Items are shared between reads, so a parser must return objects nobody mutates
(frozen models). What a process keeps is bounded (``MAX_BYTES`` of file per
cache, least recently read dropped first).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from scenarios.confined import Missing
from scenarios.folder import Folder

T = TypeVar("T")
# Of file content per cache; parsed, it takes about 4x that in memory. The example's logs end at about
# 170 KB (execute) and 80 KB (init), so this holds a worker's share of a hundred scenarios and more.
MAX_BYTES = 32 * 2**20


class Problem(str):
    """What a parser returns for a record it cannot take: the sentence that reports it."""


@dataclass
class Parsed(Generic[T]):
    """A file's records as parsed items, with the problems ``read_jsonl`` plus the parser would report."""

    items: list[T] = field(default_factory=list)
    record_problems: list[str] = field(default_factory=list)  # records that are JSON but the parser refused
    bad_lines: list[tuple[int, str]] = field(default_factory=list)  # lines that are not JSON (number, start)
    torn_tail: bool = False

    def copy(self) -> Parsed[T]:
        """A copy whose lists a caller may change: what a cache keeps is shared by every read."""
        return Parsed(list(self.items), list(self.record_problems), list(self.bad_lines), self.torn_tail)

    @property
    def line_problems(self) -> list[str]:
        return [f"line {n}: not valid JSON ({text!r}); ignored" for n, text in self.bad_lines]


@dataclass
class _Kept(Generic[T]):
    end: int  # bytes parsed: just after the last newline seen
    digest: bytes  # of the file's first ``end`` bytes
    lines: int  # lines before ``end``
    records: int  # JSON records before ``end`` (the parser numbers them)
    parsed: Parsed[T]


def _hasher(data: bytes | memoryview = b"") -> Any:
    return hashlib.blake2b(data, digest_size=16)


class JsonlCache(Generic[T]):
    """One parser's view of many append-only files. ``parse(number, record)`` gets each JSON record and
    its 1-based number among the file's records, and returns an item or a ``Problem``."""

    def __init__(self, parse: Callable[[int, Any], T | Problem], max_bytes: int = MAX_BYTES):
        self.parse, self.max_bytes = parse, max_bytes
        self._kept: OrderedDict[str, _Kept[T]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def read(self, path: Path, folder: Folder | None = None) -> Parsed[T]:
        """The file's items (none when it is missing), read through the one way into ``folder`` (its scenario
        folder; by default the folder the file is in, which the caller trusts)."""
        try:
            raw = (folder or Folder(Path(path).parent)).read_bytes(path)
        except Missing:
            return Parsed()
        key = str(path)
        with self._lock:
            kept = self._kept.get(key)
        # The prefix is hashed once: the same hasher then takes the new lines, for the digest kept with them.
        seen = _hasher(memoryview(raw)[:kept.end]) if kept is not None and kept.end <= len(raw) else None
        if seen is None or seen.digest() != kept.digest:
            kept, seen = _Kept(0, b"", 0, 0, Parsed()), _hasher()
        end = raw.rfind(b"\n") + 1  # complete lines end here; what follows is a torn (or unfinished) line
        grown = self._extend(kept, raw, end, seen) if end > kept.end else kept
        if grown is not kept:
            self._keep(key, grown)
        return self._with_tail(grown, raw)

    def forget(self) -> None:
        with self._lock:
            self._kept.clear()
            self._bytes = 0

    def _extend(self, kept: _Kept[T], raw: bytes, end: int, hasher: Any) -> _Kept[T]:
        """``kept`` and the lines up to ``end``; ``hasher`` has seen the bytes ``kept`` stands for."""
        parsed = kept.parsed.copy()
        lines, records = kept.lines, kept.records
        for line in raw[kept.end:end].split(b"\n")[:-1]:  # the slice ends with a newline: drop the empty last part
            lines += 1
            records = self._take(parsed, line, lines, records)
        hasher.update(memoryview(raw)[kept.end:end])
        return _Kept(end, hasher.digest(), lines, records, parsed)

    def _take(self, parsed: Parsed[T], line: bytes, number: int, records: int) -> int:
        """Parse one line into ``parsed``; the count of JSON records after it."""
        if not line.strip():
            return records
        try:
            value = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            parsed.bad_lines.append((number, line[:60].decode("utf-8", "replace")))
            return records
        item = self.parse(records + 1, value)
        if isinstance(item, Problem):
            parsed.record_problems.append(str(item))
        else:
            parsed.items.append(item)
        return records + 1

    def _with_tail(self, kept: _Kept[T], raw: bytes) -> Parsed[T]:
        """The kept lines plus the file's unfinished last line, which is parsed but never kept."""
        out = kept.parsed.copy()
        tail = raw[kept.end:]
        if tail:
            bad_before = len(out.bad_lines)
            self._take(out, tail, kept.lines + 1, kept.records)
            out.torn_tail = len(out.bad_lines) > bad_before
        return out

    def _keep(self, key: str, kept: _Kept[T]) -> None:
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None and old.end > kept.end:  # another thread read a longer file meanwhile
                kept = old
            self._bytes += kept.end - (old.end if old else 0)
            self._kept[key] = kept
            while self._bytes > self.max_bytes and len(self._kept) > 1:
                _, dropped = self._kept.popitem(last=False)
                self._bytes -= dropped.end

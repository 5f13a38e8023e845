"""What a Bash command sends back, read without end or hang: a head and a tail of each output stream, and a
bounded spool for the stream of its changes (``agents/tools/bash_copy.py``)."""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable
from typing import IO, Protocol

PIPE_READ_BYTES = 65536
EXIT_GRACE_S = 1.0  # how long output may keep flowing after the command itself exited


class Sink(Protocol):
    def add(self, chunk: bytes) -> None: ...


class Capture:
    """A stream's first and last bytes, whatever its length: memory stays bounded."""

    def __init__(self, cap_chars: int) -> None:
        self.cap = cap_chars
        self.head_max = cap_chars // 2
        self.tail_max = cap_chars - self.head_max
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_max:
                del self.tail[: len(self.tail) - self.tail_max]

    def text(self) -> str:
        omitted = self.total - len(self.head) - len(self.tail)
        if omitted <= 0:
            return bytes(self.head + self.tail).decode("utf-8", errors="replace")
        return (
            _utf8_head(bytes(self.head))
            + f"\n[... {omitted} of {self.total} bytes omitted: output is capped at {self.cap} characters "
            "(first and last half kept); redirect it to a file and use Read or Grep to see all of it ...]\n"
            + _utf8_tail(bytes(self.tail))
        )


class Spool:
    """Up to ``limit`` bytes of a stream kept in ``file``; what comes beyond is read and dropped (so the writer
    never blocks), and ``overflow`` says it happened."""

    def __init__(self, file: IO[bytes], limit: int) -> None:
        self.file = file
        self.limit = limit
        self.size = 0
        self.overflow = False

    def add(self, chunk: bytes) -> None:
        room = self.limit - self.size
        if len(chunk) > room:
            self.overflow = True
            chunk = chunk[: max(room, 0)]
        if chunk:
            self.file.write(chunk)
            self.size += len(chunk)


def _utf8_head(raw: bytes) -> str:
    """Decode bytes cut at an arbitrary point, without a '\ufffd' for the cut character."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte < 0x80:
            break
        if byte >= 0xC0:  # lead byte: drop it if its sequence is incomplete
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            if needed > back:
                raw = raw[:-back]
            break
    return raw.decode("utf-8", errors="replace")


def _utf8_tail(raw: bytes) -> str:
    """Decode bytes that start at an arbitrary point (skipping a cut character's rest)."""
    start = 0
    while start < min(3, len(raw)) and 0x80 <= raw[start] < 0xC0:
        start += 1
    return raw[start:].decode("utf-8", errors="replace")


def collect(proc: subprocess.Popen[bytes], pipes: dict[int, Sink], deadline: float,
            enough: Callable[[], bool] = lambda: False) -> tuple[bool, bool]:
    """Read every pipe (a descriptor and where its bytes go) until all are closed, the time limit passes, the
    command has exited and background processes keep a pipe open, or ``enough`` says no more is wanted (then
    as lingering: the caller kills what is left). Returns (timed_out, lingering)."""
    sel = selectors.DefaultSelector()
    for fd, sink in pipes.items():
        sel.register(fd, selectors.EVENT_READ, sink)
    exited_at: float | None = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return True, False
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if (exited_at is not None and now - exited_at > EXIT_GRACE_S) or enough():
                return False, True
            for key, _ in sel.select(timeout=min(0.1, deadline - now)):
                chunk = os.read(key.fd, PIPE_READ_BYTES)
                if chunk:
                    key.data.add(chunk)
                else:
                    sel.unregister(key.fileobj)
        return False, False
    finally:
        sel.close()

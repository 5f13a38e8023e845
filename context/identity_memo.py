"""A function's result remembered per object, not per value.

Frozen objects that a process shares between steps (the log records a worker parsed
once, the messages parsed from them) go through the same pure functions on every
step: parsing, redaction. Keyed by ``id`` they need no hashing of their contents;
the memo holds each object it keys on, so an id cannot be reused while its entry
lives. Only for objects nobody mutates, and functions whose result depends on the
object alone.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdentityMemo(Generic[K, V]):
    def __init__(self, fn: Callable[[K], V], size: int):
        self.fn, self.size = fn, size
        self._memo: OrderedDict[int, tuple[K, V]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, obj: K) -> V:
        key = id(obj)
        with self._lock:
            hit = self._memo.get(key)
            if hit is not None and hit[0] is obj:
                self._memo.move_to_end(key)
                return hit[1]
        value = self.fn(obj)
        with self._lock:
            self._memo[key] = (obj, value)
            while len(self._memo) > self.size:
                self._memo.popitem(last=False)
        return value

    def forget(self) -> None:
        with self._lock:
            self._memo.clear()

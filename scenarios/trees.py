"""Whole model-written folders, copied or removed through ``scenarios.confined``, bounded (issue 39, item 5).

A model makes any tree it likes: a chain of 3,000 folders, 60,000 empty files. A recursive walk of it ran out of
Python's stack (``baton evaluate`` and ``baton export`` died with RecursionError) and a copy of every entry ran
for minutes before a sample's time limit started. So both walks here are loops: a copy keeps a stack of at most
``MAX_DEPTH`` open folders and stops (``OverBound``, which names the bound) past that depth, past ``MAX_ENTRIES``
entries, past its bytes or past its deadline; a removal flattens the tree as it goes (each subfolder's entries
are moved up beside it), so it holds two descriptors however deep the tree is. A copy leaves out names that
configure a program (``scenarios.configuring``) and says so.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from scenarios.configuring import configures
from scenarios.confined import (
    _DIR_FLAGS,
    _READ_FLAGS,
    Missing,
    Parts,
    Refused,
    TooLarge,
    _opened,
    describe,
    directory,
    read_bounded,
    shown,
)
from scenarios.store import StoreError

COPY_LIMIT = 1024 * 1024 * 1024  # what one copy of a model-written folder may take in all
MAX_DEPTH = 32  # folders below the one copied: a tools/ package needs a few; each level holds a descriptor
MAX_ENTRIES = 10_000  # files and folders of one copy: a sample's tools/ needs tens


class OverBound(TooLarge):
    """A model-written tree is deeper, larger or slower to copy than its reader's bound; the message names it."""


def copy_tree(root: Path, parts: Sequence[str], dest: Path, *, skip: Callable[[str], bool] = lambda _: False,
              limit_bytes: int = COPY_LIMIT, deadline: float | None = None,
              max_entries: int = MAX_ENTRIES) -> list[str]:
    """Copy the folder ``root/parts`` into ``dest`` (made; baton's own, empty) as regular files and
    directories only, each reached by descriptor without following a link. Returns what was refused, as
    "path: what it is" (a symlink, a FIFO, a device, a hard-linked file, a name that configures a program:
    ``scenarios.configuring``), relative to ``root/parts``; names ``skip`` accepts are left out silently.
    TooLarge once the copy would pass ``limit_bytes``; OverBound past MAX_DEPTH folders, MAX_ENTRIES entries
    or the ``deadline`` (``time.monotonic()``). The walk is a loop over a stack of at most MAX_DEPTH open
    folders, so no chain of folders, however deep, exhausts Python's stack or the process's descriptors."""
    refused: list[str] = []
    budget = _Budget(limit_bytes, deadline, max_entries)
    dest.mkdir(parents=True, exist_ok=True)
    with directory(root, parts) as fd:
        top = os.dup(fd)
    stack: list[tuple[int, Path, Parts, Iterator[str]]] = []
    try:
        stack.append((top, Path(dest), (), budget.names(top, ())))
        while stack:
            dir_fd, target, here, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                os.close(dir_fd)
                continue
            rel = shown((*here, name))
            if skip(name):
                continue
            budget.tick(rel)
            if (why := configures(name)) is not None:
                refused.append(f"{rel}: {why}, not copied")
                continue
            inner = _copy_entry(dir_fd, name, target, rel, refused, budget, len(here) + 1)
            if inner is not None:
                stack.append((inner, target / name, (*here, name), budget.names(inner, (*here, name))))
    finally:
        for dir_fd, *_ in stack:
            os.close(dir_fd)
    return refused


class _Budget:
    """What one copy may still take: entries, bytes and time."""

    def __init__(self, limit_bytes: int, deadline: float | None, max_entries: int) -> None:
        self.limit, self.deadline, self.most = limit_bytes, deadline, max_entries
        self.entries = self.copied = 0

    def tick(self, rel: str) -> None:
        self.entries += 1
        if self.entries > self.most:
            raise OverBound(f"more than {self.most:,} files and folders (the copy's entry bound), at {rel}")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise OverBound(f"the copy did not finish within the sample's time limit (stopped at {rel})")

    def names(self, dir_fd: int, here: Parts) -> Iterator[str]:
        """The folder's names, sorted; listing stops (OverBound) once it alone would pass the entry bound."""
        found: list[str] = []
        with os.scandir(dir_fd) as it:
            for entry in it:
                found.append(entry.name)
                if self.entries + len(found) > self.most:
                    raise OverBound(f"more than {self.most:,} files and folders (the copy's entry bound), "
                                    f"in {shown(here)}")
        return iter(sorted(found))


def _copy_entry(dir_fd: int, name: str, target: Path, rel: str, refused: list[str], budget: _Budget,
                depth: int) -> int | None:
    """Copy the file ``name`` of ``dir_fd`` into ``target``, or make the folder ``name`` there and return its
    open descriptor for the caller to walk; None when there is nothing to walk (refusals noted in ``refused``)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None  # removed meanwhile
    if stat.S_ISDIR(st.st_mode):
        if depth > MAX_DEPTH:
            raise OverBound(f"{rel} is more than {MAX_DEPTH} folders deep (the copy's depth bound)")
        inner = _opened(name, _DIR_FLAGS, dir_fd, rel, refused)
        if inner is None:
            return None
        try:
            (target / name).mkdir()
        except BaseException:
            os.close(inner)
            raise
        return inner
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        refused.append(f"{rel}: {describe(st)}, not copied")
        return None
    fd = _opened(name, _READ_FLAGS, dir_fd, rel, refused)
    if fd is None:
        return None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or opened.st_nlink > 1:  # swapped between the stat and the open
            refused.append(f"{rel}: {describe(opened)}, not copied")
            return None
        os.set_blocking(fd, True)
        data = read_bounded(fd, opened, rel, budget.limit - budget.copied)
    finally:
        os.close(fd)
    budget.copied += len(data)
    out = os.open(target / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                  0o755 if opened.st_mode & 0o111 else 0o644)
    with os.fdopen(out, "wb") as fh:
        fh.write(data)
    return None


def remove_tree(root: Path, parts: Sequence[str]) -> list[str]:
    """Delete the folder ``root/parts`` and everything below it, by descriptor: a link is removed, never
    entered. Returns what could not be removed (as "path: why"); nothing there is no error."""
    if not parts:
        raise StoreError("the scenario folder itself is not removed this way")
    left: list[str] = []
    try:
        with directory(root, parts[:-1]) as parent:
            _remove_in(parent, parts[-1], shown(parts), left)
    except (Missing, Refused):
        pass
    return left


def _remove_in(dir_fd: int, name: str, rel: str, left: list[str]) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        _unlink_noting(dir_fd, name, rel, left)
        return
    try:
        top = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        left.append(f"{rel}: {exc.strerror}")
        return
    try:
        _empty(top, rel, left)
    finally:
        os.close(top)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError as exc:
        left.append(f"{rel}: {exc.strerror}")


def _empty(top: int, rel: str, left: list[str]) -> None:
    """Remove everything in the open folder ``top`` without recursion and with two descriptors at most: each
    subfolder's entries are moved up into ``top`` (renamed beside it) and the emptied subfolder removed, so a
    chain of folders thousands deep is flattened as it goes, never walked down."""
    while True:
        with os.scandir(top) as it:
            names = [entry.name for entry in it]
        progressed, stuck = False, []
        for child in names:
            try:
                st = os.stat(child, dir_fd=top, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                progressed |= _unlink_noting(top, child, f"{rel}/{child}", stuck)
                continue
            try:
                inner = os.open(child, _DIR_FLAGS, dir_fd=top)
            except OSError as exc:
                stuck.append(f"{rel}/{child}: {exc.strerror}")
                continue
            try:
                with os.scandir(inner) as it:
                    below = [entry.name for entry in it]
                for sub in below:
                    os.rename(sub, f".baton-removing-{secrets.token_hex(8)}", src_dir_fd=inner, dst_dir_fd=top)
                    progressed = True
            except OSError as exc:
                stuck.append(f"{rel}/{child}: {exc.strerror}")
            finally:
                os.close(inner)
            try:
                os.rmdir(child, dir_fd=top)
                progressed = True
            except OSError:
                pass  # its entries were moved up (this round removes them) or one could not be: judged next round
        if not names or not progressed:
            left += stuck
            return


def _unlink_noting(dir_fd: int, name: str, rel: str, left: list[str]) -> bool:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError as exc:
        left.append(f"{rel}: {exc.strerror}")
        return False
    return True



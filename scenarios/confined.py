"""A scenario folder reached through descriptors: no symlink followed, no hard-linked file, no race.

The agents' file tools take paths the model wrote. Checking a path and then opening it by name is a
race: a directory swapped for a symlink in between (``renameat2`` with ``RENAME_EXCHANGE``) leads the
open out of the folder. So every access here starts from a descriptor of the scenario folder and opens
one component at a time relative to the last (``dir_fd``), each with ``O_NOFOLLOW`` (directories with
``O_DIRECTORY`` too). Whatever the folder looks like at each instant, what is opened was reached from
the folder through real directories only. On top of that:

- a regular file with more than one hard link is refused: its inode may be a file outside the folder
  that a link made visible inside it (the kernel lets anyone link a file they can read);
- a write creates its temp file in the target directory through that directory's descriptor and
  renames it there (``renameat``), so neither the temp file nor the result can land anywhere else;
- FIFOs and devices are refused (opened non-blocking first, so a FIFO cannot hang the worker).

What stays outside this module's reach: a directory the folder's own processes move out of the folder
while a descriptor to it is open (Bash and the samples see the scenario folder only, so they cannot).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from scenarios.lease import Lease
from scenarios.store import StoreError, checked_relative, landing

Parts = tuple[str, ...]
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class Missing(StoreError):
    """Nothing at that path; callers word their own advice."""

    def __init__(self, rel: str) -> None:
        super().__init__(f"not found: {rel}")
        self.rel = rel


class IsFolder(StoreError):
    """A folder where a file was asked for; callers word their own advice."""

    def __init__(self, rel: str) -> None:
        super().__init__(f"{rel} is a folder, not a file")
        self.rel = rel


class Refused(StoreError):
    """The path leads through a symlink, or names a hard-linked or special file."""


def split(relative: str) -> Parts:
    """A model-given path as its components ('.' and empty ones dropped; '\\' counts as '/'); StoreError for an
    absolute path, '..' or a NUL byte. ``()`` is the folder itself."""
    return tuple(p for p in re.split(r"[\\/]", checked_relative(relative)) if p not in ("", "."))


def shown(parts: Sequence[str]) -> str:
    """Components as the agents see a path: '/'-separated, '.' for the folder itself."""
    return "/".join(parts) or "."


def parts_under(root: Path, path: Path) -> Parts:
    """The components of ``path`` below ``root`` (either may be spelt resolved or not); StoreError if outside."""
    path = Path(path)
    candidates = [(Path(root), path), (Path(root).resolve(), path)]
    if path.is_absolute():
        # A resolved root against a path spelt through a symlinked parent: resolve the parents (never the name).
        candidates.append((Path(root).resolve(), path.parent.resolve() / path.name))
    for base, target in candidates:
        try:
            return split(target.relative_to(base).as_posix() or ".")
        except ValueError:
            continue
    raise StoreError(f"{path} is outside the scenario folder {root}")


def symlink_message(rel: str) -> str:
    return (f"{rel} is a symlink; the file tools never follow symlinks (one could lead out of the scenario folder, "
            "or into state/ or a person's settings); use the path of the file itself")


def _open_dir(fd: int, name: str, so_far: Parts, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise Missing(shown(so_far)) from None
        try:
            os.mkdir(name, 0o777, dir_fd=fd)
        except FileExistsError:
            pass  # made meanwhile: the open below says what it is
        return _open_dir(fd, name, so_far, create=False)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
    try:
        kind = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        raise Missing(shown(so_far)) from None
    if stat.S_ISLNK(kind):
        raise Refused(symlink_message(shown(so_far)))
    raise Refused(f"{shown(so_far)} is a file, not a folder")


@contextmanager
def directory(root: Path, parts: Sequence[str], *, create: bool = False) -> Iterator[int]:
    """A descriptor of the folder ``root/parts``, reached one real directory at a time (made when ``create``)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the folder itself is baton's own path
    try:
        for i, name in enumerate(parts):
            inner = _open_dir(fd, name, tuple(parts[: i + 1]), create)
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def lstat(root: Path, parts: Sequence[str]) -> os.stat_result | None:
    """What is at ``root/parts`` itself (a symlink is not followed); None if nothing is."""
    if not parts:
        return os.stat(root)
    try:
        with directory(root, parts[:-1]) as fd:
            return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    except (Missing, FileNotFoundError):
        return None


def check_regular(st: os.stat_result, rel: str) -> None:
    """Refuse what is not a plain file of this folder alone."""
    if stat.S_ISLNK(st.st_mode):
        raise Refused(symlink_message(rel))
    if stat.S_ISDIR(st.st_mode):
        raise IsFolder(rel)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{rel} is not a regular file (a FIFO, socket or device); the file tools refuse it")
    if st.st_nlink > 1:
        raise Refused(f"{rel} has {st.st_nlink} hard links: the same file is also elsewhere, maybe outside the "
                      "scenario folder, so the file tools refuse to read or write it; make a copy under another name")


@contextmanager
def open_file(root: Path, parts: Sequence[str]) -> Iterator[tuple[int, os.stat_result]]:
    """A read descriptor of the regular file ``root/parts`` (checked on the open descriptor), with its stat."""
    rel = shown(parts)
    if not parts:
        raise IsFolder(rel)
    with directory(root, parts[:-1]) as dir_fd:
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise Missing(rel) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(symlink_message(rel)) from None
            raise
    try:
        st = os.fstat(fd)
        check_regular(st, rel)
        os.set_blocking(fd, True)
        yield fd, st
    finally:
        os.close(fd)


def read_bytes(root: Path, parts: Sequence[str]) -> bytes:
    with open_file(root, parts) as (fd, _), os.fdopen(os.dup(fd), "rb") as fh:
        return fh.read()


def write_atomic(root: Path, parts: Sequence[str], data: str | bytes, lease: Lease | None = None,
                 mtime_ns: int | None = None) -> None:
    """Replace ``root/parts`` with ``data`` atomically: a temp file made in the target's own directory (through
    its descriptor), fsynced, renamed over the name there under ``lease``; missing folders are made."""
    if not parts:
        raise StoreError("give a file path, not the scenario folder itself")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    name = parts[-1]
    with directory(root, parts[:-1], create=True) as dir_fd:
        tmp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(raw)
                fh.flush()
                if mtime_ns is not None:
                    os.utime(fh.fileno(), ns=(mtime_ns, mtime_ns))
                os.fsync(fh.fileno())
            with landing(lease, Path(root, *parts)):
                os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise
        try:
            os.fsync(dir_fd)
        except OSError:
            pass  # some filesystems refuse fsync on directories; the rename is still atomic


def unlink(root: Path, parts: Sequence[str], lease: Lease | None = None) -> None:
    """Remove the file ``root/parts`` if it is there (under ``lease``); a symlink is removed, never followed."""
    if not parts:
        raise StoreError("give a file path, not the scenario folder itself")
    try:
        with directory(root, parts[:-1]) as dir_fd, landing(lease, Path(root, *parts)):
            os.unlink(parts[-1], dir_fd=dir_fd)
    except (Missing, FileNotFoundError):
        pass


def entries(root: Path, parts: Sequence[str]) -> list[os.DirEntry[str]]:
    """The entries of the folder ``root/parts``, sorted by name."""
    with directory(root, parts) as fd, os.scandir(fd) as it:
        return sorted(it, key=lambda e: e.name)


def walk(root: Path, parts: Sequence[str]) -> Iterator[Parts]:
    """Regular files (and hard-linked ones, refused when opened) under ``root/parts``, as components: each
    folder's files by name, then its subfolders. Symlinks are neither listed nor entered."""
    pending: list[Parts] = [tuple(parts)]
    while pending:
        here = pending.pop()
        try:
            found = entries(root, here)
        except (Missing, Refused):
            continue  # changed since it was listed
        subfolders = []
        for entry in found:
            if entry.is_file(follow_symlinks=False):
                yield (*here, entry.name)
            elif entry.is_dir(follow_symlinks=False):
                subfolders.append((*here, entry.name))
        pending.extend(reversed(subfolders))

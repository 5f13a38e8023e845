"""A scenario folder reached through descriptors: no symlink followed, no hard-linked file, no race.

This is the one way into a scenario folder for all of baton (``scenarios.folder`` is its face for
baton's own code, ``agents.tools.paths`` for the agents' tools).

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

Where the kernel has ``openat2`` (Linux 5.6+), a path is opened in one call with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``: the kernel itself refuses any link and any step out of the
folder, on every component. Elsewhere the component walk above does the same in user space. Either way a
read is bounded: a regular file is checked with ``fstat`` on the open descriptor and read up to a limit
(``TooLarge`` beyond it), so a FIFO, a device link or a 10 GB sparse file never hangs or floods a reader.
``scenarios.trees`` copies and removes model-written folders on top of this, bounded.

What stays outside this module's reach: a directory the folder's own processes move out of the folder
while a descriptor to it is open (Bash and the samples see the scenario folder only, so they cannot).
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
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


class Unwritable(StoreError):
    """A folder baton must write in refuses it: a read-only file system, or no permission."""


UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def unwritable(exc: OSError, folder: Path) -> Unwritable | None:
    """What to say when writing in ``folder`` failed with ``exc``, naming the folder (never the temp file the
    error names); None when the failure is another one."""
    if exc.errno not in UNWRITABLE:
        return None
    return Unwritable(f"cannot write in {folder}: it is not writable ({exc.strerror or exc}). baton keeps a "
                      "scenario's run inside its folder: make the folder writable, or copy the scenario somewhere "
                      "writable and pass that folder with --scenarios-dir")


@contextmanager
def writing_in(folder: Path) -> Iterator[None]:
    """Turn a refused write under ``folder`` into ``Unwritable`` naming it; any other error goes on as it is."""
    try:
        yield
    except OSError as exc:
        refused = unwritable(exc, folder)
        if refused is None:
            raise
        raise refused from None


class TooLarge(Refused):
    """A file, or a folder being copied, is larger than the reader's bound."""


READ_LIMIT = 256 * 1024 * 1024  # what any one read of a scenario file may take unless its caller says less

# openat2(2): one call resolves the whole path beneath a descriptor, the kernel refusing every link.
_SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64 (the generic table); other machines walk
_RESOLVE = 0x02 | 0x04 | 0x08  # RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2() -> Callable[[int, str, int], int] | None:
    if os.uname().machine not in ("x86_64", "aarch64"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long

    def openat2(dir_fd: int, path: str, flags: int) -> int:
        how = _OpenHow(flags, 0, _RESOLVE)
        fd = syscall(_SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return int(fd)

    probe = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.close(openat2(probe, ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    except OSError:
        return None  # ENOSYS (an older kernel), EPERM (a seccomp profile that forbids it): walk instead
    finally:
        os.close(probe)
    return openat2


_openat2 = _load_openat2()


def kernel_resolves() -> bool:
    """Whether paths are resolved by openat2 here (else by the component walk)."""
    return _openat2 is not None


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
        if parts and _openat2 is not None and not create:
            inner = _beneath(fd, parts, _DIR_FLAGS)
            if inner is not None:
                os.close(fd)
                fd = inner
                parts = ()
        for i, name in enumerate(parts):
            inner = _open_dir(fd, name, tuple(parts[: i + 1]), create)
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def _beneath(dir_fd: int, parts: Sequence[str], flags: int) -> int | None:
    """``parts`` opened by the kernel beneath ``dir_fd`` with no link followed; None when that failed, so
    that the component walk opens it again and words the precise error (which component, what it is)."""
    assert _openat2 is not None
    try:
        return _openat2(dir_fd, "/".join(parts), flags)
    except OSError:
        return None


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
    fd = None
    if _openat2 is not None:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = _beneath(top, parts, _READ_FLAGS)
        finally:
            os.close(top)
    if fd is None:
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


def read_bytes(root: Path, parts: Sequence[str], *, limit: int = READ_LIMIT) -> bytes:
    """The content of the regular file ``root/parts``, at most ``limit`` bytes (TooLarge beyond: a file
    can grow while it is read, so the bound is on what is read, not only on fstat's size)."""
    with open_file(root, parts) as (fd, st):
        return read_bounded(fd, st, shown(parts), limit)


def read_bounded(fd: int, st: os.stat_result, rel: str, limit: int) -> bytes:
    """Up to ``limit`` bytes of the open regular file ``fd``; TooLarge when it holds more."""
    if st.st_size > limit:
        raise TooLarge(f"{rel} holds {st.st_size} bytes, more than the {limit} this reader takes")
    chunks, total = [], 0
    while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise TooLarge(f"{rel} grew past the {limit} bytes this reader takes while it was read")
    return b"".join(chunks)


def write_atomic(root: Path, parts: Sequence[str], data: str | bytes, lease: Lease | None = None,
                 mtime_ns: int | None = None) -> None:
    """Replace ``root/parts`` with ``data`` atomically: a temp file made in the target's own directory (through
    its descriptor), fsynced, renamed over the name there under ``lease``; missing folders are made."""
    if not parts:
        raise StoreError("give a file path, not the scenario folder itself")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    name = parts[-1]
    with writing_in(Path(root, *parts[:-1])), directory(root, parts[:-1], create=True) as dir_fd:
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


def kind(root: Path, parts: Sequence[str]) -> str | None:
    """What is at ``root/parts`` without following it: "file", "folder", "link", "special", or None."""
    try:
        st = lstat(root, parts)
    except Refused:
        return "link"  # a link on the way there: nothing reachable at that path
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "link"
    if stat.S_ISDIR(st.st_mode):
        return "folder"
    return "file" if stat.S_ISREG(st.st_mode) else "special"


def describe(st: os.stat_result) -> str:
    """What a refused entry is, in words."""
    mode = st.st_mode
    for test, word in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    if stat.S_ISREG(mode) and st.st_nlink > 1:
        return f"a file with {st.st_nlink} hard links"
    return "not a regular file"


def _opened(name: str, flags: int, dir_fd: int, rel: str, refused: list[str]) -> int | None:
    """``name`` opened beneath ``dir_fd``, or None (noted in ``refused``) when it changed since it was listed."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        refused.append(f"{rel}: changed while it was copied")
        return None


def append_line(root: Path, parts: Sequence[str], line: bytes, lease: Lease | None = None) -> None:
    """Append ``line`` (one record and its newline) to the regular file ``root/parts``, made if missing,
    and fsync; a torn line an earlier crash left is ended first, so it stays one bad line."""
    if not parts:
        raise StoreError("give a file path, not the scenario folder itself")
    rel = shown(parts)
    with writing_in(Path(root, *parts[:-1])), directory(root, parts[:-1], create=True) as dir_fd, \
            landing(lease, Path(root, *parts)):
        try:
            fd = os.open(parts[-1], os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(symlink_message(rel)) from None
            raise
        try:
            check_regular(os.fstat(fd), rel)
            os.set_blocking(fd, True)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_empty_folder(root: Path, parts: Sequence[str]) -> bool:
    """rmdir ``root/parts`` by its parent's descriptor when it is an empty folder; whether it was removed."""
    if not parts:
        return False
    try:
        with directory(root, parts[:-1]) as parent:
            os.rmdir(parts[-1], dir_fd=parent)
        return True
    except (Missing, Refused, OSError):
        return False  # not empty, not a folder (a link is left), or gone

"""Bash's own copy of the scenario folder: made before a command, read back after it, and applied to the folder
only as far as the file tools may write.

A sandboxed command never writes the host's folder. Its ``/scenario`` is a tmpfs of ``bash_disk_mb``, filled
from a copy baton makes first (``make_seed``: regular files and folders only, through ``scenarios.folder``,
``state/`` left out: it is bound read-only from the host instead), bound read-only at ``/seed``. A small
script (``WRAPPER``), the sandbox's init, copies it in, runs the command, ends every process the command
left, and sends the tmpfs back as a tar stream on a pipe of its own, with a status line after it.

That stream is hostile input: the command may have written into the pipe, or traced the script. So it is
bounded (``spool_limit``), parsed, and compared with the copy baton made (``read_back``); then ``apply``
writes back only what ``agents.tools.paths.refusal`` lets Write and Edit write, through the tool call's
journal (``ctx.files``), so a crash in the middle is undone like any tool call's writes. Deletions of such
files are applied; links, FIFOs, devices and every change to a protected path are not, and are named in
``not_applied``. No rename inside the sandbox can move a protection: each path is judged where it lands.
"""

from __future__ import annotations

import os
import re
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agents.tools.base import ToolContext
from agents.tools.paths import refusal
from scenarios import confined
from scenarios.configuring import configures
from scenarios.confined import Parts, Refused, TooLarge
from scenarios.folder import Folder
from scenarios.store import StoreError, landing
from scenarios.trees import OverBound

SANDBOX_DIR = "/scenario"
SEED_DIR = "/seed"
STATE = "state"  # bound read-only from the host, never copied
PAGE = 4096  # what tmpfs gives a file at least, per started page
MAX_ENTRIES = 100_000  # files and folders a command may leave in its copy
FILE_LIMIT = confined.READ_LIMIT  # the largest file applied: what any reader of the folder takes at most
MB = 1024 * 1024

# The sandbox's init (bwrap --as-pid-1), so no process inside can kill it. $1 the command, $2 the descriptor
# the changes go to, $3 and $4 its ulimits. The command does not get $2 ({out}>&-), though it could reopen it
# through /proc: so the status line after the archive says how long the archive is (tar's own count), and
# what came before it is ignored; it also says how the copy went, how much of the disk is free, and tar's
# exit status. `kill -KILL -1` ends every other process of the sandbox (and the loop waits until they are
# reaped), so nothing changes the copy while it is read. Everything is made readable first (the command may
# have taken read permission away from a file of its own; without it the file would read as deleted). None of
# this is trusted (the command may have traced this script): read_back checks what comes back.
WRAPPER = r"""
out=$2
if ! cp -a /seed/. /scenario/ 2>/dev/null; then
    printf '\nbaton-bash seed-full - 0 0\n' >&"$out"
    exit 125
fi
( ulimit -u "$3" -v "$4" && exec bash -c "$1" ) {out}>&-
rc=$?
kill -KILL -1 2>/dev/null
for _ in {1..500}; do
    wait 2>/dev/null
    left=0
    for p in /proc/[0-9]*; do [[ ${p#/proc/} == "$$" ]] || { left=1; break; }; done
    ((left)) || break
    sleep 0.01
done
chmod u+rwx /scenario 2>/dev/null
cd /scenario || exit "$rc"
shopt -s dotglob nullglob
names=()
for name in *; do [[ $name == state ]] || names+=("./$name"); done
trc=0 length=0
if ((${#names[@]})); then
    chmod -R u+rX -- "${names[@]}" 2>/dev/null
    totals=$(tar --totals --one-file-system --sparse --format=gnu -cf - -- "${names[@]}" 2>&1 >&"$out")
    trc=$?
    [[ $totals =~ Total\ bytes\ written:\ ([0-9]+) ]] && length=${BASH_REMATCH[1]}
fi
avail=$(stat -f -c %a /scenario 2>/dev/null) || avail=-
printf '\nbaton-bash ran %s %s %s\n' "$avail" "$trc" "$length" >&"$out"
exit "$rc"
"""
_STATUS = re.compile(rb"\nbaton-bash (ran|seed-full) (\d+|-) (\d+) (\d{1,15})\n\Z")


class DiskFull(Exception):
    """The copy did not fit the command's disk, or the command filled it."""


class Unreadable(Exception):
    """What came back from the sandbox cannot be trusted to say what the command changed."""


def disk_note(disk_mb: int, what: str) -> str:
    return (f"{what}: a command works on its own copy of the scenario folder, on a disk of {disk_mb} MB "
            "(bash_disk_mb), and nothing of what it changed was applied. Write less (remove big files in the same "
            "command), or an operator can raise bash_disk_mb in scenario.toml or BATON_<ROLE>_BASH_DISK_MB")


# ---- the copy in --------------------------------------------------------------------------------------------


@dataclass
class Seed:
    """Baton's copy of the folder that the command's copy starts from, and what it holds."""

    folder: Path
    files: dict[Parts, int] = field(default_factory=dict)  # regular files and their sizes
    dirs: set[Parts] = field(default_factory=set)
    refused: list[str] = field(default_factory=list)  # "path: what it is, not copied"
    pages: int = 0


def make_seed(root: Path, dest: Path, disk_mb: int) -> Seed:
    """Copy the scenario folder at ``root`` but ``state/`` into ``dest`` (baton's own, new), regular files and
    folders only; DiskFull when it would not fit the command's disk."""
    folder, seed, limit = Folder(root), Seed(dest), disk_mb * MB
    dest.mkdir()
    for name in folder.names(".", kinds=("file", "folder", "link", "special")):
        if name == STATE:
            continue
        if why := configures(name):  # left out of every copy: a program run in the copy would read it
            seed.refused.append(shown(f"{name}: {why}, not copied"))
            continue
        remaining = limit - seed.pages * PAGE
        try:
            if folder.kind(name) == "folder":
                refused = folder.copy_tree(name, dest / name, limit_bytes=remaining, max_entries=MAX_ENTRIES)
                seed.refused += [shown(f"{name}/{item}") for item in refused]
            else:
                _copy_file(root, name, dest / name, remaining, seed.refused)
        except OverBound as exc:
            raise DiskFull(f"the scenario folder cannot be copied for the command: {exc}; nothing was run. "
                           "Remove what is over the bound with the file tools") from None
        except TooLarge:
            raise DiskFull(disk_note(disk_mb, "the scenario folder does not fit on the command's disk")) from None
        _measure(seed, dest, name)
        if seed.pages * PAGE > limit:
            raise DiskFull(disk_note(disk_mb, "the scenario folder does not fit on the command's disk"))
    return seed


def _copy_file(root: Path, name: str, dest: Path, limit: int, refused: list[str]) -> None:
    """A file at the top of the folder, if it is a regular file of the folder alone."""
    st = confined.lstat(root, (name,))
    if st is None:
        return  # removed meanwhile
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        refused.append(shown(f"{name}: {confined.describe(st)}, not copied"))
        return
    try:
        data = confined.read_bytes(root, (name,), limit=limit)
    except TooLarge:  # a Refused too, but the caller's to word
        raise
    except Refused:
        refused.append(shown(f"{name}: changed while it was copied"))
        return
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o755 if st.st_mode & 0o111 else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _measure(seed: Seed, dest: Path, name: str) -> None:
    """Add what the copy of the top-level entry ``name`` holds (baton's own folder: os.walk is safe)."""
    path = dest / name
    if path.is_file():
        size = path.stat().st_size
        seed.files[(name,)] = size
        seed.pages += -(-size // PAGE)
        return
    if not path.is_dir():
        return
    seed.dirs.add((name,))
    for here, folders, files in os.walk(path):
        base = Path(here).relative_to(dest).parts
        seed.dirs.update((*base, sub) for sub in folders)
        for file in files:
            size = os.stat(os.path.join(here, file)).st_size
            seed.files[(*base, file)] = size
            seed.pages += -(-size // PAGE)


def spool_limit(disk_mb: int) -> int:
    """The most a well-behaved copy can send back: its disk, plus tar's headers for MAX_ENTRIES entries."""
    return disk_mb * MB + MAX_ENTRIES * 1536 + MB


# ---- what came back -----------------------------------------------------------------------------------------


@dataclass
class Returned:
    """The command's copy of the folder after it ran, as the stream told it."""

    files: dict[Parts, tarfile.TarInfo] = field(default_factory=dict)
    dirs: set[Parts] = field(default_factory=set)
    odd: dict[Parts, str] = field(default_factory=dict)  # what is neither a file nor a folder
    archive: tarfile.TarFile | None = None

    def close(self) -> None:
        if self.archive is not None:
            self.archive.close()


def read_back(spool: IO[bytes], size: int, overflow: bool, disk_mb: int) -> Returned:
    """The copy the stream in ``spool`` (``size`` bytes) describes; DiskFull or Unreadable when it cannot be
    applied."""
    if overflow:
        raise Unreadable("more came back from the sandbox than its disk holds")
    spool.seek(max(0, size - 64))
    status = _STATUS.search(spool.read())
    if status is None:
        raise Unreadable("the sandbox ended before it said what the command changed (a command that ends every "
                         "process, such as `kill -9 -1`, ends baton's own in the sandbox too)")
    how, avail, tar_status, length = status.group(1), status.group(2), int(status.group(3)), int(status.group(4))
    if how == b"seed-full":
        raise DiskFull(disk_note(disk_mb, "the scenario folder does not fit on the command's disk"))
    if avail == b"0":
        raise DiskFull(disk_note(disk_mb, "the command filled its disk"))
    if tar_status != 0:
        raise Unreadable(f"the command's copy could not be read back whole (tar exit status {tar_status})")
    start = size - len(status.group(0)) - length
    if start < 0:
        raise Unreadable("what came back from the sandbox is shorter than it says")
    back = Returned()
    if length == 0:
        return back
    try:
        back.archive = tarfile.open(fileobj=_Bounded(spool, start, length), mode="r:", tarinfo=_Header)
        for count, member in enumerate(back.archive, 1):
            if count > MAX_ENTRIES:
                raise Unreadable(f"the command left more than {MAX_ENTRIES:,} files and folders")
            _sort(back, member)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        back.close()
        raise Unreadable(f"what came back from the sandbox is not a readable archive ({exc})") from None
    except Unreadable:
        back.close()
        raise
    return back


def _sort(back: Returned, member: tarfile.TarInfo) -> None:
    try:
        parts = confined.split(member.name)
    except StoreError:
        return  # not a name tar makes from a folder: nothing to apply
    if not parts or parts[0] == STATE:
        return
    for table in (back.files, back.odd):
        table.pop(parts, None)
    back.dirs.discard(parts)
    if not all(_utf8(part) for part in parts):
        back.odd[parts] = "a name that is not UTF-8 (Write could not name it)"
    elif member.isreg():
        back.files[parts] = member
    elif member.islnk() and (target := _linked(back, member)) is not None:
        back.files[parts] = target  # another name of a file already sent: applied as a copy of it
    elif member.isdir():
        back.dirs.add(parts)
    else:
        back.odd[parts] = _what(member)


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8, carried as a surrogate
        return False
    return True


def shown(text: str) -> str:
    """``text`` as a result may carry it: a name's bytes that are not UTF-8 shown as escapes."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _linked(back: Returned, member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    try:
        return back.files.get(confined.split(member.linkname))
    except StoreError:
        return None


def _what(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symlink (to {member.linkname[:200]!r})"
    if member.islnk():
        return "a hard link"
    if member.isfifo():
        return "a FIFO"
    if member.ischr() or member.isblk():
        return "a device"
    return "not a regular file"


class _Header(tarfile.TarInfo):
    """A header as GNU tar writes it with --format=gnu, and nothing else: a pax header (whose parsing has had
    catastrophic backtracking in Python's tarfile, CVE-2024-6232) or a long name longer than any path means the
    stream is not tar's. (These are tarfile's hooks for those header types; the names are stable since 3.2.)"""

    def _proc_pax(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        raise tarfile.ReadError("a pax header, which the sandbox's tar does not write")

    def _proc_gnulong(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.size > 65536:
            raise tarfile.ReadError(f"a long name of {self.size} bytes")
        return super()._proc_gnulong(tarfile_)  # type: ignore[misc]


class _Bounded:
    """``length`` bytes of ``raw`` from ``start``, read-only: the archive and nothing around it."""

    def __init__(self, raw: IO[bytes], start: int, length: int) -> None:
        self.raw, self.start, self.length, self.pos = raw, start, length, 0

    def read(self, n: int = -1) -> bytes:
        left = self.length - self.pos
        n = left if n is None or n < 0 else min(n, left)
        self.raw.seek(self.start + self.pos)
        data = self.raw.read(n)
        self.pos += len(data)
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, min(self.length, base + pos))
        return self.pos

    def tell(self) -> int:
        return self.pos


# ---- applied to the folder ----------------------------------------------------------------------------------


@dataclass
class Applied:
    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    not_applied: list[dict[str, str]] = field(default_factory=list)

    def skip(self, parts: Parts, why: str) -> None:
        self.not_applied.append({"path": shown(confined.shown(parts)), "why": shown(why)})


def apply(ctx: ToolContext, seed: Seed, back: Returned) -> Applied:
    """Write to the folder what the command changed in its copy, as far as Write and Edit may: deletions
    first, then folders, then files, each through ``ctx.files`` (the call's journal in a step)."""
    done = Applied()
    for parts, what in sorted(back.odd.items()):
        kept = ", and the folder keeps what it had there" if parts in seed.files or parts in seed.dirs else ""
        done.skip(parts, f"{what} in the sandbox: links, FIFOs and devices are never applied{kept}")
    for parts in sorted(seed.files.keys() - back.files.keys() - back.odd.keys()):
        if reason := refusal(parts):
            done.skip(parts, f"deleted or moved away in the sandbox, not applied: {reason}")
        elif _attempt(done, parts, lambda p=parts: ctx.files.unlink(ctx.root.joinpath(*p))):
            done.deleted.append(shown(confined.shown(parts)))
    for parts in sorted(seed.dirs - back.dirs - back.odd.keys(), key=len, reverse=True):
        if refusal(parts) is None:
            _remove_empty(ctx, parts)
    holding = {file[:depth] for file in back.files for depth in range(1, len(file))}  # folders with files in
    for parts in sorted(back.dirs - seed.dirs, key=len):
        if reason := refusal(parts):
            if parts not in holding:  # else its files are named
                done.skip(parts, reason)
        else:
            _attempt(done, parts, lambda p=parts: _make_folder(ctx, p))
    for parts, member in sorted(back.files.items()):
        if parts in seed.files and _same(back, member, seed, parts):
            continue
        if reason := refusal(parts):
            done.skip(parts, reason)
        elif member.size > FILE_LIMIT:
            done.skip(parts, f"{member.size:,} bytes, over the {FILE_LIMIT:,} baton reads of a file; not applied")
        elif _attempt(done, parts, lambda p=parts, m=member: ctx.files.write(ctx.root.joinpath(*p), _data(back, m))):
            done.written.append(shown(confined.shown(parts)))
    return done


def _attempt(done: Applied, parts: Parts, change: Any) -> bool:
    try:
        change()
    except (StoreError, OSError) as exc:
        done.skip(parts, f"could not be applied: {exc}")
        return False
    return True


def _lease(ctx: ToolContext) -> Any:
    return getattr(ctx.files, "lease", None)


def _make_folder(ctx: ToolContext, parts: Parts) -> None:
    with landing(_lease(ctx), ctx.root.joinpath(*parts)), confined.directory(ctx.root, parts, create=True):
        pass


def _remove_empty(ctx: ToolContext, parts: Parts) -> None:
    """Remove the folder if it is empty now (it may hold what the copy never had: a link, a FIFO)."""
    try:
        with confined.directory(ctx.root, parts[:-1]) as fd, landing(_lease(ctx), ctx.root.joinpath(*parts)):
            os.rmdir(parts[-1], dir_fd=fd)
    except (StoreError, OSError):
        pass  # not empty, gone already, or no longer a folder: it stays as it is


def _same(back: Returned, member: tarfile.TarInfo, seed: Seed, parts: Parts) -> bool:
    if member.size != seed.files[parts]:
        return False
    assert back.archive is not None
    theirs = back.archive.extractfile(member)
    if theirs is None:
        return False
    with theirs, open(seed.folder.joinpath(*parts), "rb") as ours:
        while True:
            a, b = theirs.read(MB), ours.read(MB)
            if a != b:
                return False
            if not a:
                return True


def _data(back: Returned, member: tarfile.TarInfo) -> bytes:
    assert back.archive is not None
    content = back.archive.extractfile(member)
    if content is None:
        raise StoreError("its content did not come back from the sandbox")
    with content:
        data = content.read(member.size + 1)
    if len(data) != member.size:
        raise StoreError("its content came back incomplete from the sandbox")
    return data

"""Namespaces of its own for each sample forked by the sample server, inside the server's
sandbox (``proving/evaluation/fork_server_main.py``; docs/evaluation.md).

Standard library only and no baton imports: the server loads it by path, and it runs in
the server's sandbox. The server's sandbox already has no network, no host processes, no
environment and a read-only system; what one sample must not share with another, or with
the server, is made here, in the forked child, before any generated code runs:

1. the child joins the sample's cgroups (``/cgroup/<hierarchy>/<name>``, when the worker made them)
   and opens its folder (``/samples/<name>``, what the worker put there: ``job.json`` and ``work/``);
2. it unshares a user namespace (so it may mount, and so ``RLIMIT_NPROC`` counts this sample's
   processes only), a mount namespace and a PID namespace, and forks: the grandchild is PID 1
   of the new namespace, a small init that forks the sample and ends when it does; then the
   kernel ends everything the sample started;
3. the grandchild mounts a tmpfs of the sample's disk limit at ``/sample`` and copies the folder
   into it (the sample's disk is that tmpfs: it cannot write a byte more, nor anything on the
   host), covers the folder of all samples and the cgroups with empty read-only tmpfs, mounts a
   ``/proc`` of its own (none where the kernel refuses one: under a root worker's bwrap) and a
   fresh ``/tmp``, drops every capability, sets ``no_new_privs`` and forbids further user
   namespaces (a sysctl where it can write one, and a seccomp filter that also kills a process
   calling in through another architecture's gate);
4. the child, outside the sample's PID namespace and out of its process group (so the kill at
   the time limit leaves it), waits for the init, then copies the sample's ``result.json`` and
   ``progress.json`` back into the folder (``copy_out``: regular files only, never a link
   followed, never a FIFO waited on, each within a bound) with a note of what it refused and of
   how full the disk was (``sandbox.json``), and exits as the sample did.

``copy_in`` and ``copy_out`` also serve a spawned sample (``proving/evaluation/spawned_main.py``),
whose tmpfs bwrap makes.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import stat
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MS_REMOUNT = 32
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
LAST_CAP = 63
TMP_SIZE = "size=64m"  # a sample's own /tmp: its HOME and TMPDIR are its folder anyway
SAMPLE_DIR = "/sample"
ALL_SAMPLES_DIR = "/samples"
CGROUP_DIR = "/cgroup"
MIB = 1024 * 1024
DISK_MB = 1024  # a sample's folder, when nobody says otherwise (ToolSettings.eval_disk_mb)
INODES = 65_536  # files and folders in a sample's folder: each costs kernel memory a size cannot see
IN_FILES = ("job.json", "work")  # what the worker puts in a sample's folder
# What comes back out of a sample's folder, and how much of each: the result carries the initial and
# final data (the data of a large scenario is a few MB), the progress a phase and a few checker names.
OUT_FILES = {"result.json": 64 * MIB, "progress.json": 1 * MIB}
NOTE = "sandbox.json"  # written beside them by the process that copied them out (never the sample)
FULL_BELOW = 1 * MIB  # a folder with less than this free counts as full
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

_libc = ctypes.CDLL(None, use_errno=True)


def _call(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _call(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                      data.encode() if data else None), f"mount {target}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# The syscall numbers a filter needs, by machine: (audit arch, unshare, clone, clone3).
SYSCALLS = {"x86_64": (0xC000003E, 272, 56, 435), "aarch64": (0xC00000B7, 97, 220, 435)}
SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
X32_SYSCALL_BIT = 0x40000000  # x86_64's x32 calls: the same audit arch, other numbers
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
EPERM, ENOSYS = 1, 38


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _forbid_user_namespaces() -> None:
    """A seccomp filter: unshare and clone with CLONE_NEWUSER fail (EPERM), clone3 is answered ENOSYS
    (its flags sit behind a pointer; libc then falls back to clone), as bwrap's --disable-userns does
    with a sysctl the kernel may not let a root worker's sample write. No-op on other machines.

    The architecture is checked first: a call through another one's gate (``int 0x80`` on x86_64, the
    i386 table, where unshare is 310, not 272) or x86_64's x32 numbers kills the process, as libseccomp
    does by default. Allowing them let an i386 unshare through and the sample mounted a tmpfs."""
    arch, unshare, clone, clone3 = SYSCALLS.get(os.uname().machine, (0, 0, 0, 0))
    if not arch:
        return
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE/JSET|K, BPF_RET|K
    program = [
        (ld, 0, 0, 4), (jeq, 1, 0, arch),  # seccomp_data.arch: ours, or the process is killed
        (ret, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (ld, 0, 0, 0), (jge, 0, 1, X32_SYSCALL_BIT),  # seccomp_data.nr: x32's (or past any table) are killed
        (ret, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (jeq, 3, 0, unshare), (jeq, 2, 0, clone), (jeq, 5, 0, clone3),
        (ret, 0, 0, SECCOMP_RET_ALLOW),
        (ld, 0, 0, 16), (jset, 0, 1, CLONE_NEWUSER),  # the flags: the first argument's low 32 bits
        (ret, 0, 0, SECCOMP_RET_ERRNO | EPERM), (ret, 0, 0, SECCOMP_RET_ALLOW),
        (ret, 0, 0, SECCOMP_RET_ERRNO | ENOSYS),
    ]
    filters = (_SockFilter * len(program))(*[_SockFilter(*line) for line in program])
    prog = _SockFprog(len(program), filters)
    _call(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp filter")


def _drop_capabilities() -> None:
    for cap in range(LAST_CAP + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            _call(-1, f"dropping capability {cap} from the bounding set")
    _call(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient capabilities")
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable of two 32-bit words: all zero
    _call(_libc.capset(header, data), "capset")
    _call(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _own_namespaces() -> None:
    uid, gid = os.getuid(), os.getgid()
    _call(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _wait_and_exit_as(pid: int, folder: int, group: int) -> None:
    """In the child outside the namespace: leave the sample's process group for ``group`` (the server's), so
    the kill at the time limit ends the sample but not this process; wait for the init; copy what the sample
    left for the worker into ``folder``; end as the sample did (PID 1 reports a signal as 128 + its number)."""
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # the group kill is SIGKILL; these must not orphan the sample
        if group:
            os.setpgid(0, group)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        code = -(code - 128) if code > 128 else code
        copy_out(SAMPLE_DIR, folder)  # the init has ended, and every process of the sample with it
    finally:
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


def _init(pid: int) -> None:
    """PID 1 of the sample's namespace: reap orphans until the sample (``pid``) ends, then end,
    and with it every process left in the namespace. Never returns."""
    code = 1
    try:
        while True:
            ended, status = os.waitpid(-1, 0)
            if ended == pid:
                code = os.waitstatus_to_exitcode(status)
                code = 128 - code if code < 0 else code  # PID 1 cannot die of a signal it sends itself
                break
    finally:
        os._exit(code)


def _seal(folder: int, max_processes: int, disk_bytes: int) -> None:
    """In PID 1 of the new namespaces: its own folder in a tmpfs of its disk limit, its own /proc, no capability."""
    _call(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    _mount("none", SAMPLE_DIR, "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_bytes},nr_inodes={INODES},mode=755")
    try:
        copy_in(folder, SAMPLE_DIR)
    finally:
        os.close(folder)
    for hidden in (ALL_SAMPLES_DIR, CGROUP_DIR):
        if os.path.isdir(hidden):
            _mount("none", hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=555")
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except PermissionError:
        # The kernel refuses a new /proc where the server's has read-only covers over some of its
        # folders (bwrap adds them for a root worker): then the sample gets none, not the server's.
        _mount("none", "/proc", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=555")
    # The Python install trees under /tmp (a venv made there) would vanish under the sample's own /tmp: each is
    # held by a descriptor across the mount and bound back, read-only, from it.
    held = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in _python_under_tmp()]
    here = os.open(".", os.O_PATH | os.O_DIRECTORY)
    _mount("none", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, TMP_SIZE)
    for path, fd in held:
        try:
            os.makedirs(path, exist_ok=True)
            os.fchdir(fd)  # "." is then the covered tree (no /proc/self/fd needed: a root worker's sample has none)
            _mount(".", path, None, MS_BIND | MS_REC)
            _mount("none", path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        finally:
            os.fchdir(here)
            os.close(fd)
    os.close(here)
    try:
        _write("/proc/sys/user/max_user_namespaces", "0")  # no nested user namespace from here down
    except OSError:
        pass  # no /proc of its own (a root worker): the seccomp filter below holds alone
    _drop_capabilities()
    _forbid_user_namespaces()  # after no_new_privs, which an unprivileged filter requires
    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))


def _python_under_tmp() -> list[str]:
    """The interpreter's and the venv's trees that lie beneath /tmp (the sandbox bound them there read-only)."""
    return [prefix for prefix in dict.fromkeys((sys.base_prefix, sys.prefix))
            if prefix.startswith("/tmp/") and os.path.isdir(prefix)]


def enter(name: str, cgroups: list[str], max_processes: int, disk_mb: int = DISK_MB, group: int = 0) -> None:
    """Called in the forked child; returns in the sample's process (PID 2 of its own namespaces, sealed, under
    an init of its own as bwrap gives a spawned sample). ``group``: the process group the waiting child moves
    to (the server's), out of the one the server kills at the time limit."""
    for cgroup in cgroups:
        _write(f"{CGROUP_DIR}/{cgroup}/cgroup.procs", str(os.getpid()))
    folder = os.open(f"{ALL_SAMPLES_DIR}/{name}", _DIR)  # before the init covers /samples
    _own_namespaces()
    pid = os.fork()
    if pid:
        _wait_and_exit_as(pid, folder, group)
    _seal(folder, max_processes, disk_mb * MIB)
    pid = os.fork()
    if pid:
        _init(pid)
    _call(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")


# ---- the sample's folder: in before it starts, out after it ended -----------------------------------------


def copy_in(source: int, dest: str) -> None:
    """Copy ``job.json`` and ``work/`` of the folder ``source`` (the worker's copy: regular files and folders)
    into ``dest``, the sample's tmpfs. OSError (ENOSPC) saying so when they do not fit in it."""
    target = os.open(dest, _DIR)
    try:
        _copy_entries(source, target, IN_FILES)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise OSError(exc.errno, "the sample's files (job.json, tools/ and checkers/) do not fit in its "
                                     "disk limit (eval_disk_mb)") from None
        raise
    finally:
        os.close(target)


def _copy_entries(source: int, target: int, names: tuple[str, ...] | list[str]) -> None:
    for name in names:
        try:
            st = os.stat(name, dir_fd=source, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(name, 0o755, dir_fd=target)
            inner_source, inner_target = os.open(name, _DIR, dir_fd=source), os.open(name, _DIR, dir_fd=target)
            try:
                _copy_entries(inner_source, inner_target, sorted(os.listdir(inner_source)))
            finally:
                os.close(inner_source)
                os.close(inner_target)
        elif stat.S_ISREG(st.st_mode):
            why = _copy_file(source, name, target, None)
            if why:
                raise OSError(errno.EINVAL, f"{name}: {why}")


def copy_out(sample: str, folder: int, note: dict[str, object] | None = None) -> None:
    """Copy ``result.json`` and ``progress.json`` of the sample's folder ``sample`` into ``folder``, each a
    regular file of one link within its bound (``OUT_FILES``), opened without following a link and without
    waiting on a FIFO; then ``sandbox.json``: what was refused and why, how full the folder was, and ``note``.
    Run by a process the sample cannot reach, after the sample ended."""
    refused: list[str] = []
    disk: dict[str, object] = {}
    try:
        source = os.open(sample, _DIR)
    except OSError as exc:
        refused.append(f"{sample}: {exc.strerror}")
    else:
        try:
            for name, limit in OUT_FILES.items():
                why = _copy_file(source, name, folder, limit)
                if why:
                    refused.append(f"{name}: {why}, refused")
            space = os.fstatvfs(source)
            size, free = space.f_blocks * space.f_frsize, space.f_bavail * space.f_frsize
            disk = {"disk_bytes": size, "disk_free": free, "disk_full": free < min(FULL_BELOW, size // 16)}
        finally:
            os.close(source)
    text = json.dumps({"refused": refused, **disk, **(note or {})}).encode()
    fd = os.open(NOTE, _NEW, 0o644, dir_fd=folder)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)


def _copy_file(source: int, name: str, target: int, limit: int | None) -> str | None:
    """Copy the regular file ``name`` from the folder ``source`` to ``target``; None when copied (or absent),
    else why not. At most ``limit`` bytes (None: as many as the target takes)."""
    try:
        fd = os.open(name, _FILE, dir_fd=source)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return "a symlink (never followed)" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"{_what(st.st_mode)}, not a regular file"
        if st.st_nlink > 1:
            return f"a file with {st.st_nlink} hard links"
        if limit is not None and st.st_size > limit:
            return f"{st.st_size} bytes, more than the {limit // MIB} MiB taken"
        os.set_blocking(fd, True)
        out = os.open(name, _NEW, 0o755 if st.st_mode & 0o111 else 0o644, dir_fd=target)
        try:
            copied = 0
            while sent := os.sendfile(out, fd, None, 1 << 20 if limit is None else min(1 << 20, limit + 1 - copied)):
                copied += sent
                if limit is not None and copied > limit:
                    os.unlink(name, dir_fd=target)
                    return f"grew past the {limit // MIB} MiB taken while it was copied"
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return None


def _what(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return word
    return "not a regular file"

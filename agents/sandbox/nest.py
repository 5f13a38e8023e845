"""Namespaces of its own for each sample forked by the sample server, inside the server's
sandbox (``agents/evaluation/fork_server_main.py``; docs/evaluation.md).

Standard library only and no baton imports: the server loads it by path, and it runs in
the server's sandbox. The server's sandbox already has no network, no host processes, no
environment and a read-only system; what one sample must not share with another, or with
the server, is made here, in the forked child, before any generated code runs:

1. the child joins the sample's cgroups (``/cgroup/<hierarchy>/<name>``, when the worker made them);
2. it unshares a user namespace (so it may mount, and so ``RLIMIT_NPROC`` counts this sample's
   processes only), a mount namespace and a PID namespace, and forks: the grandchild is PID 1
   of the new namespace, a small init that forks the sample and ends when it does; then the
   kernel ends everything the sample started;
3. the grandchild binds its own folder at ``/sample``, covers the folder of all samples and
   the cgroups with empty read-only tmpfs, mounts a ``/proc`` of its own (none where the kernel
   refuses one: under a root worker's bwrap) and a fresh ``/tmp``, drops every capability,
   sets ``no_new_privs`` and forbids further user namespaces (a sysctl where it can write
   one, and a seccomp filter);
4. the child waits for the init and exits as the sample did.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
LAST_CAP = 63
TMP_SIZE = "size=64m"  # a sample's own /tmp: its HOME and TMPDIR are its folder anyway
SAMPLE_DIR = "/sample"
ALL_SAMPLES_DIR = "/samples"
CGROUP_DIR = "/cgroup"

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
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
EPERM, ENOSYS = 1, 38


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _forbid_user_namespaces() -> None:
    """A seccomp filter: unshare and clone with CLONE_NEWUSER fail (EPERM), clone3 is answered ENOSYS
    (its flags sit behind a pointer; libc then falls back to clone), as bwrap's --disable-userns does
    with a sysctl the kernel may not let a root worker's sample write. No-op on other machines."""
    arch, unshare, clone, clone3 = SYSCALLS.get(os.uname().machine, (0, 0, 0, 0))
    if not arch:
        return
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JSET|K, BPF_RET|K
    program = [
        (ld, 0, 0, 4), (jeq, 0, 4, arch),  # another architecture's calls: allowed (and not ours to number)
        (ld, 0, 0, 0), (jeq, 3, 0, unshare), (jeq, 2, 0, clone), (jeq, 5, 0, clone3),
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


def _wait_and_exit_as(pid: int) -> None:
    """In the child outside the namespace: end as the sample did (PID 1 reports a signal as 128 + its number)."""
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # the group kill is SIGKILL; these must not orphan the sample
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        code = -(code - 128) if code > 128 else code
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


def _seal(name: str, max_processes: int) -> None:
    """In PID 1 of the new namespaces: only its own folder, its own /proc, no capability."""
    _call(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    _mount(f"{ALL_SAMPLES_DIR}/{name}", SAMPLE_DIR, None, MS_BIND | MS_REC)
    for hidden in (ALL_SAMPLES_DIR, CGROUP_DIR):
        if os.path.isdir(hidden):
            _mount("none", hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=555")
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except PermissionError:
        # The kernel refuses a new /proc where the server's has read-only covers over some of its
        # folders (bwrap adds them for a root worker): then the sample gets none, not the server's.
        _mount("none", "/proc", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=555")
    _mount("none", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, TMP_SIZE)
    try:
        _write("/proc/sys/user/max_user_namespaces", "0")  # no nested user namespace from here down
    except OSError:
        pass  # no /proc of its own (a root worker): the seccomp filter below holds alone
    _drop_capabilities()
    _forbid_user_namespaces()  # after no_new_privs, which an unprivileged filter requires
    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))


def enter(name: str, cgroups: list[str], max_processes: int) -> None:
    """Called in the forked child; returns in the sample's process (PID 2 of its own
    namespaces, sealed, under an init of its own as bwrap gives a spawned sample)."""
    for group in cgroups:
        _write(f"{CGROUP_DIR}/{group}/cgroup.procs", str(os.getpid()))
    _own_namespaces()
    pid = os.fork()
    if pid:
        _wait_and_exit_as(pid)
    _seal(name, max_processes)
    pid = os.fork()
    if pid:
        _init(pid)
    _call(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")

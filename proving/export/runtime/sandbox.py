"""``baton_bwrap``: the exported task's own sandbox provider for Inspect AI, and its default.

Each ``exec`` is a fresh bubblewrap sandbox that ends with the command (the task runs ``box.py`` in it for
every tool call and every judgement). Needs Inspect and the standard library, not baton. The sandbox:

- new user, PID, network, IPC, UTS, cgroup and mount namespaces (``--unshare-all --unshare-user``), no
  nested user namespaces (``--disable-userns``), every capability dropped: no network but its own
  loopback, no view of this machine's processes (so no ``/proc/<pid>/environ`` of the Inspect process);
- an empty environment: bwrap is started with none (its own process is PID 1 inside, and
  ``/proc/1/environ`` shows what it was started with) and the command gets PATH, LANG, HOME and TMPDIR;
- ``/usr`` and the Python running Inspect read-only; the export's ``tools/``, ``checkers/`` and
  ``baton_runtime/`` read-only at ``/export`` (nothing else of the export: a ``.env`` or the logs beside
  task.py stay out); ``/`` and ``/dev`` read-only;
- the only writable places are fresh tmpfs of a fixed size: ``/work`` (WORK_MB), ``/tmp`` (TMP_MB) and
  ``/dev/shm`` (SHM_MB), so a call that fills its disk fails with "No space left on device" and fills
  nothing else;
- ``--die-with-parent`` and ``--new-session``: when the command ends, or the sandbox is killed (time
  limit, cancelled sample), the kernel ends every process of its PID namespace, ``setsid`` and double
  forks included. The process-count limit is set inside, where it counts this sandbox's processes only
  (``box.py``); memory and CPU limits are set on the child that runs the generated code.

Where no sandbox can be had (bwrap missing, unable to make namespaces here, another OS), ``exec`` runs the
command on this machine with an empty environment, in a process group of its own killed afterwards, and
says so: ``baton_confinement`` is what the task writes in each sample's log ("UNCONFINED: ...").
``BATON_EXPORT_BWRAP`` names the bwrap to use (default: the one on PATH, else /usr/bin/bwrap...).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path, PurePosixPath
from typing import Any, Literal, overload

import anyio
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUserUnsupportedError,
    concurrency,
    sandboxenv,
)

from .processes import feed_and_wait

LOG = logging.getLogger(__name__)
NAME = "baton_bwrap"
EXPORT = Path(__file__).resolve().parents[1]  # the export this file was copied into
EXPORT_ROOT = "/export"  # where the export's code is inside a sandbox: here and in the export's Dockerfile
EXPORTED = ("tools", "checkers", "baton_runtime")  # all of the export a call needs
WORK_DIR = "/work"
WORK_MB, TMP_MB, SHM_MB = 256, 64, 16  # the writable tmpfs of one call: its folder, /tmp, /dev/shm
MIB = 1024 * 1024
BWRAP_ENV = "BATON_EXPORT_BWRAP"
SYSTEM_BWRAPS = ("/usr/bin/bwrap", "/bin/bwrap", "/usr/local/bin/bwrap")
PROBE_TIMEOUT_S = 10
# Only successes are remembered: bwrap installed, or namespaces allowed, while Inspect runs counts at the next sample.
_working: set[str] = set()
_warned: set[str] = set()


def find_bwrap() -> tuple[str | None, str]:
    """(a bwrap that makes a sandbox here, "") or (None, why there is none)."""
    named = os.environ.get(BWRAP_ENV, "").strip()
    if named:
        candidate: str | None = named if os.access(named, os.X_OK) and os.path.isfile(named) else None
        where = f"{BWRAP_ENV}={named}"
    else:
        candidate = shutil.which("bwrap") or next((p for p in SYSTEM_BWRAPS if os.access(p, os.X_OK)), None)
        where = f"on PATH nor in {', '.join(SYSTEM_BWRAPS)}"
    if candidate is None:
        linux = "" if sys.platform.startswith("linux") else f" (bubblewrap is Linux only; this is {sys.platform})"
        return None, f"bubblewrap (bwrap) was not found {where}{linux}"
    if candidate in _working:
        return candidate, ""
    try:
        probe = subprocess.run([*base_args(candidate), "true"], capture_output=True, timeout=PROBE_TIMEOUT_S, env={})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{candidate} could not be run: {exc}"
    if probe.returncode != 0:
        said = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"{candidate} cannot make a sandbox here: {said[-1] if said else f'exit {probe.returncode}'}"
    _working.add(candidate)
    return candidate, ""


def system_binds() -> list[str]:
    """/usr read-only, and /bin, /lib... as this machine has them (links into /usr, or read-only binds)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def python_dirs() -> list[str]:
    """The install trees of this Python outside /usr (a venv, the interpreter it links to): box.py runs on it."""
    dirs = []
    for prefix in dict.fromkeys((sys.base_prefix, sys.prefix)):
        path = Path(prefix)
        readable = path.is_dir() and os.access(path, os.R_OK | os.X_OK)
        if readable and path.resolve() != Path("/") and not path.resolve().is_relative_to("/usr"):
            dirs.append(str(path))
    return dirs


def base_args(bwrap: str) -> list[str]:
    """The isolation of every call, without its folders: also what the probe runs."""
    return [
        bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
        "--die-with-parent", "--new-session", "--hostname", "sandbox", *system_binds(),
        "--proc", "/proc", "--dev", "/dev", "--size", str(SHM_MB * MIB), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
        "--size", str(TMP_MB * MIB), "--tmpfs", "/tmp", "--size", str(WORK_MB * MIB), "--tmpfs", WORK_DIR,
    ]


def inside_path() -> str:
    venv = [f"{sys.prefix}/bin"] if sys.prefix in python_dirs() else []
    return ":".join([*venv, "/usr/local/bin", "/usr/bin", "/bin"])


def command(bwrap: str, export: Path, cmd: list[str], cwd: str, env: dict[str, str]) -> list[str]:
    args = base_args(bwrap)
    for directory in python_dirs():
        args += ["--ro-bind", directory, directory]
    args += ["--dir", EXPORT_ROOT]
    for name in EXPORTED:
        if (export / name).is_dir():
            args += ["--ro-bind", str((export / name).resolve()), f"{EXPORT_ROOT}/{name}"]
    args += ["--remount-ro", "/", "--chdir", cwd, "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return [*args, *cmd]


def confinement(bwrap: str | None, why: str) -> dict[str, Any]:
    """What the task writes in the log about where its calls ran."""
    if bwrap:
        note = (f"Tool calls and the judge ran in the export's bubblewrap sandbox ({bwrap}): new user, PID, "
                "network, IPC and UTS namespaces, no capabilities, no nested user namespaces, an empty "
                "environment, the system and the export's code read-only, only a fresh /work "
                f"({WORK_MB} MB), /tmp ({TMP_MB} MB) and /dev/shm ({SHM_MB} MB) writable, nothing outliving "
                "the call.")
    else:
        note = (f"UNCONFINED: no sandbox could be had here ({why}), so every tool call and the judge ran "
                "unconfined on this machine, as the user running Inspect: with an empty environment and in a "
                "process group of their own that is killed afterwards, but able to read this machine's files "
                "and processes, reach its network and write wherever that user can. Install bubblewrap "
                "(apt-get install bubblewrap; it needs unprivileged user namespaces), or run with "
                "--sandbox docker.")
    return {"name": NAME, "confined": bwrap is not None, "note": note}


@sandboxenv(name=NAME)
class BatonBwrapSandbox(SandboxEnvironment):
    """One sample's sandbox: nothing lives between its ``exec`` calls, each is a bwrap sandbox of its own."""

    def __init__(self, export: Path, bwrap: str | None, why: str) -> None:
        super().__init__()
        self.export = export
        self.bwrap = bwrap
        self.export_root = EXPORT_ROOT if bwrap else str(export)  # where box.py finds the export
        self.baton_confinement = confinement(bwrap, why)

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        bwrap, why = await anyio.to_thread.run_sync(find_bwrap)
        if bwrap is None and why not in _warned:
            _warned.add(why)
            LOG.warning("%s", confinement(None, why)["note"])

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        bwrap, why = await anyio.to_thread.run_sync(find_bwrap)
        return {"default": cls(export_folder(config), bwrap, why)}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment], interrupted: bool) -> None:
        pass  # each exec's sandbox ended with it

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        if user is not None and not _is_current_user(user):
            raise SandboxUserUnsupportedError(f"{NAME} runs commands as the user running Inspect, not {user!r}")
        scratch = None
        if self.bwrap:
            inside = {"PATH": inside_path(), "LANG": "C.UTF-8", "HOME": WORK_DIR, "TMPDIR": "/tmp", **(env or {})}
            where = str(PurePosixPath(WORK_DIR) / (cwd or "."))
            argv, host_env, host_cwd = command(self.bwrap, self.export, cmd, where, inside), {}, "/"
        else:
            scratch = tempfile.mkdtemp(prefix="baton-unconfined-")
            path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
            host_env = {"PATH": path, "LANG": "C.UTF-8", "HOME": scratch, "TMPDIR": scratch, **(env or {})}
            argv, host_cwd = list(cmd), str(Path(scratch) / (cwd or "."))
        data = input.encode() if isinstance(input, str) else input
        try:
            return await _limited(argv, host_env, host_cwd, data, timeout, concurrency)
        finally:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        raise PermissionError(f"{NAME} keeps no files between calls: each exec starts from an empty {WORK_DIR}")

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        """Only the export's code can be read (from /export/...): nothing else outlives an exec."""
        path = PurePosixPath(file)
        parts = path.relative_to(EXPORT_ROOT).parts if path.is_relative_to(EXPORT_ROOT) else ()
        if not parts or parts[0] not in EXPORTED or ".." in parts:
            raise FileNotFoundError(f"{file}: {NAME} keeps no files between calls; only {EXPORT_ROOT}/... is there")
        fd = os.open(self.export.joinpath(*parts), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise IsADirectoryError(file) if stat.S_ISDIR(info.st_mode) else FileNotFoundError(file)
            if info.st_size > SandboxEnvironmentLimits.MAX_READ_FILE_SIZE:
                raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None)
            raw = fh.read(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE)
        return raw.decode("utf-8") if text else raw

    def default_polling_interval(self) -> float:
        return 0.2


def export_folder(config: SandboxEnvironmentConfigType | None) -> Path:
    """The task names its export folder as the config (``Task(sandbox=(NAME, folder))``); else this file's."""
    return Path(config).resolve() if isinstance(config, str) and config else EXPORT


async def _limited(argv: list[str], env: dict[str, str], cwd: str, data: bytes | None, timeout: int | None,
                   throttle: bool) -> ExecResult[str]:
    limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
    if throttle:
        async with concurrency(NAME, 2 * (os.cpu_count() or 1)):
            return await _run(argv, env, cwd, data, timeout, limit)
    return await _run(argv, env, cwd, data, timeout, limit)


async def _run(argv: list[str], env: dict[str, str], cwd: str, data: bytes | None, timeout: int | None,
               limit: int) -> ExecResult[str]:
    # Started from the event loop's thread, which lives as long as the eval: bwrap's --die-with-parent
    # (PR_SET_PDEATHSIG) fires when the thread that started it ends, not the process.
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, cwd=cwd, start_new_session=True, close_fds=True)
    except OSError as exc:  # the command itself is missing: an ordinary failed result, as Inspect asks
        return ExecResult(False, 127, "", f"{argv[0]}: {exc}")
    stop = threading.Event()
    try:
        returncode, out, err, over, timed_out = await anyio.to_thread.run_sync(
            feed_and_wait, proc, data, timeout, limit, stop, abandon_on_cancel=True)
    except BaseException:  # cancelled (the sample's limit, an interrupt): the thread kills the group now
        stop.set()
        raise
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if timed_out:
        error = TimeoutError(f"Command timed out after {timeout} seconds")
        error.truncated_output = stdout + stderr  # type: ignore[attr-defined]
        raise error
    if over:
        raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, stdout + stderr)
    return ExecResult(returncode == 0, returncode, stdout, stderr)


def _is_current_user(user: str) -> bool:
    try:
        import pwd

        uid = int(user) if user.isdecimal() else pwd.getpwnam(user).pw_uid
    except (ImportError, KeyError):
        return False
    return uid == os.geteuid()

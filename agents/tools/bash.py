"""``Bash``: a command in the scenario folder, in its own process group, with a time
limit and bounded output (a head and a tail of each stream are kept).

The command runs in a bubblewrap (``bwrap``) sandbox unless the operator set
``bash_sandbox = "none"``. The sandbox's shape, and why:

- The scenario folder is bound read-write at ``/scenario``, the working directory:
  the only host files the command can change. A fixed path means symlinks and
  ``..`` resolve inside the sandbox's own tree, where host paths do not exist.
- ``/usr`` read-only, and ``/bin``, ``/lib``... as the host has them (symlinks into
  ``/usr`` on merged-usr systems, read-only binds otherwise): enough to run
  programs. No ``/etc`` at all: bash, coreutils and Python start without it (glibc
  finds Debian's multiarch libraries without ``ld.so.cache``); the price is that
  user and host names do not resolve (``whoami`` fails), which scenario work does not need.
- The Python baton runs on, when it lives outside ``/usr`` (a venv, pyenv), read-only
  at its own path and first on PATH: the evaluation harness runs the scenario's code
  with that interpreter, so the agent can test it with the same one and its packages.
- No host ``/home``, ``/root``, ``/work`` or ``/tmp``: a private tmpfs at ``/tmp``
  of at most 512 MiB (also HOME, so caches do not litter the folder), a fresh
  ``/proc`` of the sandbox's own PID namespace and a minimal ``/dev``.
- ``--unshare-all``: no network (only its own loopback), no view of host processes or
  IPC. ``--unshare-user`` (also for a worker running as root, which bwrap would
  otherwise leave in the host's user namespace) with ``--disable-userns``: no nested
  user namespaces, a large share of the kernel's attack surface. ``--cap-drop ALL``:
  root keeps no capability inside. ``--new-session``: the command cannot push input
  into a terminal. ``--die-with-parent``: the sandbox goes if the worker dies.
- ``--clearenv``: only PATH, HOME and LANG, so no secret of the worker's environment.

bwrap is started in its own process group as before; killing that group kills the
outer bwrap, ``--die-with-parent`` kills the sandbox's init, and with it the kernel
ends every process of the sandbox's PID namespace. That init also exits when the
command does, so background processes end with the command.

When bwrap is missing or cannot make a sandbox (no user namespaces), Bash returns an
error instead of running unconfined; only ``bash_sandbox = "none"`` runs the command
directly on the host, with secret-looking variables removed from its environment.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from agents.config import BashSandbox
from agents.cpu_slots import cpu_slot
from agents.processes import kill_group
from agents.tools.base import FileTool, ToolContext, ToolInputError, ToolResult, error, ok, string_input
from context.redaction import is_secret_name

PIPE_READ_BYTES = 65536
EXIT_GRACE_S = 1.0  # how long output may keep flowing after the command itself exited


class _Capture:
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


def _clean_env() -> dict[str, str]:
    """The worker's environment without the API key, the broker URLs (they carry the
    Redis password) or anything named like a secret."""
    hidden = {"ANTHROPIC_API_KEY", "BATON_BROKER_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}
    return {k: v for k, v in os.environ.items() if k not in hidden and not is_secret_name(k)}


SANDBOX_DIR = "/scenario"
TMP_BYTES = 512 * 1024 * 1024  # the private /tmp lives in memory: without a cap it may take half the host's RAM
INSTALL_HINT = (
    "install bubblewrap on the worker (`apt-get install -y bubblewrap` on Debian/Ubuntu; it needs unprivileged "
    "user namespaces, or a worker running as root)"
)
# Only successes are remembered: a failure may be fixed (bwrap installed, namespaces
# allowed) while the worker runs, and each Bash call then tries again.
_WORKING_BWRAP: set[str] = set()


def _system_binds() -> list[str]:
    """/usr read-only, and /bin, /lib... as the host has them: symlinks into /usr
    on merged-usr systems, read-only binds of the real directories otherwise."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def _python_dirs() -> list[str]:
    """The install trees of the Python baton runs on that lie outside /usr (a venv and
    the interpreter it links to): the scenario's code is evaluated with this Python."""
    dirs = []
    for prefix in dict.fromkeys((sys.base_prefix, sys.prefix)):
        path = Path(prefix)
        # (one the worker cannot read, e.g. under another user's home, would make bwrap fail)
        readable = path.is_dir() and os.access(path, os.R_OK | os.X_OK)
        if readable and path.resolve() != Path("/") and not path.resolve().is_relative_to("/usr"):
            dirs.append(str(path))
    return dirs


def _base_args(bwrap: str) -> list[str]:
    """The isolation every sandbox gets, without the folder: also what the probe runs."""
    return [
        bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
        "--die-with-parent", "--new-session", "--hostname", "sandbox",
        *_system_binds(), "--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp",
    ]


def bwrap_command(bwrap: str, root: Path, command: str) -> list[str]:
    """The argv that runs ``command`` with bash in a sandbox where ``root`` is /scenario."""
    python_dirs = _python_dirs()
    venv_bin = [f"{sys.prefix}/bin"] if sys.prefix in python_dirs else []  # else it is under /usr already
    path = ":".join([*venv_bin, "/usr/local/bin", "/usr/bin", "/bin"])
    args = _base_args(bwrap)
    for directory in python_dirs:
        args += ["--ro-bind", directory, directory]
    return [
        *args, "--bind", str(root.resolve()), SANDBOX_DIR, "--chdir", SANDBOX_DIR,
        "--clearenv", "--setenv", "PATH", path, "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "bash", "-c", command,
    ]


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot make a sandbox on this host; the message says why."""


def usable_bwrap() -> str:
    """The path of a bwrap that can make a sandbox here: a trial sandbox runs until one works."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("bubblewrap (`bwrap`) is not installed: it was not found on PATH")
    if bwrap in _WORKING_BWRAP:
        return bwrap
    try:
        probe = subprocess.run([*_base_args(bwrap), "true"], capture_output=True, timeout=10, env=_clean_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"{bwrap} could not be run: {exc}") from None
    if probe.returncode != 0:
        why = probe.stderr.decode("utf-8", errors="replace").strip() or f"exit code {probe.returncode}"
        raise SandboxUnavailable(f"{bwrap} cannot create a sandbox here: {why}")
    _WORKING_BWRAP.add(bwrap)
    return bwrap


def _collect(proc: subprocess.Popen[bytes], out: _Capture, err: _Capture, deadline: float) -> tuple[bool, bool]:
    """Read both pipes until they close, the time limit passes, or the command has
    exited and background processes keep the pipes open. Returns (timed_out, lingering)."""
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    exited_at: float | None = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return True, False
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > EXIT_GRACE_S:
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


_COMMON = (
    "Run a bash command in the scenario folder (the working directory) and get its exit code, "
    "stdout and stderr. A non-zero exit code is reported, not treated as a tool failure. The "
    "command has a time limit (`timeout_s`, capped by the agent's configured limit); on timeout "
    "the command and everything it started are killed. Each output stream is capped (its first "
    "and last part are kept): redirect big output to a file and Read or Grep it. There is no stdin. "
)
_SANDBOXED = (
    "The command runs in a sandbox: the scenario folder, mounted at /scenario, is the only folder of the "
    "host it can see or change (use relative paths; symlinks pointing outside it lead nowhere); system "
    "programs under /usr are read-only, /tmp is private (512 MiB) and emptied after every command, no /etc "
    "and NO network. Background processes end when the command does. The environment holds only PATH, "
    "HOME=/tmp and LANG. "
)
_UNCONFINED = (
    "The command is NOT sandboxed: the operator turned the sandbox off, so it runs on the worker's host with "
    "the worker's access to files and network. Stay inside the scenario folder. Background processes still "
    "holding the output when the command exits are killed. Secrets are not in the environment. "
)
_USE_FILE_TOOLS = "Use Read/Write/Edit/Glob/Grep for file work; Bash is for running things."


class BashTool(FileTool):
    name = "Bash"
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The bash command line to run"},
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Time limit in seconds (default and maximum: the configured limit)",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    def __init__(self, sandbox: BashSandbox = "bwrap") -> None:
        """``sandbox`` picks the description the model sees; what runs follows the
        settings of each call, so a mismatch is reported in the result."""
        super().__init__()
        self.description = _COMMON + (_SANDBOXED if sandbox == "bwrap" else _UNCONFINED) + _USE_FILE_TOOLS

    def _run(self, tool_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not ctx.settings.bash_enabled:
            role = ctx.agent
            return error(
                f"Bash is disabled for the {role} agent. A human can enable it by setting "
                f"`bash_enabled = true` under `[agents.{role}]` in scenario.toml, or the environment "
                f"variable BATON_{role.upper()}_BASH_ENABLED=1, and resuming the run. Meanwhile use "
                "Read, Write, Edit, LS, Glob and Grep."
            )
        command = string_input(tool_input, "command")
        limit = self._limit(tool_input, ctx)
        if ctx.settings.bash_sandbox == "bwrap":
            try:
                argv = bwrap_command(usable_bwrap(), ctx.root, command)
            except SandboxUnavailable as exc:
                return error(_sandbox_error(str(exc), ctx.agent))
        else:
            argv = ["bash", "-c", command]
        with cpu_slot():  # a worker serving many steps runs at most a core's worth of commands at once
            started = time.monotonic()
            proc = subprocess.Popen(
                argv,
                cwd=ctx.root,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=_clean_env(),  # bwrap clears it again for the sandbox
                start_new_session=True,  # its own process group, so a timeout can kill all of it
            )
            out, err = _Capture(ctx.settings.output_cap_chars), _Capture(ctx.settings.output_cap_chars)
            timed_out = lingering = True  # if collecting fails, clean up as after a timeout
            try:
                timed_out, lingering = _collect(proc, out, err, started + limit)
            finally:
                # Kill only when members are known to be left: after a clean finish the
                # group is usually empty and its id could already belong to someone else.
                if timed_out or lingering:
                    kill_group(proc.pid)
                proc.wait()
                proc.stdout.close()  # type: ignore[union-attr]
                proc.stderr.close()  # type: ignore[union-attr]
        data = self._data(command, proc, out, err, timed_out, lingering, limit, time.monotonic() - started)
        if ctx.settings.bash_sandbox == "none":
            data["unconfined"] = True  # plain in every result, whatever the description said
        return ok(data)

    @staticmethod
    def _limit(tool_input: dict[str, Any], ctx: ToolContext) -> float:
        value = tool_input.get("timeout_s")
        if value is None:
            return ctx.settings.bash_timeout_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ToolInputError(f"timeout_s must be a positive number of seconds, got {value!r}")
        return min(float(value), ctx.settings.bash_timeout_s)

    @staticmethod
    def _data(
        command: str, proc: subprocess.Popen[bytes], out: _Capture, err: _Capture,
        timed_out: bool, lingering: bool, limit: float, elapsed: float,
    ) -> dict[str, Any]:
        data: dict[str, Any] = {
            "command": command,
            "exit_code": None if timed_out else proc.returncode,
            "stdout": out.text(),
            "stderr": err.text(),
            "timed_out": timed_out,
            "duration_s": round(elapsed, 2),
        }
        if timed_out:
            data["note"] = (
                f"timed out after {limit:g} s; the command and its child processes were killed. "
                "Run something shorter, or pass a larger timeout_s (up to the configured limit)"
            )
        elif lingering:
            data["note"] = "background processes still holding the output were killed when the command exited"
        return data


def _sandbox_error(why: str, role: str) -> str:
    return (
        f"Bash runs commands only in a bubblewrap sandbox, and none can be made here: {why}. An operator "
        f"must {INSTALL_HINT} and resume the run. Running Bash unconfined, with the host's files and network "
        f"in reach, is possible only by an explicit choice: `bash_sandbox = \"none\"` under `[agents.{role}]` "
        f"in scenario.toml or BATON_{role.upper()}_BASH_SANDBOX=none. Meanwhile use Read, Write, Edit, LS, "
        "Glob and Grep."
    )

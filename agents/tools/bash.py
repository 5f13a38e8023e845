"""``Bash``: a command in the scenario folder, in its own process group, with a time
limit and bounded output (a head and a tail of each stream are kept).

The command runs in the sandbox every piece of code a model wrote runs in
(``agents/sandbox/bwrap.py`` says what it is and why) unless the operator set
``bash_sandbox = "none"``. Bash's own parts:

- The scenario folder is bound read-write at ``/scenario``, the working directory:
  the only host files the command can change. A fixed path means symlinks and
  ``..`` resolve inside the sandbox's own tree, where host paths do not exist.
  ``scenario.toml``, ``brief.md``, ``CONVENTIONS.md``, ``run.json`` and ``state/`` are
  bound read-only over it; one of them the command creates is removed afterwards (``PROTECTED``).
- ``/tmp`` (at most 512 MiB) is also HOME, so caches do not litter the folder; the
  environment holds PATH, HOME and LANG only.
- ``ulimit -u`` and ``-v`` inside, and a cgroup where the machine offers one
  (agents/sandbox/cgroup.py, limits.py): a process count and memory for the whole command.

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
import time
from pathlib import Path
from typing import Any, ClassVar

from agents.config import BashSandbox
from agents.conventions import FILE as CONVENTIONS
from agents.cpu_slots import cpu_slot
from agents.processes import kill_group
from agents.sandbox import cgroup
from agents.sandbox.bwrap import EMPTY_ENV, INSTALL_HINT, SandboxUnavailable, python_path_dirs, usable_bwrap
from agents.sandbox.bwrap import command as sandbox_command
from agents.sandbox.limits import BASH_MEMORY_MB, MAX_PROCESSES
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
    """For an unconfined command only: the worker's environment without the API key, the
    broker URLs (they carry the Redis password) or anything named like a secret. A sandbox
    gets nothing of it (agents/sandbox/bwrap.py)."""
    hidden = {"ANTHROPIC_API_KEY", "BATON_BROKER_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}
    return {k: v for k, v in os.environ.items() if k not in hidden and not is_secret_name(k)}


SANDBOX_DIR = "/scenario"
# What a person configures and what baton alone writes: read-only inside (their absence is
# kept too: one the command creates is removed afterwards). The scenarios folder around
# (its shared CONVENTIONS.md) is not in the sandbox at all.
PROTECTED = ("scenario.toml", "brief.md", CONVENTIONS, "run.json", "state", "handoffs")
# What the evaluation computes in each iteration's folder: no command may write its own report (the file tools
# refuse them too, docs/agents.md "Tools"; a handoff's figures are checked against report.json).
COMPUTED = ("report.json", "results.jsonl", "traces")


def protected(root: Path) -> list[str]:
    """The paths under ``root`` a command may read but not change: a person's settings, baton's own state,
    the handoffs, and every iteration's computed evaluation outputs."""
    outputs = sorted(p for p in (root / "execution_outputs").glob("iteration_*") if p.is_dir() and not p.is_symlink())
    return [*PROTECTED, *(f"execution_outputs/{p.name}/{name}" for p in outputs for name in COMPUTED)]


def bwrap_command(bwrap: str, root: Path, command: str) -> list[str]:
    """The argv that runs ``command`` with bash in a sandbox where ``root`` is /scenario,
    its protected files read-only, and the process and memory limits set inside."""
    root = root.resolve()
    read_only = {root / name: f"{SANDBOX_DIR}/{name}" for name in protected(root) if _exists(root / name)}
    limits = f"ulimit -u {MAX_PROCESSES} -v {BASH_MEMORY_MB * 1024} && exec bash -c \"$1\""
    return sandbox_command(
        bwrap, writable={root: SANDBOX_DIR}, read_only=read_only, chdir=SANDBOX_DIR,
        env={"PATH": ":".join(python_path_dirs()), "HOME": "/tmp", "LANG": "C.UTF-8"},
        argv=["bash", "-c", limits, "bash", command],
    )


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _remove_created(root: Path, before: set[str]) -> list[str]:
    """Protected names the command created (it cannot change existing ones): removed, so a
    scenario.toml written from Bash never takes effect. Runs after the sandbox has ended."""
    removed = []
    for name in protected(root):
        path = root / name
        if name in before or not _exists(path):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(name)
    return removed


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
    "and NO network. scenario.toml, brief.md, CONVENTIONS.md, run.json and state/ are read-only (they are the "
    f"operator's and baton's). At most {MAX_PROCESSES} processes. Background processes end when the command does. The "
    "environment holds only PATH, HOME=/tmp and LANG. "
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
        confined = ctx.settings.bash_sandbox == "bwrap"
        before = {name for name in protected(ctx.root) if _exists(ctx.root / name)}
        if confined:
            try:
                argv = bwrap_command(usable_bwrap(), ctx.root, command)
            except SandboxUnavailable as exc:
                return error(_sandbox_error(str(exc), ctx.agent))
        else:
            argv = ["bash", "-c", command]
        group = cgroup.create(BASH_MEMORY_MB, MAX_PROCESSES) if confined else None
        with cpu_slot():  # a worker serving many steps runs at most a core's worth of commands at once
            started = time.monotonic()
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=ctx.root,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=EMPTY_ENV if confined else _clean_env(),  # bwrap's own PID 1 shows its environment
                    start_new_session=True,  # its own process group, so a timeout can kill all of it
                    preexec_fn=group.join if group else None,  # noqa: PLW1509 - one write to a cgroup file
                )
            except BaseException:
                if group:
                    group.close()
                raise
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
                if group:
                    group.close()
        data = self._data(command, proc, out, err, timed_out, lingering, limit, time.monotonic() - started)
        removed = _remove_created(ctx.root, before) if confined else []
        if removed:
            data["removed"] = removed
            data["note"] = (f"{', '.join(removed)} cannot be created from Bash (a person configures them, or baton "
                            "writes them) and were removed")
        if not confined:
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

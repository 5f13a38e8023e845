"""``Bash``: a command on a copy of the scenario folder, in its own process group, with a time limit and bounded
output (a head and a tail of each stream are kept: ``agents/tools/bash_output.py``).

The command runs in the sandbox every piece of code a model wrote runs in (``proving/sandbox/bwrap.py`` says
what it is and why) unless the operator set ``bash_sandbox = "none"``. Bash's own parts:

- It never writes the host's folder. ``/scenario``, the working directory, is a tmpfs of ``bash_disk_mb``
  holding a copy of the folder (``state/`` is bound read-only instead); when the command ends, what it
  changed there is applied to the folder through the tool call's journal, as far as Write and Edit may
  write (``agents/tools/bash_copy.py``). So no path the command takes (a rename, a link, a FIFO) changes
  what the loop reads as the truth, and a fill stops at the bound. A fixed path means symlinks and ``..``
  resolve inside the sandbox's own tree, where host paths do not exist.
- ``/tmp`` (at most 512 MiB) is also HOME, so caches do not litter the folder; the environment holds PATH,
  HOME and LANG only.
- ``ulimit -u`` and ``-v`` inside, and a cgroup where the machine offers one (proving/sandbox/cgroup.py,
  limits.py): a process count and memory for the whole command.

bwrap is started in its own process group; killing that group kills the outer bwrap, ``--die-with-parent``
kills the sandbox's init (the script around the command), and with it the kernel ends every process of the
sandbox's PID namespace. That script ends every process the command left before the copy is read back, so
background processes end with the command.

When bwrap is missing or cannot make a sandbox (no user namespaces), Bash returns an error instead of running
unconfined; only ``bash_sandbox = "none"`` runs the command directly in the folder on the host, with
secret-looking variables removed from its environment (and what it created among baton's and a person's
files removed afterwards, through ``scenarios.folder``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from agents.config import BashSandbox
from agents.tools.base import FileTool, ToolContext, ToolInputError, ToolResult, error, ok, string_input
from agents.tools.bash_copy import (
    MB,
    SANDBOX_DIR,
    SEED_DIR,
    STATE,
    WRAPPER,
    DiskFull,
    Unreadable,
    apply,
    make_seed,
    read_back,
    spool_limit,
)
from agents.tools.bash_output import Capture, Sink, Spool, collect
from agents.tools.paths import refusal
from context.redaction import is_secret_name
from proving.cpu_slots import cpu_slot
from proving.processes import kill_group
from proving.sandbox import cgroup
from proving.sandbox.bwrap import EMPTY_ENV, INSTALL_HINT, SandboxUnavailable, python_path_dirs, usable_bwrap
from proving.sandbox.bwrap import command as sandbox_command
from proving.sandbox.limits import BASH_MEMORY_MB, MAX_PROCESSES
from scenarios.configuring import configuring_part
from scenarios.confined import walk
from scenarios.folder import Folder

__all__ = ["BashTool", "SandboxUnavailable", "usable_bwrap"]

LISTED = 30  # paths listed per kind in a result (written, deleted, not applied, not copied)
SPOOL_MEMORY = 8 * MB  # what comes back from the sandbox is kept in memory up to this, then on disk


def _clean_env() -> dict[str, str]:
    """For an unconfined command only: the worker's environment without the API key, the
    broker URLs (they carry the Redis password) or anything named like a secret. A sandbox
    gets nothing of it (proving/sandbox/bwrap.py)."""
    hidden = {"ANTHROPIC_API_KEY", "BATON_BROKER_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}
    return {k: v for k, v in os.environ.items() if k not in hidden and not is_secret_name(k)}


def bwrap_command(bwrap: str, root: Path, seed: Path, disk_mb: int, command: str, out_fd: int) -> list[str]:
    """The argv that runs ``command`` with bash in a sandbox whose /scenario is a tmpfs of ``disk_mb`` filled from
    ``seed`` (read-only at /seed), ``root``'s state/ read-only in it, the changes sent back on ``out_fd``."""
    state = Path(os.path.abspath(root), STATE)
    # Checked here, bound by path: nothing a model drives writes the folder's state/ (the file tools refuse it).
    bind_state = ["--ro-bind", str(state), f"{SANDBOX_DIR}/{STATE}"] if Folder(root).is_dir(STATE) else []
    return sandbox_command(
        bwrap, writable={}, read_only={seed: SEED_DIR}, chdir=SANDBOX_DIR,
        # --as-pid-1: the script around the command is the sandbox's init, which no process inside can kill
        extra=["--size", str(disk_mb * MB), "--tmpfs", SANDBOX_DIR, *bind_state, "--as-pid-1"],
        env={"PATH": ":".join(python_path_dirs()), "HOME": "/tmp", "LANG": "C.UTF-8"},
        argv=["bash", "-c", WRAPPER, "bash", command, str(out_fd), str(MAX_PROCESSES), str(BASH_MEMORY_MB * 1024)],
    )


# ---- bash_sandbox = "none": the command runs in the folder itself ----------------------------------------------


def _truth(root: Path) -> set[str]:
    """What Write and Edit may not write that is in the folder now, at the top and in each iteration's folder
    (reached without following a link: a linked execution_outputs has none), and every file of a name that
    configures a program, wherever it is outside state/ (scenarios.configuring)."""
    folder, every = Folder(root), ("file", "folder", "link", "special")
    found = {name for name in folder.names(".", kinds=every) if refusal((name,))}
    for it in folder.names("execution_outputs", kinds=("folder",)):
        found |= {f"execution_outputs/{it}/{name}" for name in folder.names(f"execution_outputs/{it}", kinds=every)
                  if refusal(("execution_outputs", it, name))}
    for name in folder.names(".", kinds=("folder",)):
        if name != STATE:
            found |= {"/".join(parts) for parts in walk(root, (name,)) if configuring_part(parts)}
    return found


def _remove_created(root: Path, before: set[str]) -> list[str]:
    """Such paths an unconfined command created: removed (a link itself, never what it points to)."""
    folder, removed = Folder(root), []
    for rel in sorted(_truth(root) - before):
        if folder.kind(rel) == "folder":
            folder.remove_tree(rel)
        else:
            folder.remove(rel)
        removed.append(rel)
    return removed


# ---- the tool -----------------------------------------------------------------------------------------------


@dataclass
class _Ran:
    proc: subprocess.Popen[bytes]
    out: Capture
    err: Capture
    timed_out: bool
    lingering: bool
    elapsed: float


_COMMON = (
    "Run a bash command and get its exit code, stdout and stderr. A non-zero exit code is reported, not treated "
    "as a tool failure. The command has a time limit (`timeout_s`, capped by the agent's configured limit); on "
    "timeout the command and everything it started are killed. Each output stream is capped (its first and last "
    "part are kept): redirect big output to a file and Read or Grep it. There is no stdin. "
)
_SANDBOXED = (
    "The command runs in a sandbox, on its own copy of the scenario folder at /scenario (the working directory; "
    "use relative paths), made afresh for each command on a disk of its own. state/ is there read-only; symlinks "
    "and hard-linked files of the folder are not copied. When the command ends, what it changed in its copy is "
    "applied to the scenario folder under the rules of Write and Edit: files created, changed or deleted, except "
    "baton's and a person's (state/, run.json, handoffs/, an iteration's report.json, results.jsonl and traces/, "
    "scenario.toml, brief.md, CONVENTIONS.md). Symlinks, FIFOs and devices are never applied and file modes are "
    "not kept (run scripts as `bash x.sh`, `python x.py`); the result lists what was applied and what was not "
    "(`not_applied`, with why). A command that fills its disk or times out changes nothing. System programs under "
    "/usr are read-only, /tmp is private (512 MiB) and emptied after every command, no /etc and NO network. At "
    f"most {MAX_PROCESSES} processes. Background processes end when the command does. The environment holds only "
    "PATH, HOME=/tmp and LANG. "
)
_UNCONFINED = (
    "The command runs in the scenario folder (the working directory) and is NOT sandboxed: the operator turned "
    "the sandbox off, so it runs on the worker's host with the worker's access to files and network. Stay inside "
    "the scenario folder. Background processes still holding the output when the command exits are killed. "
    "Secrets are not in the environment. "
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
            return self._confined(command, limit, ctx)
        return self._unconfined(command, limit, ctx)

    def _confined(self, command: str, limit: float, ctx: ToolContext) -> ToolResult:
        try:
            bwrap = usable_bwrap()
        except SandboxUnavailable as exc:
            return error(_sandbox_error(str(exc), ctx.agent))
        disk_mb = ctx.settings.bash_disk_mb
        with tempfile.TemporaryDirectory(prefix="baton-bash-") as work:
            try:
                seed = make_seed(ctx.root, Path(work, "seed"), disk_mb)
            except DiskFull as exc:
                return error(str(exc))
            with tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY, dir=work) as file:
                spool = Spool(file, spool_limit(disk_mb))
                read_fd, write_fd = os.pipe()
                try:
                    argv = bwrap_command(bwrap, ctx.root, seed.folder, disk_mb, command, write_fd)
                    ran = self._execute(argv, ctx, limit, confined=True, changes=(read_fd, write_fd, spool))
                finally:
                    os.close(read_fd)
                data = self._data(command, ran, limit)
                if ran.timed_out:
                    data["note"] += "; nothing it changed was applied (a command that times out changes nothing)"
                    return ok(data)
                try:
                    back = read_back(file, spool.size, spool.overflow, disk_mb)
                except DiskFull as exc:
                    return error(str(exc), data)
                except Unreadable as exc:
                    return error(f"{exc}; nothing of what the command changed was applied", data)
                try:
                    done = apply(ctx, seed, back)
                finally:
                    back.close()
        data["applied"] = {"written": _listed(done.written), "deleted": _listed(done.deleted)}
        if done.not_applied:
            data["not_applied"] = done.not_applied[:LISTED]
            if len(done.not_applied) > LISTED:
                data["not_applied_total"] = len(done.not_applied)
        if seed.refused:
            data["not_copied"] = _listed(seed.refused)
        return ok(data)

    def _unconfined(self, command: str, limit: float, ctx: ToolContext) -> ToolResult:
        before = _truth(ctx.root)
        ran = self._execute(["bash", "-c", command], ctx, limit, confined=False)
        data = self._data(command, ran, limit)
        removed = _remove_created(ctx.root, before)
        if removed:
            data["removed"] = removed
            data["note"] = (f"{', '.join(removed)} cannot be created from Bash (a person configures them, or baton "
                            "writes them) and were removed")
        data["unconfined"] = True  # plain in every result, whatever the description said
        return ok(data)

    @staticmethod
    def _execute(argv: list[str], ctx: ToolContext, limit: float, *, confined: bool,
                 changes: tuple[int, int, Spool] | None = None) -> _Ran:
        """Run ``argv`` in its own process group and read its output; ``changes``: the pipe the sandbox sends
        its copy back on (its write end is handed to the child and closed here) and where that goes."""
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
                    pass_fds=(changes[1],) if changes else (),
                    preexec_fn=group.join if group else None,  # noqa: PLW1509 - one write to a cgroup file
                )
            except BaseException:
                if group:
                    group.close()
                raise
            finally:
                if changes:
                    os.close(changes[1])  # the child has it; the pipe ends when the sandbox does
            assert proc.stdout is not None and proc.stderr is not None
            out, err = Capture(ctx.settings.output_cap_chars), Capture(ctx.settings.output_cap_chars)
            pipes: dict[int, Sink] = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
            spool = changes[2] if changes else None
            if changes:
                pipes[changes[0]] = changes[2]
            timed_out = lingering = True  # if collecting fails, clean up as after a timeout
            try:
                # what comes back past its bound is refused anyway: no need to let it run on
                enough = (lambda: spool.overflow) if spool is not None else (lambda: False)
                timed_out, lingering = collect(proc, pipes, started + limit, enough)
            finally:
                # Kill only when members are known to be left: after a clean finish the
                # group is usually empty and its id could already belong to someone else.
                if timed_out or lingering:
                    kill_group(proc.pid)
                proc.wait()
                proc.stdout.close()
                proc.stderr.close()
                if group:
                    group.close()
        return _Ran(proc, out, err, timed_out, lingering, time.monotonic() - started)

    @staticmethod
    def _limit(tool_input: dict[str, Any], ctx: ToolContext) -> float:
        value = tool_input.get("timeout_s")
        if value is None:
            return ctx.settings.bash_timeout_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ToolInputError(f"timeout_s must be a positive number of seconds, got {value!r}")
        return min(float(value), ctx.settings.bash_timeout_s)

    @staticmethod
    def _data(command: str, ran: _Ran, limit: float) -> dict[str, Any]:
        data: dict[str, Any] = {
            "command": command,
            "exit_code": None if ran.timed_out else ran.proc.returncode,
            "stdout": ran.out.text(),
            "stderr": ran.err.text(),
            "timed_out": ran.timed_out,
            "duration_s": round(ran.elapsed, 2),
        }
        if ran.timed_out:
            data["note"] = (
                f"timed out after {limit:g} s; the command and its child processes were killed. "
                "Run something shorter, or pass a larger timeout_s (up to the configured limit)"
            )
        elif ran.lingering:
            data["note"] = "background processes still holding the output were killed when the command exited"
        return data


def _listed(paths: list[str]) -> list[str]:
    """The first LISTED paths, and how many more there are."""
    if len(paths) <= LISTED:
        return paths
    return [*paths[:LISTED], f"... and {len(paths) - LISTED} more"]


def _sandbox_error(why: str, role: str) -> str:
    return (
        f"Bash runs commands only in a bubblewrap sandbox, and none can be made here: {why}. An operator "
        f"must {INSTALL_HINT} and resume the run. Running Bash unconfined, with the host's files and network "
        f"in reach, is possible only by an explicit choice: `bash_sandbox = \"none\"` under `[agents.{role}]` "
        f"in scenario.toml or BATON_{role.upper()}_BASH_SANDBOX=none. Meanwhile use Read, Write, Edit, LS, "
        "Glob and Grep."
    )

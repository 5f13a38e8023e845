"""``Bash``: a command in the scenario folder, in its own process group, with a time
limit and bounded output (a head and a tail of each stream are kept)."""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from typing import Any, ClassVar

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


class BashTool(FileTool):
    name = "Bash"
    description = (
        "Run a bash command in the scenario folder (the working directory) and get its exit code, "
        "stdout and stderr. A non-zero exit code is reported, not treated as a tool failure. The "
        "command has a time limit (`timeout_s`, capped by the agent's configured limit); on timeout "
        "the command and everything it started are killed. Each output stream is capped (its first "
        "and last part are kept): redirect big output to a file and Read or Grep it. There is no "
        "stdin; background processes still holding the output when the command exits are killed. "
        "Secrets are not in the environment. Use Read/Write/Edit/Glob/Grep for file work; Bash is for running things."
    )
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
        started = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=ctx.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_clean_env(),
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
        return ok(self._data(command, proc, out, err, timed_out, lingering, limit, time.monotonic() - started))

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

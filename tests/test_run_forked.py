"""processes.run_forked: the export's box runs child_main in a forked child instead of a second interpreter. The
fork must give what a spawned child gets (run_limited): the minimal environment, its working directory, the
limits, the wall clock, and its whole group killed afterwards.

Each case forks from a fresh Python of its own (a fork copies one thread, and pytest's workers have several)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def forked(body: str, tmp_path: Path, timeout_s: float = 5.0, memory_mb: int = 256) -> dict:
    """Run ``body`` (the source of a function ``body()``) through run_forked in a fresh Python: how it ended."""
    script = textwrap.dedent(f"""
        import json, os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from proving.processes import run_forked
        {textwrap.indent(textwrap.dedent(body), '        ').strip()}
        done = run_forked(body, cwd=Path({str(tmp_path)!r}), timeout_s={timeout_s}, memory_mb={memory_mb})
        print(json.dumps(done.__dict__))
    """)
    env = {**os.environ, "BATON_SECRET_FOR_TEST": "sk-never-seen"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_child_gets_the_minimal_environment_its_folder_and_its_exit_code(tmp_path: Path) -> None:
    done = forked("""
        def body():
            print(json.dumps({"cwd": os.getcwd(), "env": sorted(os.environ)}), flush=True)
            os._exit(3)
    """, tmp_path)
    seen = json.loads(done["stdout_tail"])
    assert done["returncode"] == 3 and not done["timed_out"]
    assert seen["cwd"] == str(tmp_path)
    assert seen["env"] == ["HOME", "LANG", "PATH", "TMPDIR"]


def test_what_the_body_raises_is_told_on_stderr_and_ends_the_child_with_1(tmp_path: Path) -> None:
    done = forked("""
        def body():
            raise RuntimeError("broken tool")
    """, tmp_path)
    assert done["returncode"] == 1
    assert "RuntimeError: broken tool" in done["stderr_tail"]


def test_the_memory_limit_holds_in_the_fork(tmp_path: Path) -> None:
    done = forked("""
        def body():
            try:
                kept = bytearray(600 * 1024 * 1024)
            except MemoryError:
                os._exit(42)
            os._exit(0)
    """, tmp_path, memory_mb=256)
    assert done["returncode"] == 42


def test_the_wall_clock_kills_the_whole_group(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild.pid"
    done = forked(f"""
        def body():
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            Path({str(marker)!r}).write_text(str(pid))
            time.sleep(60)
    """, tmp_path, timeout_s=1.0)
    assert done["timed_out"] and done["returncode"] == -9
    assert gone(int(marker.read_text()))


def gone(pid: int, within_s: float = 5.0) -> bool:
    """Whether ``pid`` ends (or is a zombie waiting for init) within ``within_s``: SIGKILL is delivered as the
    process next runs, not as kill() returns."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False

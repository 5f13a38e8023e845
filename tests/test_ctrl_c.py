"""Ctrl-C ends a baton command with exit 130 and one line, whenever it lands (issue 38, item 6).

A newcomer saw a traceback when Ctrl-C landed during the gates (about 45 lines of uvicorn and asyncio) or
during the imports that start the command (``KeyboardInterrupt``). Each test starts a real ``baton`` in a
session of its own and sends SIGINT to the whole group, as a terminal's Ctrl-C does, at a chosen moment:

- during the imports: ``-X importtime`` (PYTHONPROFILEIMPORTTIME) prints a line on stderr as each module is
  imported, so the signal is sent once a given module was, and others still are, being imported. The first
  moment is the ``workers`` package, the first of baton's own modules; before it the interpreter itself is
  starting, and what Ctrl-C does there is Python's (a signal that kills it, or a failed ``site``);
- during a run: while Init designs, while Execute works, while the gates run;
- during ``baton evaluate``'s gates.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scenarios.run import copy_scenario
from tests.export_support import EXAMPLE, UNSET
from tests.shared_runs import SharedRun

BATON = Path(sys.executable).parent / "baton"
EVERY_GATE = "coverage,duplicate,floor,mutation,solver"
WAIT_S = 300.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


class Started:
    """A ``baton`` process in its own session, its stdout and stderr read line by line as they come."""

    def __init__(self, folder: Path, *args: str, **env: str) -> None:
        if not BATON.exists():
            pytest.skip("the baton entry point is not installed (pip install -e .)")
        environment = {k: v for k, v in os.environ.items() if k not in UNSET} | {"COLUMNS": "200"} | env
        self.proc = subprocess.Popen([str(BATON), "--scenarios-dir", str(folder), *args], env=environment,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=self._read, args=(stream, lines), daemon=True)
                        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:  # noqa: ANN001
        for line in stream:
            lines.append(line)

    def wait_for(self, seen: str, where: str = "out") -> None:
        lines = self.out if where == "out" else self.err
        deadline = time.monotonic() + WAIT_S
        while not any(seen in line for line in list(lines)):
            assert self.proc.poll() is None, f"ended before {seen!r}: {''.join(self.out + self.err)}"
            assert time.monotonic() < deadline, f"no {seen!r} in {WAIT_S} s: {''.join(self.out + self.err)}"
            time.sleep(0.02)

    def ctrl_c(self) -> tuple[int, str, str]:
        """SIGINT to the group, as a terminal sends it; the exit code, stdout and stderr (import lines left out)."""
        os.killpg(self.proc.pid, signal.SIGINT)
        code = self.proc.wait(timeout=WAIT_S)
        for reader in self.readers:
            reader.join(timeout=10)
        err = "".join(line for line in self.err if not line.startswith("import time:"))
        return code, "".join(self.out), err


def assert_interrupted(code: int, out: str, err: str) -> None:
    said = out + err
    assert code == 130, said
    assert "Traceback" not in said and "KeyboardInterrupt" not in said and "Aborted" not in said, said
    assert sum("interrupted" in line for line in said.splitlines()) == 1, said  # one line says so


@pytest.mark.parametrize("module", ["workers", "click", "agents.config", "redis", "workers.errors"])
def test_during_the_imports(tmp_path: Path, module: str) -> None:
    started = Started(tmp_path, "status", PYTHONPROFILEIMPORTTIME="1")
    started.wait_for(f" {module}\n", where="err")  # imported; the command's other modules are still coming
    assert_interrupted(*started.ctrl_c())


@pytest.mark.parametrize("moment", ["designing (Init)", "executing (Execute)", "proving (the gates)"])
def test_during_a_run(tmp_path: Path, moment: str) -> None:
    root = copy_scenario(EXAMPLE, tmp_path / "refund_desk")
    started = Started(tmp_path, "run", "refund_desk", "--auto-approve", "--profile", "demo",
                      BATON_PROVING_GATES=EVERY_GATE)
    started.wait_for(moment)
    time.sleep(1.0)  # inside it: a step, a tool call, an Inspect eval
    assert_interrupted(*started.ctrl_c())
    json.loads((root / "run.json").read_text())  # what was done is on disk, whole
    status = subprocess.run([str(BATON), "--scenarios-dir", str(tmp_path), "status", "refund_desk"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert status.returncode == 0, status.stdout + status.stderr


@pytest.mark.parametrize("after_s", [0.5, 3.0, 6.0])
def test_during_the_gates_of_baton_evaluate(finished_run: SharedRun, tmp_path: Path, after_s: float) -> None:
    finished_run.copy_to(tmp_path)
    started = Started(tmp_path, "evaluate", "refund_desk", BATON_PROVING_GATES=EVERY_GATE)
    started.wait_for("results.jsonl and traces/")  # the evaluation is written; the gates begin
    time.sleep(after_s)
    assert_interrupted(*started.ctrl_c())

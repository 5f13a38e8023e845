"""A worker stand-in for tests/test_sandbox_escapes.py: started with secrets in its
environment (as a real worker has its API key and broker URL), it runs one evaluation
or one Bash command and prints what came back as JSON.

A separate process on purpose: ``/proc/<pid>/environ`` shows the environment a process
was started with, so secrets set in the test process itself would not be there to find.

Usage: ``python tests/escape_driver.py evaluate ROOT TIMEOUT_S MEMORY_MB [DISK_MB]``
       ``python tests/escape_driver.py bash FOLDER COMMAND``
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.config import ToolSettings  # noqa: E402
from agents.tools.base import ToolContext  # noqa: E402
from agents.tools.bash import BashTool  # noqa: E402
from proving.evaluation.run import run_evaluation  # noqa: E402


def main(argv: list[str]) -> int:
    if argv[1] == "evaluate":
        limits = {"timeout_s": float(argv[3]), "memory_mb": int(argv[4])}
        # DISK_MB where the evaluation takes one (the code before issue 30 had no disk limit: a test run
        # against it then shows what a sample could write)
        if len(argv) > 5 and "disk_mb" in inspect.signature(run_evaluation).parameters:
            limits["disk_mb"] = int(argv[5])
        report = run_evaluation(Path(argv[2]), 1, **limits)
        print(json.dumps(report))
        return 0
    ctx = ToolContext(root=Path(argv[2]), agent="execute", iteration=1,
                      settings=ToolSettings(bash_enabled=True, bash_timeout_s=30))
    result = BashTool().run({"command": argv[3]}, ctx)
    print(json.dumps({"status": result.status, "data": result.data, "error": result.error}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

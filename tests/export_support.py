"""The CLI run in-process and offline, and the example run with it: what the CLI and export tests start from."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from click.testing import Result
from typer.testing import CliRunner

from scenarios.run import copy_scenario
from workers.cli import cli

EXAMPLE = Path(__file__).resolve().parents[1] / "scenarios" / "refund_desk"
# Unset for every test: a broker or an API key in the developer's shell must not
# turn these offline runs into distributed or paid ones.
UNSET = ("BATON_BROKER_URL", "CELERY_BROKER_URL", "ANTHROPIC_API_KEY", "BATON_PROFILE", "BATON_SCENARIOS_DIR")


def baton(folder: Path, *args: str, **env: str) -> Result:
    """``baton --scenarios-dir FOLDER ARGS`` in this process, with ``env`` set for the call. The CLI exports
    BATON_SCENARIOS_DIR; passing it as None makes the runner restore it afterwards."""
    environment: dict[str, str | None] = {name: None for name in UNSET} | {"COLUMNS": "200"} | env
    return CliRunner().invoke(cli, ["--scenarios-dir", str(folder), *args], env=environment)


def run_example(folder: Path, *flags: str) -> tuple[Path, int, str]:
    """The example copied into ``folder`` and run offline (simulated, demo profile) with ``flags``: its root,
    the exit code and the output (``tests.shared_runs`` shares such a run across a session)."""
    root = copy_scenario(EXAMPLE, folder / "refund_desk")
    result = baton(folder, "run", "refund_desk", "--profile", "demo", *flags)
    return root, result.exit_code, result.output


def runtime_of(export: Path) -> ModuleType:
    """The exported ``baton_runtime.session``, imported from the export folder as task.py does."""
    for name in [m for m in sys.modules if m == "baton_runtime" or m.startswith("baton_runtime.")]:
        del sys.modules[name]
    sys.path.insert(0, str(export))
    try:
        return importlib.import_module("baton_runtime.session")
    finally:
        sys.path.remove(str(export))

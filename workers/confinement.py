"""What of a scenario runs unconfined, for ``baton status``: only a person can turn a sandbox
off (BATON_EVAL_SANDBOX=none, ``bash_sandbox = "none"``), and status says so every time."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from agents.config import ConfigError
from agents.settings_layers import resolve_agents
from proving.sandbox.policy import EVAL_SANDBOX_ENV, evaluation_sandbox
from proving.startup import fixed
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import StoreError


def unconfined(root: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """One short note per thing that runs, or ran, a model's code outside the sandbox."""
    env = fixed().environ if env is None else env  # as the process started: what its evaluations do
    notes = []
    try:
        if evaluation_sandbox(env) == "none":
            notes.append(f"evaluation UNCONFINED ({EVAL_SANDBOX_ENV}=none here)")
    except ValueError:
        notes.append(f"{EVAL_SANDBOX_ENV} is invalid: evaluation refuses to run")
    if (ran := _last_report_unconfined(root)) is not None:
        notes.append(f"iteration {ran} was evaluated UNCONFINED")
    try:
        configs = resolve_agents(root, env=env)
    except (ConfigError, StoreError, ValueError, OSError):
        return notes  # an invalid scenario.toml has its own note
    for role, config in configs.items():
        if config.tools.bash_enabled and config.tools.bash_sandbox == "none":
            notes.append(f"{role}'s Bash UNCONFINED (bash_sandbox = \"none\")")
    return notes


def _last_report_unconfined(root: Path) -> int | None:
    folder = Folder(root)
    numbers = sorted((int(m.group(1)) for name in folder.names("execution_outputs", kinds=("folder",))
                      if (m := re.fullmatch(r"iteration_(\d+)", name))), reverse=True)
    for number in numbers:
        report = folder.read_json_or_none(f"execution_outputs/iteration_{number}/report.json", RECORD_BYTES)
        if report is None:
            continue
        return number if isinstance(report, dict) and report.get("sandbox") == "none" else None
    return None

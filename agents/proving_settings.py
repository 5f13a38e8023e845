"""A scenario's ``ProvingSettings`` (proving.evaluation.gates): how the gates that prove it run.

Read here, not in proving/ (which never reads the agents' configuration), from two layers, the higher winning:

1. scenario.toml's ``[proving]`` table: ``gates = ["coverage", "duplicate"]``, ``solver_model``, ``solver_k``,
   ``panel``, ``max_mutants_per_sample``; a key left out keeps its default (``ProvingSettings``: every gate);
2. environment variables ``BATON_PROVING_<KEY>`` (``BATON_PROVING_GATES=coverage,duplicate``,
   ``BATON_PROVING_SOLVER_K=5``; a list is comma-separated, ``none`` or an empty value unsets the solver model).

Every problem names where the value came from, as the agents' settings do.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agents.config import ConfigError
from proving.evaluation.gates import ProvingSettings

PREFIX = "BATON_PROVING_"
KEYS = tuple(ProvingSettings.model_fields)
LISTS = ("gates", "panel")


def check_table(table: Mapping[str, Any], where: str = "[proving]") -> ProvingSettings:
    """The settings a ``[proving]`` table gives, or ValueError naming every unknown key and bad value."""
    unknown = [key for key in table if key not in KEYS]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
        raise ValueError(f"unknown setting {', '.join(hints)} in {where}; valid settings: {', '.join(KEYS)}")
    try:
        return ProvingSettings.model_validate(dict(table))
    except ValidationError as exc:
        raise ValueError("; ".join(f"{where} {'.'.join(map(str, e['loc']))} = {e['input']!r}: {e['msg']}"
                                   for e in exc.errors())) from None


def env_table(env: Mapping[str, str]) -> dict[str, Any]:
    """The ``BATON_PROVING_*`` variables as a ``[proving]`` table (ConfigError for a name that is no setting)."""
    table: dict[str, Any] = {}
    for name, text in env.items():
        if not name.startswith(PREFIX):
            continue
        key = name.removeprefix(PREFIX).lower()
        if key not in KEYS:
            raise ConfigError(f"unknown proving setting in environment variable {name}; BATON_PROVING_<SETTING> "
                              f"expects SETTING among: {', '.join(k.upper() for k in KEYS)}")
        word = text.strip()
        if key in LISTS:
            table[key] = [part.strip() for part in word.split(",") if part.strip()]
        elif key == "solver_model":
            table[key] = None if word.lower() in ("", "none", "null") else word
        else:
            table[key] = word  # pydantic turns "5" into 5 (not strict here) and says so when it cannot
    return table


def resolve(table: Mapping[str, Any], toml: Path, env: Mapping[str, str] | None = None) -> ProvingSettings:
    """scenario.toml's ``[proving]`` ``table`` under the ``BATON_PROVING_*`` variables (ConfigError naming both);
    ``agents.settings_layers.proving_settings`` reads the table."""
    from_env = env_table(os.environ if env is None else env)
    where = f"{toml} [proving]" + (f" with {', '.join(PREFIX + k.upper() for k in from_env)}" if from_env else "")
    try:
        return check_table({**table, **from_env}, where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None

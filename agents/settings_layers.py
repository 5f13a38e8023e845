"""Resolving an agent's settings from four layers (docs/agents.md, "Settings").

Lowest to highest, each layer overriding the one below:

1. built-in defaults (``agents.config.ROLE_DEFAULTS`` and the section defaults),
   plus a profile from ``PROFILES`` (``demo`` shrinks the windows so compaction
   happens in a short offline run);
2. ``scenario.toml``: ``[agents]`` for both roles, ``[agents.init]`` /
   ``[agents.execute]`` for one (the role table wins); settings by flat name
   (``threshold = 600_000``) or in their section (``[agents.execute.context]``);
3. environment variables: ``BATON_<SETTING>`` for both roles,
   ``BATON_<ROLE>_<SETTING>`` for one (the role variable wins), where SETTING is
   the flat name (``BATON_EXECUTE_THRESHOLD``) or section and name
   (``BATON_EXECUTE_CONTEXT_THRESHOLD``);
4. explicit arguments (CLI flags).

Every resolved value remembers where it came from, so an invalid combination is
reported with the file, table or variable to fix, e.g. ``execute.threshold =
800000 (from environment variable BATON_EXECUTE_THRESHOLD) must be below
execute.window = 200000 (from scenario.toml [agents.execute])``.

The API key is deliberately absent: it is a secret, read only by the Anthropic
client, never part of a config that may be logged or sent as a task argument.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.config import (
    BUILT_IN,
    FLAT_NAMES,
    SETTABLE_FIELDS,
    AgentConfig,
    ConfigError,
    field_annotation,
    flat_name,
    flatten,
)
from agents.pricing import Price
from agents.proving_settings import check_table, resolve
from agents.role import ROLES, Role
from proving.evaluation.gates import ProvingSettings
from scenarios.confined import IsFolder, Missing
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import StoreError

# Profiles have the shape of the scenario.toml [agents] table: keys for both
# roles, plus optional "init" / "execute" tables for one.
PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "demo": {
        "start_tokens": 2_000,
        "max_tokens": 2_048,
        "summary_max_tokens": 1_500,
        "init": {"window": 16_000, "threshold": 11_000},
        "execute": {"window": 24_000, "threshold": 18_000},
    },
}
DEFAULT_PROFILE = "default"

ARGUMENT = "explicit argument"
PROFILE_VARIABLE = "BATON_PROFILE"


# ---- scenario.toml ----------------------------------------------------------------


class ScenarioConfig(BaseModel):
    """The whole scenario.toml. The ``agents`` table is kept raw; its keys are
    checked here, its values when an agent's config is resolved."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    name: str = Field(min_length=1)
    description: str = ""
    target_success_rate: float = Field(0.85, ge=0, le=1)
    # The targets of the gates that run after Execute's handoff (docs/proving.md): a floor agent passes at most
    # target_floor of the samples, the blind solver solves at least target_solvable_share of them, and at least
    # target_coverage of the design's rules are exercised. A target whose gate is not in [proving] gates is not
    # measured (status says so); a gate that is configured but could not run misses its target.
    target_floor: float = Field(0.0, ge=0, le=1)
    target_solvable_share: float = Field(1.0, ge=0, le=1)
    target_coverage: float = Field(1.0, ge=0, le=1)
    max_iterations: int = Field(3, ge=1, le=1_000)
    proving: dict[str, Any] = Field(default_factory=dict)  # [proving]: agents.proving_settings checks it
    profile: str | None = None
    agents: dict[str, Any] = Field(default_factory=dict)
    prices: dict[str, Price] = Field(default_factory=dict)  # by model id, over agents.pricing.DEFAULT_PRICES

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, profile: str | None) -> str | None:
        if profile is not None and profile not in PROFILES:
            raise ValueError(unknown_profile_message(profile))
        return profile

    @field_validator("proving")
    @classmethod
    def _known_proving_keys(cls, proving: dict[str, Any]) -> dict[str, Any]:
        check_table(proving)
        return proving

    @field_validator("agents")
    @classmethod
    def _known_agent_keys(cls, agents: dict[str, Any]) -> dict[str, Any]:
        split_tables(agents, lambda role: "[agents]" if role is None else f"[agents.{role}]")
        return agents


def load_scenario_config(path: Path | str) -> ScenarioConfig:
    """Read and validate a scenario.toml; every error names the file."""
    path = Path(os.path.abspath(path))
    try:
        # Beneath its own folder, no link followed, bounded: a person's file, but in a folder models write in.
        data = tomllib.loads(Folder(path.parent).read_text(path.name, RECORD_BYTES))
    except Missing:
        raise ConfigError(f"scenario file not found: {path}") from None
    except IsFolder:
        raise ConfigError(f"{path} is a directory, expected a scenario.toml file") from None
    except StoreError as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively: 100k "[" exhaust the stack
        raise ConfigError(f"{path}: arrays or tables nested too deeply to be read (a scenario.toml needs a few "
                          "levels at most); fix the file") from None
    try:
        return ScenarioConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("\n".join(_scenario_problem(path, error) for error in exc.errors())) from None


def _scenario_problem(path: Path, error: Any) -> str:
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "value_error":  # our own messages name what is wrong; skip the (large) input
        return f"{path}: {key}: {_error_text(error)}"
    if error["type"] == "extra_forbidden":
        valid = ", ".join(ScenarioConfig.model_fields)
        return f"{path}: unknown key {key!r}; valid keys: {valid}"
    if error["type"] == "missing":
        return f"{path}: missing required key {key!r}"
    return f"{path}: {key} = {error['input']!r}: {_error_text(error)}"


def scenario_toml_path(scenario_dir_or_toml: Path | str) -> Path:
    """A scenario folder's scenario.toml, or the given file itself."""
    path = Path(scenario_dir_or_toml)
    return path / "scenario.toml" if Folder(path.parent).kind(path.name) == "folder" else path


# ---- resolution -------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str


Settings = dict[str, Setting]


def resolve_config(
    role: Role,
    *,
    scenario_toml: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    profile: str | None = None,
) -> AgentConfig:
    """One agent's config from defaults (+ profile) < scenario.toml < environment < arguments.

    ``env`` defaults to ``os.environ``. ``overrides`` has the shape of the
    [agents] table (field names, plus optional "init"/"execute" mappings); a
    None value means "not given", as for an unset CLI flag.
    """
    toml_path = scenario_toml_path(scenario_toml) if scenario_toml is not None else None
    scenario = load_scenario_config(toml_path) if toml_path is not None else None
    return build_config(role, _layers(role, scenario, toml_path, os.environ if env is None else env, overrides,
                                      profile))


def resolve_agents(
    scenario_dir_or_toml: Path | str | None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    profile: str | None = None,
) -> dict[str, AgentConfig]:
    """Both agents' configs for a scenario folder (or its scenario.toml), read once."""
    toml_path = scenario_toml_path(scenario_dir_or_toml) if scenario_dir_or_toml is not None else None
    scenario = load_scenario_config(toml_path) if toml_path is not None else None
    env = os.environ if env is None else env
    return {role: build_config(role, _layers(role, scenario, toml_path, env, overrides, profile)) for role in ROLES}


def setting_sources(scenario_dir: Path, role: Role, env: Mapping[str, str] | None = None,
                    profile: str | None = None) -> dict[str, str]:
    """Where each of ``role``'s settings comes from (a field absent here is the built-in default)."""
    toml_path = scenario_toml_path(scenario_dir)
    scenario = load_scenario_config(toml_path)
    settings = _layers(role, scenario, toml_path, os.environ if env is None else env, None, profile)
    return {field: setting.source for field, setting in settings.items()}


def _layers(
    role: Role,
    scenario: ScenarioConfig | None,
    toml_path: Path | str | None,
    env: Mapping[str, str],
    overrides: Mapping[str, Any] | None,
    profile: str | None,
) -> Settings:
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    profile_name, profile_source = choose_profile(profile, env, scenario, toml_path)
    if profile_name not in PROFILES:
        raise ConfigError(f"{unknown_profile_message(profile_name)} (from {profile_source})")

    settings: Settings = {}
    settings.update(table_layer(PROFILES[profile_name], role, lambda _: f"profile {profile_name!r}"))
    if scenario is not None:
        settings.update(table_layer(scenario.agents, role, _toml_source(toml_path)))
    settings.update(env_layer(env, role))
    settings.update(table_layer(overrides or {}, role, lambda _: ARGUMENT))
    return settings


def choose_profile(
    profile: str | None,
    env: Mapping[str, str],
    scenario: ScenarioConfig | None,
    toml_path: Path | str | None,
) -> tuple[str, str]:
    """The profile name and where the choice came from, in layer order."""
    if profile is not None:
        return profile, ARGUMENT
    if env.get(PROFILE_VARIABLE):
        return env[PROFILE_VARIABLE].strip(), f"environment variable {PROFILE_VARIABLE}"
    if scenario is not None and scenario.profile is not None:
        return scenario.profile, f"{toml_path} profile"
    return DEFAULT_PROFILE, BUILT_IN


def unknown_profile_message(name: str) -> str:
    return f"unknown profile {name!r}; known profiles: {', '.join(PROFILES)}"


def build_config(role: Role, settings: Settings) -> AgentConfig:
    """Validate the merged settings, turning pydantic's errors into ConfigError with sources."""
    sources = {field: setting.source for field, setting in settings.items()}
    values = {field: setting.value for field, setting in settings.items()}
    try:
        # strict=True here (not only in the sections' config) also reaches the engine's Policy.
        return AgentConfig.model_validate({**values, "role": role}, context={"sources": sources}, strict=True)
    except ValidationError as exc:
        problems = [_field_problem(role, error, sources) for error in exc.errors()]
        raise ConfigError("\n".join(problems)) from None


def _field_problem(role: str, error: Any, sources: Mapping[str, str]) -> str:
    if not error["loc"]:  # a rule between fields: its message already names them
        return _error_text(error)
    field = flat_name(error["loc"])
    return f"{role}.{field} = {error['input']!r} (from {sources.get(field, BUILT_IN)}): {_error_text(error)}"


def _error_text(error: Any) -> str:
    # pydantic prefixes our own ValueError messages with "Value error, "; use the original.
    if error["type"] == "value_error":
        return str(error["ctx"]["error"])
    return error["msg"]


# ---- layers -----------------------------------------------------------------------


def table_layer(table: Mapping[str, Any], role: Role, source: Callable[[str | None], str]) -> Settings:
    """Settings for ``role`` from an [agents]-shaped table: shared keys, then the role's table.

    ``source(None)`` labels the shared keys, ``source(role)`` the role's table.
    """
    shared, per_role = split_tables(table, source)
    layer = {field: Setting(value, source(None)) for field, value in flatten(shared).items() if value is not None}
    role_table = flatten(per_role.get(role, {}))
    layer.update({field: Setting(value, source(role)) for field, value in role_table.items() if value is not None})
    return layer


def split_tables(
    table: Mapping[str, Any], source: Callable[[str | None], str]
) -> tuple[dict[str, Any], dict[str, Mapping[str, Any]]]:
    """Split an [agents]-shaped table into shared settings and per-role tables,
    rejecting unknown keys (all of them at once, so one fix round is enough)."""
    shared = {key: value for key, value in table.items() if key not in ROLES}
    per_role = {key: value for key, value in table.items() if key in ROLES}
    problems = [_unknown_keys(shared, source(None), role_tables_allowed=True)]
    for role, role_table in per_role.items():
        if isinstance(role_table, Mapping):
            problems.append(_unknown_keys(role_table, source(role)))
        else:
            problems.append(f"{source(role)} must be a table of settings, got {role_table!r}")
    problems = [problem for problem in problems if problem]
    if problems:
        raise ConfigError("\n".join(problems))
    return shared, per_role


def _unknown_keys(table: Mapping[str, Any], where: str, role_tables_allowed: bool = False) -> str | None:
    unknown = [key for key in flatten(table) if key not in SETTABLE_FIELDS]
    if not unknown:
        return None
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, SETTABLE_FIELDS, n=1)
        hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    also = ", plus the init and execute tables" if role_tables_allowed else ""
    return (f"unknown setting {', '.join(hints)} in {where}; valid settings: {', '.join(SETTABLE_FIELDS)}{also} "
            "(or the same names inside a model, context or tools table; the model id is model.name)")


def _toml_source(toml_path: Path | str | None) -> Callable[[str | None], str]:
    return lambda role: f"{toml_path} [agents]" if role is None else f"{toml_path} [agents.{role}]"


def env_layer(env: Mapping[str, str], role: Role) -> Settings:
    """Settings from BATON_<FIELD> (both roles), then BATON_<ROLE>_<FIELD> (this role).

    Other BATON_ variables belong to other parts of baton and are ignored, except
    BATON_INIT_* / BATON_EXECUTE_* names that match no setting: those are typos
    that would otherwise be silently ignored.
    """
    _reject_unknown_role_variables(env)
    layer: Settings = {}
    for prefix in ("BATON_", f"BATON_{role.upper()}_"):
        for field in SETTABLE_FIELDS:
            for name in _variable_names(prefix, field):
                if name not in env:
                    continue
                source = f"environment variable {name}"
                try:
                    layer[field] = Setting(parse_env_value(field, env[name]), source)
                except ValueError as exc:
                    raise ConfigError(f"{role}.{field} = {env[name]!r} (from {source}): {exc}") from None
    return layer


def _variable_names(prefix: str, field: str) -> list[str]:
    """The flat name, then the sectioned one (it wins when both are set)."""
    names = [prefix + field.upper()]
    path = FLAT_NAMES[field]
    if len(path) > 1:
        names.append(prefix + "_".join(path).upper())
    return names


def _reject_unknown_role_variables(env: Mapping[str, str]) -> None:
    known = {
        name for role in ROLES for field in SETTABLE_FIELDS for name in _variable_names(f"BATON_{role.upper()}_", field)
    }
    prefixes = tuple(f"BATON_{role.upper()}_" for role in ROLES)
    unknown = sorted(name for name in env if name.startswith(prefixes) and name not in known)
    if unknown:
        valid = ", ".join(field.upper() for field in SETTABLE_FIELDS)
        raise ConfigError(
            f"unknown agent setting in environment variable {', '.join(unknown)}; "
            f"BATON_<ROLE>_<SETTING> expects SETTING among: {valid}"
        )


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_NONE = {"", "none", "null"}
_INT_PATTERN = re.compile(r"([+-]?\d+(?:\.\d+)?)([km]?)")
_INT_SUFFIXES = {"": 1, "k": 1_000, "m": 1_000_000}


def parse_env_value(field: str, text: str) -> Any:
    """An environment string as the field's type (ValueError if it is not one);
    the model then validates the range or the choice."""
    annotation = field_annotation(field)
    if field == "threshold" and (text.strip().endswith("%") or "." in text and parse_float(text) < 1):
        return parse_fraction(text)  # a share of the window: "70%" or "0.7"
    if annotation is bool:
        return parse_bool(text)
    if annotation is int:
        return parse_int(text)
    if annotation is float:
        return parse_float(text)
    if annotation == float | None:
        return None if text.strip().lower() in _NONE else parse_float(text)
    return text.strip()  # str and Literal fields


def parse_fraction(text: str) -> float:
    """"70%" or "0.7" as 0.7; a share must be above 0 and below 1."""
    word = text.strip()
    value = parse_float(word[:-1]) / 100 if word.endswith("%") else parse_float(word)
    if not 0 < value < 1:
        raise ValueError("a share of the window must be above 0 and below 1 (e.g. 0.7 or 70%)")
    return value


def parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("expected a number") from None


def parse_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"expected a boolean ({'/'.join(sorted(_TRUE | _FALSE))})")


def parse_int(text: str) -> int:
    """Integers such as 700000, 700_000, 700k, 1M or 1.5M."""
    match = _INT_PATTERN.fullmatch(text.strip().replace("_", "").lower())
    if match is None:
        raise ValueError("expected an integer such as 700000, 700_000, 700k or 1M")
    number, suffix = match.groups()
    value = Decimal(number) * _INT_SUFFIXES[suffix]  # Decimal: "1.5M" is exact, no float rounding
    if value != value.to_integral_value():
        raise ValueError("expected a whole number")
    return int(value)


def proving_settings(root: Path, env: Mapping[str, str] | None = None) -> ProvingSettings:
    """How the gates prove the scenario at ``root``: its scenario.toml ``[proving]``, then ``BATON_PROVING_*``."""
    toml = scenario_toml_path(root)
    return resolve(load_scenario_config(toml).proving, toml, env)


def scenario_prices(root: Path) -> dict[str, Price]:
    """A scenario's own prices (scenario.toml ``[prices.<model id>]``), which win over agents.pricing's defaults."""
    try:
        return dict(load_scenario_config(scenario_toml_path(root)).prices)
    except ConfigError:  # a broken scenario.toml is reported where it is read for settings; price by the defaults
        return {}

"""Agent settings, one section per component (docs/agents.md, "Settings").

An ``AgentConfig`` has three sections, as mini-swe-agent's config has one per part:

- ``model``: which model and backend, and the summary call's limits (``ModelSettings``);
- ``context``: how the context is kept, the engine's own ``context.assembly.Policy``;
- ``tools``: what the tools may do (``ToolSettings``);

plus the role, its Celery queue and the steps a turn may take.

Every setting also has a short flat name (``threshold``, ``bash_enabled``, ``model``
for ``model.name``): the names scenario.toml, the environment and the CLI have
always used, and the ones errors show. ``AgentConfig`` accepts flat names, dotted
names and nested sections alike, and checks the rules between settings before the
sections are built, so a message can name each setting's source (see
``agents.settings_layers``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from agents.role import Role
from context.policy import Policy

# The settings that differ between the two agents (the table in docs/agents.md),
# by flat name; all others share the section defaults. A model is a line, resolved
# to the line's newest active model through the Models API when a run starts
# (agents/catalogue.py); the working windows are capped at that model's own.
ROLE_DEFAULTS: dict[Role, dict[str, Any]] = {
    # max_tokens: thinking is billed as output and counts against max_tokens, so both roles get room for
# thinking plus the answer (the engine's own default, 8,192, was sized for answers alone).
# effort (docs/agents.md, "Thinking and the prefix"): Init designs, in few calls whose quality decides
    # every iteration, so it thinks harder than Opus 5.5's own default (medium); Execute makes many
    # mechanical tool calls, so medium, below Sonnet 5.5's default (high): cheaper and faster per step.
    # compactor (docs/context.md, "The API's own context tools"): the API's on-demand compaction keeps the thinking
    # in Init's kept turns valid and cost Init's stand-in in the replay no more than baton's own summary (0.87x
    # where it compacts); Execute keeps baton's own, the cheapest at the same recall on its stand-ins.
    "init": {"model": "opus", "window": 200_000, "threshold": 150_000, "keep_last_steps": 3, "queue": "init",
             "effort": "high", "max_tokens": 32_000, "compactor": "api"},
    "execute": {"model": "sonnet", "window": 1_000_000, "threshold": 700_000, "keep_last_steps": 5,
                "queue": "execute", "effort": "medium", "max_tokens": 32_000},
}

BUILT_IN = "built-in default"

# strict: a TOML string "200000" or a boolean is a mistake, not a number;
# environment strings are parsed explicitly before they get here.
_STRICT = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

# Upper bounds that every use accepts: a time limit becomes RLIMIT_CPU seconds and a poll() timeout in
# milliseconds (a C int: about 24 days), a memory limit becomes RLIMIT_AS bytes (an unsigned 64-bit
# number), counts become list sizes. `eval_timeout_s = 1e300` or `eval_memory_mb = 2**63-1` is a setting's
# mistake named with its source, not an OverflowError in the middle of an evaluation.
MAX_SECONDS = 86_400.0  # a day
MAX_MEMORY_MB = 1_048_576  # 1 TiB
MAX_CHARS = 100_000_000
MAX_TOKENS = 10_000_000  # ten times today's largest window
MAX_STEPS = 100_000


class ConfigError(ValueError):
    """A setting is invalid; the message names the setting, its value and its source."""


# off: no thinking parameter at all (models before preserved thinking); the 5.5 models refuse "disabled".
Thinking = Literal["adaptive", "between_tools", "off"]
ThinkingDisplay = Literal["updates", "summarized", "omitted"]
Effort = Literal["low", "medium", "high", "xhigh", "max"]

class ModelSettings(BaseModel):
    model_config = _STRICT

    name: str = Field(min_length=1, description="a model line (opus, sonnet, haiku) or an exact model id")
    backend: Literal["auto", "anthropic", "simulated"] = Field(
        "auto", description="auto: anthropic when ANTHROPIC_API_KEY is set, else simulated"
    )
    temperature: float | None = Field(None, ge=0, le=1, description="None: the API default")
    # The summary itself is asked to stay within 4,000 tokens; thinking is billed as output and counts
    # against max_tokens too, so the call gets room for both.
    summary_max_tokens: int = Field(16_000, gt=0, le=MAX_TOKENS,
                                    description="output of a compaction summary, thinking included")
    summary_temperature: float = Field(0.0, ge=0, le=1)
    summary_timeout_s: float = Field(120.0, gt=0, le=MAX_SECONDS, description="after this the summary falls back")
    # The model's own output limit, from the catalogue when the model is resolved; None: not known (offline).
    max_output_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS, description="the model's largest max_tokens")
    # How the model thinks (agents/thinking.py). Every request names it, the summary's included: a change of
    # the thinking parameters or of effort invalidates the cached message blocks.
    thinking: Thinking = Field("adaptive", description="adaptive, between_tools (Sonnet 5.5 only) or off")
    thinking_display: ThinkingDisplay = Field(
        "updates", description="updates: the notes between tool calls come back as text (billing is the same)"
    )
    effort: Effort | None = Field(None, description="output_config.effort; None: the model's own default")


# bwrap: Bash runs in a bubblewrap sandbox (agents/tools/bash.py); none: on the host,
# unconfined, only ever by an operator's explicit choice.
BashSandbox = Literal["bwrap", "none"]


class ToolSettings(BaseModel):
    model_config = _STRICT

    bash_enabled: bool = Field(False, description="the Bash tool is off by default, enabled per role")
    bash_sandbox: BashSandbox = Field("bwrap", description="bwrap, or none to run Bash unconfined")
    bash_timeout_s: float = Field(60.0, gt=0, le=MAX_SECONDS)
    # A command works on its own copy of the scenario folder, on a tmpfs of this size (agents/tools/bash_copy.py):
    # what it writes, the copy included, past this fails that command and fills nothing else.
    bash_disk_mb: int = Field(1024, gt=0, le=MAX_MEMORY_MB, description="disk of a Bash command's folder copy")
    output_cap_chars: int = Field(30_000, gt=0, le=MAX_CHARS, description="tool output kept per call")
    eval_timeout_s: float = Field(10.0, gt=0, le=MAX_SECONDS, description="time limit per evaluated sample")
    eval_memory_mb: int = Field(512, gt=0, le=MAX_MEMORY_MB, description="memory limit per evaluated sample")
    # A sample's folder is a tmpfs of this size (proving/sandbox/limits.py EVAL_DISK_MB, docs/evaluation.md):
    # what it writes past this fails that sample and fills nothing else.
    eval_disk_mb: int = Field(1024, gt=0, le=MAX_MEMORY_MB, description="disk limit per evaluated sample")


SECTIONS: dict[str, type[BaseModel]] = {"model": ModelSettings, "context": Policy, "tools": ToolSettings}
TOP_LEVEL = ("queue", "max_steps_per_turn")


def _flat_names() -> dict[str, tuple[str, ...]]:
    """Flat name -> path in the config, in the order errors list them."""
    names: dict[str, tuple[str, ...]] = {}
    for section, model in SECTIONS.items():
        for field in model.model_fields:
            names["model" if (section, field) == ("model", "name") else field] = (section, field)
    names.update({field: (field,) for field in TOP_LEVEL})
    return names


FLAT_NAMES: dict[str, tuple[str, ...]] = _flat_names()
SETTABLE_FIELDS: tuple[str, ...] = tuple(FLAT_NAMES)
_BY_PATH = {path: flat for flat, path in FLAT_NAMES.items()}


def flat_name(path: tuple[str | int, ...]) -> str:
    """The flat name of a setting at ``path`` (as pydantic reports it), or the dotted path."""
    key = tuple(str(part) for part in path)
    return _BY_PATH.get(key, ".".join(key))


def field_annotation(flat: str) -> Any:
    """The type of the setting called ``flat``."""
    *section, field = FLAT_NAMES[flat]
    model = SECTIONS[section[0]] if section else AgentConfig
    return model.model_fields[field].annotation


def flatten(data: Mapping[str, Any]) -> dict[str, Any]:
    """Flat names for a mapping of flat names, dotted names or nested sections.

    Unknown keys are kept as they are, for the model to report.
    """
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS and (isinstance(value, Mapping) or isinstance(value, BaseModel)):
            items = value.model_dump() if isinstance(value, BaseModel) else value
            for field, inner in items.items():
                flat[_BY_PATH.get((key, field), f"{key}.{field}")] = inner
        elif "." in key and tuple(key.split(".")) in _BY_PATH:
            flat[_BY_PATH[tuple(key.split("."))]] = value
        else:
            flat[key] = value
    return flat


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The nested form of a mapping of flat names; unknown keys stay at the top."""
    nested: dict[str, Any] = {section: {} for section in SECTIONS}
    for key, value in flat.items():
        path = FLAT_NAMES.get(key, (key,))
        if len(path) == 1:
            nested[key] = value
        else:
            nested[path[0]][path[1]] = value
    return nested


class AgentConfig(BaseModel):
    """Every setting of one agent. ``AgentConfig(role=...)`` gives the built-in defaults of
    that role; ``agents.settings_layers.resolve_config`` applies every layer."""

    model_config = _STRICT

    role: Role
    queue: str = Field(min_length=1, description="Celery queue of the agent's steps")
    max_steps_per_turn: int = Field(150, ge=1, le=MAX_STEPS)
    model: ModelSettings
    context: Policy
    tools: ToolSettings = Field(default_factory=ToolSettings)

    @model_validator(mode="before")
    @classmethod
    def _from_any_names(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, Mapping):
            return data
        flat = flatten(data)
        role = flat.get("role")
        if isinstance(role, str) and role in ROLE_DEFAULTS:
            flat = {**ROLE_DEFAULTS[role], **flat}  # type: ignore[index]
        flat = _threshold_in_tokens(flat)
        # The rules between settings are checked on the flat values, before the sections
        # validate, so the message names both settings and (when resolved) their sources.
        problems = consistency_problems(flat, (info.context or {}).get("sources"))
        if problems:
            raise ValueError("\n".join(problems))
        return nest(flat)

    def settings(self) -> dict[str, Any]:
        """Every setting by its flat name (what scenario.toml and the environment set)."""
        dumped = self.model_dump()
        values: dict[str, Any] = {"role": self.role}
        for flat, path in FLAT_NAMES.items():
            value: Any = dumped
            for part in path:
                value = value[part]
            values[flat] = value
        return values


def _threshold_in_tokens(flat: dict[str, Any]) -> dict[str, Any]:
    """A threshold given as a fraction of the window (0.7) becomes tokens of the final window."""
    threshold, window = flat.get("threshold"), flat.get("window", _default("window"))
    if isinstance(threshold, float) and 0 < threshold < 1 and _int(window) is not None:
        return {**flat, "threshold": int(window * threshold)}
    return flat


def _default(flat: str) -> Any:
    *section, field = FLAT_NAMES[flat]
    model = SECTIONS[section[0]] if section else AgentConfig
    return model.model_fields[field].default


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def consistency_problems(values: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> list[str]:
    """Rules between settings (flat names), each message naming both settings and, when
    known (resolved configs), their sources. Values of the wrong type are left to the
    field checks."""
    role = values.get("role", "?")

    def get(flat: str) -> Any:
        return values[flat] if flat in values else _default(flat)

    def show(flat: str) -> str:
        text = f"{role}.{flat} = {get(flat)!r}"
        return text if sources is None else f"{text} (from {sources.get(flat, BUILT_IN)})"

    window, threshold = _int(get("window")), _int(get("threshold"))
    max_tokens, summary = _int(get("max_tokens")), _int(get("summary_max_tokens"))
    problems = []
    if window is not None and threshold is not None and max_tokens is not None:
        if threshold >= window:
            problems.append(f"{show('threshold')} must be below {show('window')}")
        elif threshold + max_tokens > window:
            problems.append(
                f"{show('threshold')} plus {show('max_tokens')} must fit in {show('window')}, "
                "or a request just under the threshold has no room for the answer"
            )
    if window is not None and summary is not None and summary >= window:
        problems.append(f"{show('summary_max_tokens')} must be below {show('window')}")
    return problems

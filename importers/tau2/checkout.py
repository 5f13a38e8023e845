"""Reading a tau2-bench checkout: where a domain's tasks, policy, database and code are, and its tasks as data.

The layout is tau2-bench's: ``data/tau2/domains/<domain>/`` (tasks.json, policy.md or main_policy.md with a
tech-support manual, db.json or db.toml) and ``src/tau2/domains/<domain>/`` (data_model.py, tools.py, utils.py).
The checkout is the user's own files, read as they are; a missing piece is a clear error that names it.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_FILE_BYTES = 64 * 1024 * 1024  # a domain's database is megabytes; a file beyond this is not a tau2 domain's


class Tau2ImportError(ValueError):
    """The checkout cannot be imported as asked: what is wrong, and (``hint``) what to do."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


class Action(BaseModel):
    model_config = ConfigDict(extra="allow")
    action_id: str = ""
    requestor: str = "assistant"
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    info: str | None = None
    compare_args: list[str] | None = None


class Instructions(BaseModel):
    model_config = ConfigDict(extra="allow")
    domain: str = ""
    reason_for_call: str
    known_info: str | None = None
    unknown_info: str | None = None
    task_instructions: str


class UserScenario(BaseModel):
    model_config = ConfigDict(extra="allow")
    persona: str | None = None
    instructions: Instructions | str


class Criteria(BaseModel):
    model_config = ConfigDict(extra="allow")
    actions: list[Action] | None = None
    env_assertions: list[dict[str, Any]] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None
    reward_basis: list[str] = Field(default_factory=lambda: ["DB", "COMMUNICATE"])  # tau2's default


class Task(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    description: dict[str, Any] | None = None
    user_scenario: UserScenario
    initial_state: dict[str, Any] | None = None
    evaluation_criteria: Criteria | None = None


@dataclass(frozen=True)
class Domain:
    checkout: Path
    name: str
    data_dir: Path  # data/tau2/domains/<name>
    source_dir: Path  # src/tau2/domains/<name>
    tasks: list[Task]
    policy: str
    policy_files: list[str]  # which files of data_dir make the policy, in order
    database: dict[str, Any]
    database_file: str
    licence: tuple[str, str] | None  # (file name, text) of the checkout's licence
    commit: str | None  # the checkout's commit, when it is a git work tree


def read_domain(checkout: Path, name: str) -> Domain:
    checkout = checkout.expanduser().resolve()
    if not checkout.is_dir():
        raise Tau2ImportError(f"{checkout} is not a folder", "give the folder of a tau2-bench checkout")
    data_dir = checkout / "data" / "tau2" / "domains" / name
    source_dir = checkout / "src" / "tau2" / "domains" / name
    if not data_dir.is_dir() or not source_dir.is_dir():
        have = sorted(p.name for p in (checkout / "data" / "tau2" / "domains").glob("*") if p.is_dir())
        raise Tau2ImportError(f"{checkout} has no tau2 domain {name!r} (data/tau2/domains/{name}/ and "
                           f"src/tau2/domains/{name}/)", f"domains there: {', '.join(have) or 'none'}")
    policy, policy_files = _policy(data_dir)
    database, database_file = _database(data_dir)
    return Domain(checkout, name, data_dir, source_dir, _tasks(data_dir / "tasks.json"), policy, policy_files,
                  database, database_file, _licence(checkout), _commit(checkout))


def _read(path: Path) -> str:
    if not path.is_file():
        raise Tau2ImportError(f"{path} is missing", "is this a complete tau2-bench checkout?")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise Tau2ImportError(f"{path} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB",
                              "is it a tau2 domain's file?")
    return path.read_text(encoding="utf-8")


def _tasks(path: Path) -> list[Task]:
    try:
        raw = json.loads(_read(path))
    except ValueError as exc:
        raise Tau2ImportError(f"{path} is not valid JSON: {exc}", "fix the file or pull the checkout again") from None
    if isinstance(raw, dict) and "tasks" in raw:
        raw = raw["tasks"]
    if not isinstance(raw, list):
        raise Tau2ImportError(f"{path} holds no list of tasks", "a tau2 tasks.json is a JSON list")
    tasks = []
    for index, item in enumerate(raw):
        try:
            tasks.append(Task.model_validate(item))
        except ValidationError as exc:
            raise Tau2ImportError(f"{path}: task {index} does not fit tau2's task format: {exc.errors()[0]['msg']} at "
                               f"{'.'.join(map(str, exc.errors()[0]['loc']))}", "fix the task") from None
    return tasks


def _policy(data_dir: Path) -> tuple[str, list[str]]:
    """The agent's policy as tau2 gives it: policy.md, or (telecom) the main policy and the tech-support manual in
    the tags tau2's environment puts them in."""
    if (data_dir / "policy.md").is_file():
        return _read(data_dir / "policy.md"), ["policy.md"]
    main, manual = data_dir / "main_policy.md", data_dir / "tech_support_manual.md"
    if main.is_file() and manual.is_file():
        text = (f"<main_policy>\n{_read(main)}\n</main_policy>\n<tech_support_policy>\n{_read(manual)}\n"
                "</tech_support_policy>")
        return text, [main.name, manual.name]
    if main.is_file():
        return _read(main), [main.name]
    raise Tau2ImportError(f"{data_dir} has no policy.md (nor main_policy.md)",
                          "is this a complete tau2-bench checkout?")


def _database(data_dir: Path) -> tuple[dict[str, Any], str]:
    for name in ("db.json", "db.toml"):
        path = data_dir / name
        if path.is_file():
            text = _read(path)
            if text.startswith("version https://git-lfs"):
                raise Tau2ImportError(f"{path} is a Git LFS pointer, not the database", "run `git lfs pull` first")
            try:
                value = json.loads(text) if name.endswith(".json") else tomllib.loads(text)
            except (ValueError, tomllib.TOMLDecodeError) as exc:
                raise Tau2ImportError(f"{path} cannot be parsed: {exc}", "fix the file or pull the checkout again") \
                    from None
            if not isinstance(value, dict):
                raise Tau2ImportError(f"{path} does not hold an object", "a tau2 database is a JSON or TOML table")
            return value, name
    raise Tau2ImportError(f"{data_dir} has neither db.json nor db.toml", "the domain's database is missing from the "
                       "checkout (a large db.json may need `git lfs pull`)")


def _licence(checkout: Path) -> tuple[str, str] | None:
    for name in ("LICENSE", "LICENSE.md", "LICENSE.txt", "COPYING"):
        if (checkout / name).is_file():
            return name, _read(checkout / name)
    return None


def _commit(checkout: Path) -> str | None:
    """The commit of the checkout when it is the top of a git work tree (not a folder inside another repository)."""
    try:
        done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--show-toplevel", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != checkout:
        return None
    return lines[1]

"""Inspect AI in a child process baton builds: the one way baton runs an eval (SPEC §8, "Runtime"; issue 39).

Inspect reads its working directory and environment: at start-up it loads a ``.env`` found from the working
directory upwards into ``os.environ``, and ``INSPECT_*`` variables decide where it writes. Run inside a worker,
a ``.env`` a model wrote into a scenario switched both sandboxes off and sent the worker's keys to a URL of its
choosing. So the eval runs in a child (proving/export/inspect_child_main.py) with:

- an environment listed here: the basics (PATH, LANG, TMPDIR...), HOME in the child's own folder, the keys of
  the providers the run's models need and nothing of anyone else's (never the broker's or Redis' password),
  ``BATON_EXPORT_BWRAP`` only as the operator set it when baton started (proving/startup.py), the operator's
  ``INSPECT_*`` but for the log folder, and python-dotenv's loading off;
- a working directory baton owns: a temp folder outside every scenario, holding a copy of the task made
  through the one way into a folder (regular files only, no link followed);
- a wall-clock bound, and its process group killed afterwards, whatever it started;
- its log written into its own folder; baton moves it into the scenario, redacted, through the one way in
  (a link where ``inspect_logs/`` or ``proving_logs/`` should be is refused).

What the callers read of the log comes back as a compact summary (``Run``, redacted as the log is), with the
attributes of Inspect's ``EvalLog`` they use.
"""

from __future__ import annotations

import atexit
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field

from context.redaction import redact
from context.secret_names import is_secret_name
from context.secret_words import REDACTED
from proving.processes import Tail, kill_group, wait_unreaped
from proving.startup import EXPORT_BWRAP_ENV, INSPECT_PROVIDERS_ENV, fixed
from scenarios.confined import Refused
from scenarios.folder import Folder

LOG = logging.getLogger(__name__)
MAIN = Path(__file__).with_name("inspect_child_main.py")
WALL_S = 6 * 3600  # the longest eval (a real model, k tries of every sample): a child past it is killed
LOG_BYTES = 512 * 1024 * 1024  # the most of a log moved into a scenario (uncompressed); over it, not moved
BASICS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR",
          "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
          "http_proxy", "https_proxy", "no_proxy")
# The variables of a provider's models besides PROVIDER_*: Inspect's provider name -> their prefixes.
PREFIXES = {"bedrock": ("AWS_",), "google": ("GOOGLE_", "GEMINI_"), "vertex": ("GOOGLE_", "VERTEX_"),
            "azureai": ("AZURE_", "AZUREAI_"), "hf": ("HF_",), "grok": ("XAI_", "GROK_")}
NEEDS_NOTHING = ("mockllm", "baton", "none")
KEPT_OUT = ("INSPECT_LOG_DIR",)  # baton names the log folder; Inspect's own variable would move it
NEVER = ("BATON_", "CELERY_", "REDIS", "FLOWER_")  # baton's own settings and its broker's: whatever a model is called


class ChildError(RuntimeError):
    """Inspect's process could not run the eval; the message says why."""


class Prerequisite(ChildError):
    """Inspect named something missing (a key for a model): the message is its own, Rich markup included."""


class ModelSpec(BaseModel):
    """A model as the child makes it: Inspect's model string, its generate config and model arguments (JSON),
    and the modules that register its provider (imported in the child first)."""

    name: str
    config: dict[str, Any] = Field(default_factory=dict)
    args: dict[str, Any] = Field(default_factory=dict)
    modules: list[str] = Field(default_factory=list)


class Score(BaseModel):
    value: Any = None
    explanation: str | None = None
    metadata: dict[str, Any] | None = None


class ToolCall(BaseModel):
    function: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Message(BaseModel):
    role: str
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)


class Sample(BaseModel):
    id: Any
    epoch: int
    scores: dict[str, Score] = Field(default_factory=dict)
    store: dict[str, Any] = Field(default_factory=dict)
    messages: list[Message] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class Usage(BaseModel):
    """Inspect's ModelUsage as the child dumped it (its fields kept as they came)."""

    model_config = ConfigDict(extra="allow")


class Stats(BaseModel):
    model_usage: dict[str, Usage] = Field(default_factory=dict)


class Error(BaseModel):
    message: str


class Run(BaseModel):
    """What baton reads of an eval's log: the parts of Inspect's EvalLog its callers use."""

    model_config = ConfigDict(extra="forbid")  # the child's answer and this shape change together

    status: str
    location: str
    error: Error | None = None
    stats: Stats = Field(default_factory=Stats)
    samples: list[Sample] = Field(default_factory=list)


def spec_of(model: Any) -> ModelSpec:
    """A model string, a ModelSpec, or an Inspect Model made in this process (its name, config and arguments,
    which must be JSON: a model holding Python callables cannot cross into the child)."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str):
        return ModelSpec(name=model)
    config = model.config.model_dump(exclude_none=True) if getattr(model, "config", None) is not None else {}
    args = dict(getattr(model, "model_args", {}) or {})
    try:
        json.dumps([config, args])
    except (TypeError, ValueError):
        raise ChildError(f"the model {model} holds values only this process can use (its arguments are not "
                         "JSON): name its provider by a string and the module that registers it (ModelSpec)") from None
    return ModelSpec(name=str(model), config=config, args=args)


def provider(model: str | None) -> str | None:
    if not model or "/" not in model:
        return None
    return model.split("/", 1)[0]


def child_env(home: Path, models: list[str]) -> dict[str, str]:
    """The child's environment, from the environment baton started with (never ``os.environ`` now)."""
    start = fixed().environ
    env = {name: start[name] for name in BASICS if start.get(name)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env.update(HOME=str(home), PYTHON_DOTENV_DISABLED="1", PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1")
    if start.get(EXPORT_BWRAP_ENV):
        env[EXPORT_BWRAP_ENV] = start[EXPORT_BWRAP_ENV]
    env.update({k: v for k, v in start.items() if k.startswith("INSPECT_") and k not in KEPT_OUT})
    for name in {p for p in map(provider, models) if p and p not in NEEDS_NOTHING}:
        prefixes = (f"{name.upper()}_", *PREFIXES.get(name, ()))
        env.update({k: v for k, v in start.items() if k.startswith(prefixes) and not k.startswith(NEVER)})
    return env


def secrets_of(environ: Any) -> list[str]:
    """The values this process holds that no log may show: secret-named variables, passwords inside URLs."""
    found = set()
    for name, value in environ.items():
        if is_secret_name(name) and len(value) >= 6:
            found.add(value)
        if "://" in value:
            try:
                password = urlparse(value).password
            except ValueError:
                password = None
            if password and len(password) >= 6:
                found.add(password)
    return sorted(found, key=len, reverse=True)


def scrubbed(value: Any, secrets: list[str]) -> Any:
    """``value`` with every string redacted (context/redaction.py) and this process's own secrets replaced
    literally. String by string, keys kept: the log must still be one Inspect reads (an event's tag, a field
    name judged as part of a secret would make it unreadable)."""
    if isinstance(value, str):
        text = redact(value)
        for secret in secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text
    if isinstance(value, dict):
        return {key: scrubbed(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed(item, secrets) for item in value]
    return value


def redacted_log(path: Path, secrets: list[str]) -> bytes | None:
    """The .eval (a zip of JSON) with every member redacted; None when it is no readable log or too large."""
    if sys.version_info < (3, 14):
        import zipfile_zstd  # noqa: F401 - Inspect compresses its logs with zstd; this teaches zipfile to read it
    try:
        with zipfile.ZipFile(path) as source:
            members = source.infolist()
            if sum(m.file_size for m in members) > LOG_BYTES:
                return None
            out = io.BytesIO()
            with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
                for member in members:
                    data = source.read(member)
                    if member.filename.endswith(".json"):
                        data = json.dumps(scrubbed(json.loads(data), secrets), ensure_ascii=False).encode()
                    target.writestr(member.filename, data)
            return out.getvalue()
    except (OSError, zipfile.BadZipFile, ValueError, RecursionError):
        return None


def owner(log_dir: Path) -> Folder:
    """The folder the logs go into through the one way in: the scenario holding ``log_dir`` (its nearest
    ancestor with a scenario.toml), else the folder above it."""
    for parent in log_dir.parents:
        if (parent / "scenario.toml").is_file() and not (parent / "scenario.toml").is_symlink():
            return Folder(parent)
    return Folder(log_dir.parent)


def check_log_dir(log_dir: Path) -> None:
    """Before the eval: a link (or a file) where the log folder should be is refused now, not after the run."""
    kind = owner(log_dir).kind(log_dir)  # a link on the way there is refused by the one way in too
    if kind not in (None, "folder"):
        raise Refused(f"{log_dir.name}/ is a {kind} where a folder of logs should be: refused, nothing written "
                      "through it")


def move_logs(source: Path, log_dir: Path) -> list[Path]:
    """The child's logs into ``log_dir``, redacted: written through the one way in, never through a link."""
    folder, moved = owner(log_dir), []
    secrets = secrets_of(fixed().environ)
    for path in sorted(source.iterdir()) if source.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        data = redacted_log(path, secrets) if path.suffix == ".eval" else None
        if data is None:
            LOG.warning("Inspect's log %s is not kept: it could not be read and redacted", path.name)
            continue
        folder.write_atomic(log_dir / path.name, data)  # Refused (a StoreError) where a link stands in the way
        moved.append(log_dir / path.name)
    return moved


def run_eval(task_dir: Path, model: Any, epochs: int, log_dir: Path, task_args: dict[str, Any] | None = None,
             timeout_s: float = WALL_S) -> Run:
    """Run the task at ``task_dir`` (its task.py) in a child; the summary of its log, whose ``location`` is the
    log moved into ``log_dir``. Prerequisite when Inspect names something missing, ChildError otherwise."""
    spec = spec_of(model)
    log_dir = Path(os.path.abspath(log_dir))
    check_log_dir(log_dir)
    task_args = dict(task_args or {})
    child = spares.take()
    try:
        home = child.home
        work, logs = home / "task", home / "logs"
        refused = Folder(Path(os.path.abspath(task_dir))).copy_tree("", work, skip=lambda n: n.startswith(".env"))
        if not (work / "task.py").is_file():
            raise ChildError(f"{task_dir} holds no task.py Inspect can run" + (f" ({refused[0]})" if refused else ""))
        logs.mkdir()
        models = [spec.name, str(task_args.get("user") or "")]
        keys = {k: v for k, v in child_env(home / "home", models).items() if k not in child.env}
        job = {"task": "task.py", "cwd": str(work), "model": spec.model_dump(include={"name", "config", "args"}),
               "epochs": epochs, "log_dir": str(logs), "task_args": task_args, "result": str(home / "result.json"),
               "modules": (modules := _modules(spec)), "paths": _paths(modules), "env": keys}
        child.finish(job, timeout_s)
        answer = _answer(home / "result.json")
        if "prerequisite" in answer:
            raise Prerequisite(str(answer["prerequisite"]))
        # Model-written text (a tool's output, a scorer's explanation) goes on into tryout.json and the findings.
        try:
            run = Run.model_validate(scrubbed(answer["log"], secrets_of(fixed().environ)))
        except RecursionError:
            raise ChildError("Inspect's process answered with a log nested too deep to read") from None
        moved = move_logs(logs, log_dir)
        run.location = str(moved[0]) if moved else ""
        return run
    finally:
        child.close()


def _modules(spec: ModelSpec) -> list[str]:
    """The model's provider modules, and those the operator named for every eval (BATON_INSPECT_PROVIDERS: a
    conversation's user played by a model of a provider of theirs)."""
    named = [m.strip() for m in fixed().get(INSPECT_PROVIDERS_ENV).split(",") if m.strip()]
    return list(dict.fromkeys([*spec.modules, *named]))


def _paths(modules: list[str]) -> list[str]:
    """Where the child finds baton's packages and the provider modules' (its ``-I`` ignores PYTHONPATH)."""
    import importlib.util

    roots = [str(Path(__file__).resolve().parents[2])]
    for name in modules:
        found = importlib.util.find_spec(name.split(".")[0])
        if found is not None and found.origin:
            origin = Path(found.origin).parent
            roots.append(str(origin.parent if origin.name == name.split(".")[0] else origin))
    return list(dict.fromkeys(roots))


class Child:
    """One Inspect process, started ahead of its eval so that Inspect's import (seconds) is paid while the
    caller does other work: it imports Inspect, then waits for one job on its stdin (the model keys its run
    needs come with the job, never before), runs it and ends. Its own session, its own temporary folder."""

    def __init__(self) -> None:
        self.parent = os.getpid()  # a forked worker inherits this object, not the process: it leaves it be
        self.home = Path(tempfile.mkdtemp(prefix="baton-inspect-"))
        (self.home / "home").mkdir()
        self.env = child_env(self.home / "home", [])
        self.proc = subprocess.Popen([sys.executable, "-I", str(MAIN), "--wait"], cwd=self.home, env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self.tails = [Tail(self.proc.stdout), Tail(self.proc.stderr)]
        for tail in self.tails:
            tail.start()

    def finish(self, job: dict[str, Any], timeout_s: float) -> None:
        """Hand it ``job``; wait for it to end (killed past ``timeout_s``), its process group killed after."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(job).encode() + b"\n")
            self.proc.stdin.close()
        except OSError:
            pass  # it ended already: its exit status and stderr say why
        try:
            timed_out = wait_unreaped(self.proc, timeout_s)
        finally:
            kill_group(self.proc.pid)  # whatever it started (a sandbox, a server of a model) ends with it
            self.proc.wait()
        for tail in self.tails:
            tail.join(timeout=5)
        if timed_out:
            raise ChildError(f"Inspect's process ran past {timeout_s:.0f} s and was killed")
        if self.proc.returncode != 0:
            said = self.tails[1].text().strip().splitlines()
            raise ChildError(f"Inspect's process ended with exit {self.proc.returncode}: "
                             f"{said[-1] if said else 'nothing on stderr'}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.returncode is None:
            kill_group(self.proc.pid)
            self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)


class Spares:
    """One Inspect process kept started for the next eval of this process (none until the first eval asks:
    a process that never runs Inspect starts none). Settings are fixed at start, so a spare's environment is
    the one the next eval would get, its keys apart."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spare: Child | None = None
        atexit.register(self.close)

    def take(self) -> Child:
        with self.lock:
            ready, self.spare = self.spare, Child()  # the next eval's, starting now
        if ready is None or ready.parent != os.getpid():
            return Child()
        if ready.alive() and ready.env == child_env(ready.home / "home", []):
            return ready
        ready.close()  # it ended, or the settings it was started with are no longer this process's
        return Child()

    def close(self) -> None:
        with self.lock:
            spare, self.spare = self.spare, None
        if spare is not None and spare.parent == os.getpid():
            spare.close()


spares = Spares()


def _answer(path: Path) -> dict[str, Any]:
    try:
        answer = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ChildError(f"Inspect's process left no answer: {exc}") from None
    if not isinstance(answer, dict) or not ({"log", "prerequisite"} & set(answer)):
        raise ChildError("Inspect's process left an answer of the wrong shape")
    return answer

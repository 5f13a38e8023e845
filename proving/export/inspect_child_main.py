"""Inspect AI's own process: ``python -I inspect_child_main.py --wait`` (proving/export/inspect_child.py starts it).

The one place baton calls ``inspect_ai.eval``. It runs in a process baton built: an environment baton listed,
a working directory baton owns (a copy of the task, outside every scenario folder), its process group killed
afterwards. Started ahead of its eval, it imports Inspect, then reads its job from stdin. Before Inspect
starts, its ``.env`` loading is turned off twice over: ``PYTHON_DOTENV_DISABLED`` in the environment
(python-dotenv's own switch) and Inspect's ``init_dotenv`` replaced here, which would otherwise look for a
``.env`` from the working directory upwards and load every variable in it (issue 39).

The job (JSON): the task file, the model (a string, with its config and arguments), the modules that register
model providers, the epochs, the task's arguments, the folder for the log. The answer, written to the job's
``result`` path: a compact summary of the log (what baton's callers read of it, proving/export/inspect_child.py
``Run``), or the prerequisite Inspect named as missing.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any


def no_dotenv() -> None:
    """Inspect's start-up calls ``init_dotenv`` by the names its modules imported: each is replaced."""
    import inspect_ai._eval.context as context
    import inspect_ai._eval.evalset as evalset
    import inspect_ai._util.dotenv as dotenv

    def refused() -> None:
        return None

    for module in (dotenv, context, evalset):
        if hasattr(module, "init_dotenv"):
            module.init_dotenv = refused


# What an eval imports on its way (Inspect loads its providers' SDKs when a sample starts, whichever model runs):
# seconds a process that waits for its job imports before it, not on the eval's time. Best effort.
WARM = ("inspect_ai._eval.eval", "inspect_ai._eval.task.run", "inspect_ai.model._providers.anthropic",
        "inspect_ai.model._openai_responses", "inspect_ai.agent._acp", "inspect_ai.hooks", "inspect_ai.log._condense",
        "tiktoken", "jsonschema", "numpy", "markdown_it", "fastapi", "uvicorn", "aiohttp")


def warm() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # baton's own packages (``-I`` left them out)
    for name in (*WARM, "proving.evaluation.blind_model"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - a module this Inspect lacks or cannot load: the eval does without
            continue
    try:  # the vocabulary Inspect counts tokens with, when it is on disk already (never a download here)
        import hashlib

        import tiktoken

        from proving.export.runtime.offline_tokens import O200K_URL, tiktoken_cache_dir

        cache = tiktoken_cache_dir()
        if cache is not None and (cache / hashlib.sha1(O200K_URL.encode()).hexdigest()).is_file():
            tiktoken.get_encoding("o200k_base")
    except Exception:  # noqa: BLE001, S110 - the eval loads it itself
        pass


def model_of(spec: dict[str, Any]) -> Any:
    if not spec.get("config") and not spec.get("args"):
        return spec["name"]
    from inspect_ai.model import GenerateConfig, get_model

    return get_model(spec["name"], config=GenerateConfig(**spec.get("config") or {}), **(spec.get("args") or {}))


def text_of(message: Any) -> str:
    try:
        return str(message.text or "")
    except (AttributeError, TypeError, ValueError):
        return ""


def sample_of(sample: Any) -> dict[str, Any]:
    return {
        "id": sample.id, "epoch": sample.epoch, "metadata": sample.metadata or {}, "store": sample.store or {},
        "scores": {name: {"value": s.value, "explanation": s.explanation, "metadata": s.metadata or {}}
                   for name, s in (sample.scores or {}).items()},
        "messages": [{"role": m.role, "text": text_of(m),
                      "tool_calls": [{"function": c.function, "arguments": c.arguments}
                                     for c in (getattr(m, "tool_calls", None) or [])]}
                     for m in sample.messages or []],
    }


def summary_of(log: Any) -> dict[str, Any]:
    usage = {name: u.model_dump(exclude_none=True) for name, u in (log.stats.model_usage or {}).items()}
    return {"status": log.status, "location": str(log.location),
            "error": {"message": str(log.error.message)} if log.error else None,
            "stats": {"model_usage": usage}, "samples": [sample_of(s) for s in log.samples or []]}


def main(argv: list[str]) -> int:
    """``--wait``: import Inspect first, then take the job from stdin (one line of JSON), its model keys in
    ``env``; else the job is the file named."""
    if argv[1:] == ["--wait"]:
        no_dotenv()  # imports Inspect's start-up: the seconds a waiting process saves its eval
        warm()
        line = sys.stdin.readline()
        if not line:
            return 0  # the parent ended, or needed no eval
        job = json.loads(line)
    else:
        job = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
        no_dotenv()
    os.environ.update(job.get("env") or {})
    if job.get("cwd"):
        os.chdir(job["cwd"])
    sys.path[:0] = job.get("paths") or []
    for name in job.get("modules") or []:
        importlib.import_module(name)  # providers registered in this process (baton/simulated has an entry point)
    import inspect_ai
    from inspect_ai._util.error import PrerequisiteError

    try:
        (log,) = inspect_ai.eval(job["task"], model=model_of(job["model"]), epochs=job["epochs"],
                                 log_dir=job["log_dir"], display="none", task_args=job.get("task_args") or {})
        answer: dict[str, Any] = {"log": summary_of(log)}
    except PrerequisiteError as exc:  # e.g. anthropic/... without ANTHROPIC_API_KEY: the caller says what to set
        answer = {"prerequisite": str(getattr(exc, "message", exc))}
    Path(job["result"]).write_text(json.dumps(answer, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

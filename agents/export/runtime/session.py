"""What an exported task does outside Inspect: run one tool call, and judge a finished
sample, each in a child process with time and memory limits (the evaluation's own
``child_main.py``), never in the Inspect process. Standard library only.

The export folder holds ``scenario.json`` (policy, tools, samples, limits), ``tools/``
and ``checkers/`` as the iteration wrote them, and this package.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .compare import effect_differences, free_text, short, state_differences
from .processes import run_limited

PACKAGE = Path(__file__).resolve().parent
EXPORT = PACKAGE.parent
CHILD = PACKAGE / "child_main.py"


@dataclass(frozen=True)
class Scenario:
    """scenario.json, as written by ``baton export``."""

    name: str
    policy: str
    tools: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    timeout_s: float
    memory_mb: int
    folder: Path = EXPORT

    @classmethod
    def load(cls, folder: Path = EXPORT) -> Scenario:
        spec = json.loads((folder / "scenario.json").read_text(encoding="utf-8"))
        limits = spec["limits"]
        return cls(spec["name"], spec["policy"], spec["tools"], spec["samples"],
                   float(limits["timeout_s"]), int(limits["memory_mb"]), folder)

    def initial_data(self) -> dict[str, Any]:
        """A fresh copy of tools/data.json: each sample starts from its own."""
        return json.loads((self.folder / "tools" / "data.json").read_text(encoding="utf-8"))

    def sample(self, sample_id: str | int | None) -> dict[str, Any]:
        return next(s for s in self.samples if s["id"] == str(sample_id))


@dataclass
class CallResult:
    output: dict[str, Any] | None
    data: dict[str, Any] | None
    error: str | None = None


@dataclass
class Judgement:
    passed: bool
    explanation: str
    differences: list[str] = field(default_factory=list)
    checkers: list[dict[str, Any]] = field(default_factory=list)


def call_tool(scenario: Scenario, tool: str, args: dict[str, Any], data: dict[str, Any]) -> CallResult:
    """One tool call on ``data`` in a limited child: its output and the data after it, or
    an error the model is shown (unknown tool, wrong arguments, a crash, a limit)."""
    job = {"mode": "call", "sample": {"id": "call", "actions": [{"tool": tool, "args": args}]}, "data": data}
    result, problem = _run(scenario, job)
    if problem:
        return CallResult(None, None, f"tool {tool} {problem}")
    error = result.get("error")
    if error:
        return CallResult(None, None, _for_the_model(tool, error))
    return CallResult(result["outputs"][0], result["final_data"])


def _for_the_model(tool: str, error: dict[str, Any]) -> str:
    """child_main's message speaks of a sample's "action 0"; the model made a call."""
    message = error["message"]
    if error.get("kind") == "unknown_tool":
        return f"there is no tool {tool!r}; the tools are: {message.rsplit('tools: ', 1)[-1]}"
    if error.get("kind") == "bad_args":
        return f"wrong arguments for {tool}: {error.get('why', message)}"
    return message.removeprefix("action 0: ")


def judge(scenario: Scenario, sample: dict[str, Any], calls: list[dict[str, Any]],
          final_data: dict[str, Any]) -> Judgement:
    """The sample's verdict on what the model did, by baton's rules: the final data holds
    the expected actions' effects and ``expected_state``, and every checker accepts."""
    initial = scenario.initial_data()
    reference, problem = _run(scenario, {"mode": "sample", "sample": sample})
    if problem or reference.get("error") or "final_data" not in reference:
        why = problem or (reference.get("error") or {}).get("message", "no final data")
        raise RuntimeError(f"replaying sample {sample['id']}'s expected actions failed ({why}): the export is broken")
    effects = effect_differences(reference["final_data"], final_data, free_text(sample["actions"], initial))
    differences = [f"the final data differs from the expected actions' effects at {d}" for d in effects]
    differences += state_differences(sample.get("expected_state", {}), final_data)
    outputs = [c["output"] for c in calls if c.get("output") is not None]
    outcome = {"outputs": outputs, "final_data": final_data, "initial_data": initial}
    verdicts, problem = _run(scenario, {"mode": "judge", "sample": sample, "outcome": outcome})
    checkers = verdicts.get("checkers", []) if not problem else []
    rejections = [_rejection(c) for c in checkers if c.get("passed") is not True]
    rejections += [f"checker module {e['module']} failed to import: {e['exception']}"
                   for e in verdicts.get("checker_errors", [])]
    if problem:
        rejections.append(f"the checkers {problem}")
    passed = not differences and not rejections
    return Judgement(passed, _explain(passed, len(calls), differences, rejections), differences, checkers)


def _rejection(verdict: dict[str, Any]) -> str:
    if verdict.get("error") == "design_issue":
        return f"checker {verdict['checker']} found a design issue: {verdict['reason']}"
    if verdict.get("error"):
        return f"checker {verdict['checker']} {verdict['reason']}"
    return f"checker {verdict['checker']} rejects it: {verdict.get('reason') or '(no reason given)'}"


def _explain(passed: bool, n_calls: int, differences: list[str], rejections: list[str]) -> str:
    if passed:
        return (f"passed after {n_calls} tool call(s): the final data has the expected actions' effects, "
                "expected_state holds and every checker accepts")
    lines = [f"failed after {n_calls} tool call(s):"]
    lines += [f"- {d}" for d in differences[:10]]
    if len(differences) > 10:
        lines.append(f"- ... and {len(differences) - 10} more differences")
    lines += [f"- {r}" for r in rejections]
    return "\n".join(lines)


def _run(scenario: Scenario, job: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Run ``child_main.py`` on ``job`` in a fresh temp dir with copies of tools/ and
    checkers/: (its result, None), or ({}, what went wrong with the process)."""
    with tempfile.TemporaryDirectory(prefix="baton-export-") as tmp_name:
        tmp = Path(tmp_name)
        work = tmp / "work"
        work.mkdir()
        for folder in ("tools", "checkers"):
            if (scenario.folder / folder).is_dir():
                shutil.copytree(scenario.folder / folder, work / folder,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        job = {**copy.deepcopy(job), "tools_dir": str(work / "tools"), "checkers_dir": str(work / "checkers"),
               "result_path": str(tmp / "result.json"), "progress_path": str(tmp / "progress.json")}
        (tmp / "job.json").write_text(json.dumps(job), encoding="utf-8")
        done = run_limited([sys.executable, "-I", str(CHILD), str(tmp / "job.json")],
                           cwd=work, timeout_s=scenario.timeout_s, memory_mb=scenario.memory_mb)
        try:
            return json.loads((tmp / "result.json").read_text(encoding="utf-8")), None
        except (OSError, ValueError):
            if done.timed_out:
                return {}, f"did not finish within the time limit ({scenario.timeout_s:g} s)"
            tail = done.stderr_tail.strip().splitlines()[-1:] or ["no output"]
            return {}, (f"ended without a result (exit {done.returncode}, memory limit "
                        f"{scenario.memory_mb} MB): {short(tail[0])}")

"""What an exported task does outside Inspect: run one tool call, and judge a finished
sample, each in one child process with time and memory limits (the evaluation's own
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
from .processes import Finished, run_limited

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
    the expected actions' effects and ``expected_state``, and every checker accepts.

    One child does both halves (mode "reference_and_judge"): it replays the expected actions
    in a process forked from it, with a folder of its own, then runs the checkers on the
    model's outcome, so neither half sees what the other left behind (child_main.py)."""
    initial = scenario.initial_data()
    outputs = [c["output"] for c in calls if c.get("output") is not None]
    outcome = {"outputs": outputs, "final_data": final_data, "initial_data": initial}
    ran = _launch(scenario, {"mode": "reference_and_judge", "sample": sample, "outcome": outcome}, reference=True)
    reference = _reference_data(scenario, sample, ran)
    effects = effect_differences(reference, final_data, free_text(sample["actions"], initial))
    differences = [f"the final data differs from the expected actions' effects at {d}" for d in effects]
    differences += state_differences(sample.get("expected_state", {}), final_data)
    verdicts = ran.result or {}
    checkers = verdicts.get("checkers", [])
    rejections = [_rejection(c) for c in checkers if c.get("passed") is not True]
    rejections += [f"checker module {e['module']} failed to import: {e['exception']}"
                   for e in verdicts.get("checker_errors", [])]
    if ran.result is None:  # the replay ended, so it was the checkers that the limit or a crash stopped
        rejections.append(f"the checkers {_problem(scenario, ran.done)}")
    elif verdicts.get("error"):  # out of memory: the checker named and those after it gave no verdict
        error = verdicts["error"]
        where = f" in checker {error['checker']}" if error.get("checker") else ""
        rejections.append(f"the checkers stopped{where}: {error.get('message')}")
    passed = not differences and not rejections
    return Judgement(passed, _explain(passed, len(calls), differences, rejections), differences, checkers)


def _reference_data(scenario: Scenario, sample: dict[str, Any], ran: Ran) -> dict[str, Any]:
    """The final data of the sample's expected actions; RuntimeError if they could not be replayed."""
    reference = ran.reference
    if reference is None:  # the replay's process left no result: its exit status, or the whole child's
        returncode = (ran.result or {}).get("reference_returncode", ran.done.returncode)
        why = _problem(scenario, ran.done, returncode)
    elif reference.get("error") or "final_data" not in reference:
        why = (reference.get("error") or {}).get("message", "no final data")
    else:
        return reference["final_data"]
    raise RuntimeError(f"replaying sample {sample['id']}'s expected actions failed ({why}): the export is broken")


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


@dataclass
class Ran:
    """What one child left: its result and, when it replayed the expected actions apart,
    that replay's result (None for each file not written), and how its process ended."""

    result: dict[str, Any] | None
    reference: dict[str, Any] | None
    done: Finished


def _run(scenario: Scenario, job: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(the child's result, None), or ({}, what went wrong with the process)."""
    ran = _launch(scenario, job)
    return (ran.result, None) if ran.result is not None else ({}, _problem(scenario, ran.done))


def _launch(scenario: Scenario, job: dict[str, Any], reference: bool = False) -> Ran:
    """Run ``child_main.py`` on ``job`` in a fresh temp dir with copies of tools/ and
    checkers/; with ``reference``, a second copy for the replay of the expected actions
    that the child forks (job["reference"])."""
    with tempfile.TemporaryDirectory(prefix="baton-export-") as tmp_name:
        tmp = Path(tmp_name)
        work = _copy_code(scenario, tmp / "work")
        job = {**copy.deepcopy(job), "tools_dir": str(work / "tools"), "checkers_dir": str(work / "checkers"),
               "result_path": str(tmp / "result.json"), "progress_path": str(tmp / "progress.json")}
        if reference:
            apart = _copy_code(scenario, tmp / "reference" / "work")
            job["reference"] = {"cwd": str(apart), "tools_dir": str(apart / "tools"),
                                "checkers_dir": str(apart / "checkers"), "result_path": str(tmp / "reference.json")}
        (tmp / "job.json").write_text(json.dumps(job), encoding="utf-8")
        done = run_limited([sys.executable, "-I", str(CHILD), str(tmp / "job.json")],
                           cwd=work, timeout_s=scenario.timeout_s, memory_mb=scenario.memory_mb)
        return Ran(_read(tmp / "result.json"), _read(tmp / "reference.json") if reference else None, done)


def _copy_code(scenario: Scenario, work: Path) -> Path:
    work.mkdir(parents=True)
    for folder in ("tools", "checkers"):
        if (scenario.folder / folder).is_dir():
            shutil.copytree(scenario.folder / folder, work / folder,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return work


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _problem(scenario: Scenario, done: Finished, returncode: int | None = None) -> str:
    """What went wrong with a child that left no result; ``returncode`` is that of the
    forked replay when it was the one that ended without."""
    if done.timed_out:
        return f"did not finish within the time limit ({scenario.timeout_s:g} s)"
    tail = done.stderr_tail.strip().splitlines()[-1:] or ["no output"]
    return (f"ended without a result (exit {done.returncode if returncode is None else returncode}, memory limit "
            f"{scenario.memory_mb} MB): {short(tail[0])}")

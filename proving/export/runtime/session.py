"""What an exported task asks of a tool call and of a judgement, and what it makes of the answer.
Standard library only.

Each is a request for ``box.py`` (``call_request``, ``judge_request``: bytes for its stdin), which runs the
evaluation's own ``child_main.py`` on it in one child process with time and memory limits, never in the Inspect
process; ``task.py`` sends it through Inspect's sandbox and turns the frame that comes back into a ``Ran``
(``ran_from_box``); ``call_result`` and ``judgement`` read that. ``call_tool`` and ``judge`` do the same
here, with box.py run as a process of its own and no sandbox: for tests and for a script that uses the
runtime without Inspect.

The export folder holds ``scenario.json`` (policy, tools, samples, limits), ``tools/``
and ``checkers/`` as the iteration wrote them, and this package.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .box import FRAME_BYTES, read_frame, request
from .child_main import SEPARATORS
from .compare import checker_rejections, dicts, explain, free_text, outcome_differences, short
from .processes import Finished, feed_and_wait, minimal_env

PACKAGE = Path(__file__).resolve().parent
EXPORT = PACKAGE.parent
BOX_SLACK_S = 30  # beyond the call's own time limit: the sandbox's start, the copies, the interpreter's start


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
    user_simulator: str = "scripted"  # -T user='s default: the scenario's setting at export

    @classmethod
    def load(cls, folder: Path = EXPORT) -> Scenario:
        spec = json.loads((folder / "scenario.json").read_text(encoding="utf-8"))
        limits = spec["limits"]
        return cls(spec["name"], spec["policy"], spec["tools"], spec["samples"],
                   float(limits["timeout_s"]), int(limits["memory_mb"]), folder,
                   str(spec.get("user_simulator") or "scripted"))

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


def call_request(scenario: Scenario, tool: str, args: dict[str, Any], data: dict[str, Any]) -> bytes:
    """The box's request for one tool call on ``data`` (mode "call")."""
    job = {"mode": "call", "sample": {"id": "call", "actions": [{"tool": tool, "args": args}]}, "data": data}
    return _request(scenario, job)


def call_result(scenario: Scenario, tool: str, ran: Ran) -> CallResult:
    """The call's output and the data after it, or an error the model is shown (unknown tool, wrong
    arguments, a crash, a limit, a full disk)."""
    if ran.result is None:
        return CallResult(None, None, f"tool {tool} {_problem(scenario, ran)}")
    error = ran.result.get("error")
    if isinstance(error, dict):
        return CallResult(None, None, _for_the_model(tool, error) + _filled(ran))
    outputs, final = ran.result.get("outputs"), ran.result.get("final_data")
    if error or not (isinstance(outputs, list) and outputs and isinstance(final, dict)):
        # The result file lies in the sandbox with the call's code: what it holds is read as untrusted.
        return CallResult(None, None, f"tool {tool} left a result without its output and data")
    return CallResult(outputs[0], final)


def call_tool(scenario: Scenario, tool: str, args: dict[str, Any], data: dict[str, Any]) -> CallResult:
    """One tool call on ``data`` in a limited child of this process, without a sandbox."""
    return call_result(scenario, tool, _launch(scenario, call_request(scenario, tool, args, data)))


def _for_the_model(tool: str, error: dict[str, Any]) -> str:
    """child_main's message speaks of a sample's "action 0"; the model made a call."""
    message = str(error.get("message", ""))
    if error.get("kind") == "unknown_tool":
        return f"there is no tool {tool!r}; the tools are: {message.rsplit('tools: ', 1)[-1]}"
    if error.get("kind") == "bad_args":
        return f"wrong arguments for {tool}: {error.get('why', message)}"
    return message.removeprefix("action 0: ")


def judge_request(scenario: Scenario, sample: dict[str, Any], calls: list[dict[str, Any]],
                  final_data: dict[str, Any]) -> bytes:
    """The box's request for a sample's verdict (mode "reference_and_judge"): the child replays the expected
    actions in a process forked from it, with a folder of its own, then runs the checkers on the model's
    outcome, so neither half sees what the other left behind (child_main.py)."""
    outputs = [c["output"] for c in calls if c.get("output") is not None]
    outcome = {"outputs": outputs, "final_data": final_data, "initial_data": scenario.initial_data()}
    return _request(scenario, {"mode": "reference_and_judge", "sample": sample, "outcome": outcome}, reference=True)


def judgement(scenario: Scenario, sample: dict[str, Any], calls: list[dict[str, Any]], final_data: dict[str, Any],
              ran: Ran) -> Judgement:
    """The sample's verdict on what the model did, by baton's rules: the final data holds the expected
    actions' effects and ``expected_state``, and every checker accepts. RuntimeError if the expected
    actions could not be replayed (the export is broken)."""
    initial = scenario.initial_data()
    reference = _reference_data(scenario, sample, ran)
    differences = outcome_differences(sample, reference, final_data, free_text(sample["actions"], initial))
    checkers = dicts((ran.result or {}).get("checkers"))
    rejections = checker_rejections(ran.result, None if ran.result is not None else _problem(scenario, ran))
    passed = not differences and not rejections
    return Judgement(passed, explain(passed, len(calls), differences, rejections), differences, checkers)


def judge(scenario: Scenario, sample: dict[str, Any], calls: list[dict[str, Any]],
          final_data: dict[str, Any]) -> Judgement:
    """``judgement`` of a judging child run in this process, without a sandbox."""
    ran = _launch(scenario, judge_request(scenario, sample, calls, final_data))
    return judgement(scenario, sample, calls, final_data, ran)


def _reference_data(scenario: Scenario, sample: dict[str, Any], ran: Ran) -> dict[str, Any]:
    """The final data of the sample's expected actions; RuntimeError if they could not be replayed."""
    if ran.problem:  # the sandbox ran nothing, or gave nothing back: not the export's fault
        raise RuntimeError(f"sample {sample['id']} could not be judged: {_problem(scenario, ran)}")
    reference = ran.reference
    if reference is None:  # the replay's process left no result: its exit status, or the whole child's
        returncode = (ran.result or {}).get("reference_returncode", ran.done.returncode)
        why = _problem(scenario, ran, returncode)
    elif reference.get("error") or not isinstance(reference.get("final_data"), dict):
        error = reference.get("error")
        why = str(error.get("message", "no final data")) if isinstance(error, dict) else "no final data"
    else:
        return reference["final_data"]
    raise RuntimeError(f"replaying sample {sample['id']}'s expected actions failed ({why}): the export is broken")


@dataclass
class Ran:
    """What one child left: its result and, when it replayed the expected actions apart,
    that replay's result (None for each file not written), how its process ended, the writable
    spaces it left full, and what kept it from running at all (``problem``)."""

    result: dict[str, Any] | None
    reference: dict[str, Any] | None
    done: Finished
    full: list[str] = field(default_factory=list)
    problem: str | None = None


def _request(scenario: Scenario, job: dict[str, Any], reference: bool = False) -> bytes:
    return request({"timeout_s": scenario.timeout_s, "memory_mb": scenario.memory_mb, "reference": reference},
                   json.dumps(job, separators=SEPARATORS))


def exec_timeout(scenario: Scenario) -> int:
    """The sandbox's own time limit for one request: the call's, and time to set it up."""
    return math.ceil(scenario.timeout_s) + BOX_SLACK_S


def ran_from_box(returncode: int, stdout: str, stderr: str) -> Ran:
    """What the box printed in a sandbox; a ``Ran`` with a ``problem`` when no frame came back."""
    payload = read_frame(stdout)
    if payload is None:
        tail = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]
        return Ran(None, None, Finished(returncode, False, "", stderr[-4096:]),
                   problem=f"the sandbox returned no result (exit {returncode}: {short(tail)})")
    return _ran(payload)


def timed_out_in_box(scenario: Scenario) -> Ran:
    """The sandbox's own time limit ran out (the call's limit is enforced inside, and shorter)."""
    return Ran(None, None, Finished(-9, True), problem=f"did not finish within the sandbox's time limit "
                                                       f"({exec_timeout(scenario)} s)")


def _ran(payload: dict[str, Any]) -> Ran:
    if payload.get("problem"):
        full = [str(f) for f in payload.get("full") or []]
        return Ran(None, None, Finished(-1, False), full, str(payload["problem"]))
    done = Finished(int(payload.get("returncode", -1)), bool(payload.get("timed_out")),
                    str(payload.get("stdout_tail", "")), str(payload.get("stderr_tail", "")))
    result, reference = payload.get("result"), payload.get("reference")
    return Ran(result if isinstance(result, dict) else None, reference if isinstance(reference, dict) else None,
               done, [str(f) for f in payload.get("full") or []])


def _run(scenario: Scenario, job: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(the child's result, None), or ({}, what went wrong with the process)."""
    ran = _launch(scenario, _request(scenario, job))
    return (ran.result, None) if ran.result is not None else ({}, _problem(scenario, ran))


def _launch(scenario: Scenario, asked: bytes) -> Ran:
    """box.py as a sandbox runs it, without the sandbox: a process of its own in a temp dir, with the minimal
    environment, the request on its stdin, its group killed afterwards (``feed_and_wait``, as the export's
    sandbox runs every exec)."""
    with tempfile.TemporaryDirectory(prefix="baton-export-") as tmp:
        argv = [sys.executable, "-I", "-B", str(scenario.folder / "baton_runtime" / "box.py")]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=tmp, env=minimal_env(Path(tmp)), start_new_session=True)
        returncode, out, err, over, timed_out = feed_and_wait(proc, asked, exec_timeout(scenario),
                                                              FRAME_BYTES + 65536, threading.Event())
    if timed_out:
        return timed_out_in_box(scenario)
    if over:
        return Ran(None, None, Finished(returncode, False), problem="the box printed more than a frame")
    return ran_from_box(returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def _filled(ran: Ran) -> str:
    return f" (the call filled its writable space: {', '.join(ran.full)})" if ran.full else ""


def _problem(scenario: Scenario, ran: Ran, returncode: int | None = None) -> str:
    """What went wrong with a child that left no result; ``returncode`` is that of the
    forked replay when it was the one that ended without."""
    if ran.problem:
        return ran.problem + _filled(ran)
    done = ran.done
    if done.timed_out:
        return f"did not finish within the time limit ({scenario.timeout_s:g} s)"
    tail = done.stderr_tail.strip().splitlines()[-1:] or ["no output"]
    said = (f"ended without a result (exit {done.returncode if returncode is None else returncode}, memory limit "
            f"{scenario.memory_mb} MB): {short(tail[0])}")
    return f"filled its writable space ({', '.join(ran.full)}) and {said}" if ran.full else said

"""Run one evaluation sample in a child process (spawned by ``proving/evaluation/child.py``).

Usage: ``python -I child_main.py <job.json>``. Standalone on purpose: stdlib only,
no baton imports, because this process runs generated code (tools, checkers) and
must not carry baton's modules, state or secrets.

The job names the copied ``tools/`` and ``checkers/`` folders, the sample (already
schema-checked by the parent), a ``mode`` ("sample", the default: replay the sample's
actions and run the checkers; "reference", "call", "judge" and "reference_and_judge",
used by an exported task: see the ``Runner`` methods of those names) and two files this
process writes:

- ``progress_path``: the phase we are in ("load", "sample", "actions", "checkers"),
  rewritten at every step, so the parent can classify a child it had to kill
  (time limit) or that died (memory, signal) without a result;
- ``result_path``: the facts of the run, written once at the end. The parent
  classifies; this process only reports what happened.
"""

from __future__ import annotations

import copy
import gc
import importlib.util
import inspect
import json
import os
import resource
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

MESSAGE_CHARS = 600  # an exception message in a reason; the traceback goes to the trace
TRACEBACK_CHARS = 4000


class DesignIssue(Exception):
    """Raised by a checker when the design's rules contradict each other or leave
    the sample's outcome undetermined (layer L1)."""


def install_baton_eval() -> None:
    """Make ``from baton_eval import DesignIssue`` work for checkers without
    putting any folder of baton on sys.path."""
    module = types.ModuleType("baton_eval", "What evaluation checkers may import from baton.")
    DesignIssue.__module__ = "baton_eval"
    module.DesignIssue = DesignIssue  # type: ignore[attr-defined]
    module.__all__ = ["DesignIssue"]  # type: ignore[attr-defined]
    sys.modules["baton_eval"] = module


# An item a line (the C encoder still does it: only ``indent`` makes json use the slow Python one). What shows a
# file's first lines then shows kilobytes, not a benchmark's megabytes of data on one line: Inspect's
# sandbox events log 20 lines of what an exported task's box prints.
SEPARATORS = (",\n", ": ")


class Written(str):
    """A value already in JSON (the final data of a mode that only sends it back): written as it is."""


def write_json(path: str, value: Any) -> None:
    # No fsync: the parent reads this on the same machine after the process ends.
    tmp = f"{path}.tmp"
    # json.dumps, not json.dump: dump writes piece by piece from Python's own encoder, about ten times
    # slower than the C one that dumps uses (half a second for a benchmark's 5 MB of data).
    written = {k: v for k, v in value.items() if isinstance(v, Written)} if isinstance(value, dict) else {}
    text = json.dumps({k: v for k, v in value.items() if k not in written} if written else value, ensure_ascii=False,
                      separators=SEPARATORS)
    if written:  # spliced in before the closing brace: each was dumped once, by the one who made it
        text = text[:-1] + "".join(f'{SEPARATORS[0] if len(text) > 2 or i else ""}{json.dumps(k)}: {v}'
                                   for i, (k, v) in enumerate(written.items())) + "}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def jsonable(value: Any) -> Any:
    """The value as JSON gives it back (int keys become strings, tuples lists),
    so checkers and the parent see the same thing. Raises ValueError/TypeError."""
    return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))


def describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


class Runner:
    def __init__(self, job: dict[str, Any]):
        self.job = job
        self.tools_dir = Path(job["tools_dir"])
        self.checkers_dir = Path(job["checkers_dir"])
        self.sample: dict[str, Any] = job["sample"]
        self.phase = "load"
        self.detail: dict[str, Any] = {}
        self.design_issues: list[dict[str, str]] = []
        self.data: Any = None
        self.result: dict[str, Any] = {
            "completed": False, "tools": [], "outputs": [], "checkers": [], "checker_errors": [],
        }

    # ---- bookkeeping ----------------------------------------------------------

    def enter(self, phase: str, **detail: Any) -> None:
        self.phase, self.detail = phase, detail
        write_json(self.job["progress_path"], {"phase": phase, **detail, "design_issues": self.design_issues})

    def stop(self, kind: str, message: str, **extra: Any) -> None:
        self.result["error"] = {"phase": self.phase, "kind": kind, "message": message, **self.detail, **extra}

    def where(self, exc: BaseException) -> dict[str, Any]:
        """The exception as a short message plus the innermost frame in generated code."""
        message = f"{type(exc).__name__}: {exc}"[:MESSAGE_CHARS]
        frames = traceback.extract_tb(exc.__traceback__)
        work = str(self.tools_dir.parent)
        mine = [f for f in frames if f.filename.startswith(work)]
        location = ""
        if mine:
            last = mine[-1]
            location = f"{os.path.relpath(last.filename, work)}:{last.lineno} in {last.name}"
        text = "".join(traceback.format_exception(exc)).replace(work + os.sep, "")
        return {"exception": message, "location": location, "traceback": text[-TRACEBACK_CHARS:]}

    # ---- the run --------------------------------------------------------------

    def run(self) -> None:
        if self.replay_sample():
            self.run_checkers()
            self.result["completed"] = True

    def reference(self) -> None:
        """Mode "reference": the sample's actions on the initial data, without the checkers
        (an exported task compares a model's final data with this one's)."""
        if self.replay_sample():
            self.result["completed"] = True

    def replay_sample(self) -> bool:
        """Load the tools, check the sample's actions against them, load the data, replay."""
        tools = self.load_tools()
        if tools is None or not self.check_sample(tools):
            return False
        data = self.load_data()
        if data is None:
            return False
        self.data = data
        return self.replay(tools)

    def call(self) -> None:
        """Mode "call" (an exported task's tool call): one action on the data the job
        carries; the result holds its output and the data afterwards."""
        tools = self.load_tools()
        if tools is None or not self.check_sample(tools):
            return
        self.data = self.job["data"]  # the caller has the data as it was: no copy of it is kept or sent back
        if self.replay(tools):
            self.result["completed"] = True

    def judge(self) -> None:
        """Mode "judge" (an exported task's scorer): the checkers on an outcome someone
        else produced (the job's ``outcome``: outputs, final_data, initial_data)."""
        outcome = self.job["outcome"]
        for key in ("outputs", "final_data", "initial_data"):
            self.result[key] = outcome[key]
        self.run_checkers()
        self.result["completed"] = True

    def reference_and_judge(self) -> None:
        """Mode "reference_and_judge" (an exported task's scorer, one child instead of two):
        mode "reference" in a forked process, in the folder and to the result file that the
        job's ``reference`` names, then, once it has ended, mode "judge" here.

        Forked before any generated code is loaded, the replay starts from the state a fresh
        child has and keeps its own memory, working directory and environment: what the tools
        leave in their modules, in the standard library's or in files cannot reach the
        checkers, which run as in a child of their own. Whether the replay left a result the
        parent reads from the file; the fork's exit status is kept for when it left none."""
        returncode = fork_and_run({**self.job, **self.job["reference"], "mode": "reference"})
        self.result["reference_returncode"] = returncode
        if read_json(self.job["reference"]["result_path"]).get("completed") is True:
            self.judge()  # no replay, no verdict: the checkers would run for nothing

    def load_tools(self) -> dict[str, Callable[..., Any]] | None:
        self.enter("load", step="tools")
        path = self.tools_dir / "tools.py"
        if not path.is_file():
            self.stop("tools_missing", "tools/tools.py not found; write the tool functions there")
            return None
        sys.path.append(str(self.tools_dir))  # appended: a helper module must not shadow the stdlib
        try:
            module = load_module("tools", path)
        except MemoryError:
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit at import time is a tool bug too
            info = self.where(exc)
            self.stop("tools_import", f"tools/tools.py failed to import: {info['exception']}", **info)
            return None
        tools = public_functions(module, lambda name: not name.startswith("_"))
        self.result["tools"] = sorted(tools)
        if not tools:
            self.stop(
                "no_tools", "tools/tools.py defines no public function; define def name(data: dict, **args) -> dict"
            )
            return None
        return tools

    def check_sample(self, tools: dict[str, Callable[..., Any]]) -> bool:
        """Every action names a tool and fits its signature (a sample problem, L4)."""
        self.enter("sample")
        for index, action in enumerate(self.sample.get("actions", [])):
            name, args = action["tool"], action.get("args", {})
            self.detail = {"action": index, "tool": name}
            if name not in tools:
                self.stop(
                    "unknown_tool",
                    f"action {index} names tool {name!r}, which tools/tools.py does not define; "
                    f"tools: {', '.join(sorted(tools))}",
                )
                return False
            signature = inspect.signature(tools[name])
            try:
                signature.bind({}, **args)
            except TypeError as exc:
                self.stop("bad_args", f"action {index} calls {name}{signature} with args {describe(args)}: {exc}",
                          why=str(exc))
                return False
        return True

    def load_data(self) -> dict[str, Any] | None:
        self.enter("load", step="data")
        path = self.tools_dir / "data.json"
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text)
        except FileNotFoundError:
            self.stop("data_missing", "tools/data.json not found; write the initial data there as a JSON object")
            return None
        except (UnicodeDecodeError, ValueError) as exc:
            self.stop("data_invalid", f"tools/data.json is not valid JSON: {exc}")
            return None
        if not isinstance(data, dict):
            self.stop("data_invalid", f"tools/data.json must hold a JSON object, not {type(data).__name__}")
            return None
        if "initial_data" not in NOT_SENT_BACK.get(self.job.get("mode", "sample"), ()):
            self.result["initial_data"] = json.loads(text)  # a copy the tools cannot reach: twice as fast as deepcopy
        return data

    def replay(self, tools: dict[str, Callable[..., Any]]) -> bool:
        outputs: list[Any] = self.result["outputs"]
        for index, action in enumerate(self.sample.get("actions", [])):
            name = action["tool"]
            self.enter("actions", action=index, tool=name)
            try:
                output = tools[name](self.data, **copy.deepcopy(action.get("args", {})))
            except MemoryError:
                raise
            except BaseException as exc:  # noqa: BLE001 - whatever the tool raises is its failure
                info = self.where(exc)
                at = f" at {info['location']}" if info["location"] else ""
                self.stop("tool_raised", f"action {index}: tool {name} raised {info['exception']}{at}", **info)
                return False
            if not isinstance(output, dict):
                self.stop(
                    "bad_output",
                    f"action {index}: tool {name} returned {type(output).__name__} {describe(output)}, not a dict",
                )
                return False
            try:
                outputs.append(jsonable(output))
            except (TypeError, ValueError) as exc:
                self.stop(
                    "bad_output", f"action {index}: tool {name} returned a dict that is not JSON-serialisable ({exc})"
                )
                return False
        self.enter("actions", step="final_data")
        try:
            if self.job.get("mode") in SENT_BACK_ONLY:  # no checker here reads it: dumped once, never parsed again
                self.result["final_data"] = Written(json.dumps(self.data, ensure_ascii=False, allow_nan=False,
                                                               separators=SEPARATORS))
            else:
                self.result["final_data"] = jsonable(self.data)
        except (TypeError, ValueError) as exc:
            self.stop("bad_state", f"the tools left a value in data that is not JSON-serialisable ({exc})")
            return False
        return True

    def run_checkers(self) -> None:
        self.enter("checkers", step="import")
        checks = self.load_checkers()
        outcome = {k: self.result[k] for k in ("outputs", "final_data", "initial_data")}
        for name, check in checks:
            self.enter("checkers", checker=name)
            verdict = self.run_checker(name, check, outcome)
            self.result["checkers"].append(verdict)
            if verdict["error"] == "design_issue":
                self.design_issues.append({"checker": name, "message": verdict["reason"]})

    def load_checkers(self) -> list[tuple[str, Callable[..., Any]]]:
        checks: list[tuple[str, Callable[..., Any]]] = []
        if not self.checkers_dir.is_dir():
            return checks
        sys.path.append(str(self.checkers_dir))  # lets checkers import shared helpers
        for path in sorted(self.checkers_dir.glob("*.py")):
            if path.name.startswith("_"):
                continue
            name = path.stem if path.stem not in sys.modules else f"_checker_{path.stem}"
            try:
                module = load_module(name, path)
            except MemoryError:
                raise
            except BaseException as exc:  # noqa: BLE001 - an import failure is the checker's
                info = self.where(exc)
                self.result["checker_errors"].append({"module": f"checkers/{path.name}", **info})
                continue
            found = public_functions(module, lambda n: n.startswith("check_"))
            checks.extend((f"{path.stem}.{fn}", found[fn]) for fn in found)
        return checks

    def run_checker(self, name: str, check: Callable[..., Any], outcome: dict[str, Any],
                    copy_outcome: bool = True) -> dict[str, Any]:
        """``copy_outcome``: False when the checker runs in a fork of its own, whose outcome is its own already
        (the gates' runs: child_runs.py), so megabytes of data are not copied for each checker."""
        verdict: dict[str, Any] = {"checker": name, "passed": None, "reason": "", "error": None}
        try:
            value = check(copy.deepcopy(self.sample), copy.deepcopy(outcome) if copy_outcome else outcome)
        except MemoryError:
            raise
        except BaseException as exc:  # noqa: BLE001 - a checker crash is reported, not fatal
            # By name too: a checker that defines its own DesignIssue still means L1.
            if isinstance(exc, DesignIssue) or type(exc).__name__ == "DesignIssue":
                reason = str(exc)[:MESSAGE_CHARS] or "DesignIssue (no message)"
                return {**verdict, "error": "design_issue", "reason": reason}
            info = self.where(exc)
            at = f" at {info['location']}" if info["location"] else ""
            reason = f"raised {info['exception']}{at}"
            return {**verdict, "error": "raised", "reason": reason, "traceback": info["traceback"]}
        if isinstance(value, bool):
            return {**verdict, "passed": value}
        if isinstance(value, dict) and isinstance(value.get("passed"), bool):
            reason = value.get("reason", "")
            text = reason if isinstance(reason, str) else repr(reason)
            return {**verdict, "passed": value["passed"], "reason": text[:MESSAGE_CHARS]}
        expected = "return {'passed': bool, 'reason': str} or a bool"
        return {**verdict, "error": "bad_type", "reason": f"returned {describe(value)}; {expected}"}

    def out_of_memory(self) -> None:
        # Drop what the generated code built so there is room to write the result.
        self.data = None
        self.result.pop("final_data", None)
        self.result["outputs"] = []
        gc.collect()
        self.stop("memory", "memory limit reached (MemoryError)")


def load_module(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered first so the module can import itself / be imported by helpers
    spec.loader.exec_module(module)
    return module


def public_functions(module: types.ModuleType, wanted: Callable[[str], bool]) -> dict[str, Callable[..., Any]]:
    """Functions defined in ``module`` itself (not imported into it), in source order."""
    found = [
        (obj.__code__.co_firstlineno, name, obj)
        for name, obj in vars(module).items()
        if wanted(name) and inspect.isfunction(obj) and obj.__module__ == module.__name__
    ]
    return {name: obj for _, name, obj in sorted(found, key=lambda item: item[0])}


def limit_processes(most: int | None) -> None:
    """RLIMIT_NPROC, set here because it must be set inside the sandbox's user namespace, where
    it counts this sample's processes only (proving/sandbox/limits.py)."""
    if most:
        resource.setrlimit(resource.RLIMIT_NPROC, (most, most))


def read_json(path: str) -> dict[str, Any]:
    """The object a forked part wrote, or {} if it wrote none."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def fork_and_run(job: dict[str, Any]) -> int:
    """Run ``job`` in a forked process whose working directory, HOME and TMPDIR are the
    job's ``cwd``; its exit status, as ``subprocess`` gives one (-N: killed by signal N).
    The fork shares this process's group, limits and output streams."""
    sys.stdout.flush()  # nothing buffered here may be written twice
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        end_of_fork(lambda: _run_apart(job))
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _run_apart(job: dict[str, Any]) -> int:
    os.chdir(job["cwd"])
    os.environ["HOME"] = os.environ["TMPDIR"] = job["cwd"]
    return run_job(job)


def end_of_fork(body: Callable[[], int]) -> NoReturn:
    """How a forked process ends (here and in the sample server's children): with ``body``'s exit
    code, 1 after an uncaught error (told on stderr, as a fresh Python would), its output flushed,
    and never back into the frames it was forked from."""
    code = 1
    try:
        code = body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - told on stderr, like an uncaught error in a fresh Python
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main(argv: list[str]) -> int:
    """``child_main.py JOB [WHERE]``: WHERE, when given, holds the job's paths and limits apart from the job
    itself (the export's box writes the job as the task sent it, unparsed, and its own paths beside it)."""
    job = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    if len(argv) > 2:
        job.update(json.loads(Path(argv[2]).read_text(encoding="utf-8")))
    limit_processes(job.get("max_processes"))
    install_baton_eval()
    return run_job(job)


def run_job(job: dict[str, Any]) -> int:
    # The gates' work on one sample, in a module beside this file: the deterministic runs (child_runs.py) and the
    # policy's predicates (child_policy.py).
    beside = {"runs": "child_runs", "policy": "child_policy"}.get(str(job.get("mode")))
    if beside is not None:
        spec = importlib.util.spec_from_file_location(f"baton_{beside}", Path(__file__).with_name(f"{beside}.py"))
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {beside}.py")
        runs = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = runs  # dataclasses look their module up while it is executed
        spec.loader.exec_module(runs)
        return int(runs.run(job, sys.modules[__name__]))
    runner = Runner(job)
    modes = {"sample": runner.run, "reference": runner.reference, "call": runner.call, "judge": runner.judge,
             "reference_and_judge": runner.reference_and_judge}
    out_of_memory = False
    try:
        modes[job.get("mode", "sample")]()
    except MemoryError:
        out_of_memory = True
    # Handled after the except block: until then the exception's traceback keeps
    # the generated code's frames, and what they allocated, alive.
    if out_of_memory:
        runner.out_of_memory()
    result = {**runner.result, "phase": runner.phase, "design_issues": runner.design_issues}
    for key in NOT_SENT_BACK.get(job.get("mode", "sample"), ()):
        result.pop(key, None)
    write_json(job["result_path"], result)
    return 0


# What an exported task's modes leave out of their result: the caller sent it, or does not read it. With a
# benchmark's megabytes of data each copy is a megabytes-long JSON written, framed and parsed once more.
NOT_SENT_BACK = {"call": ("initial_data",), "reference": ("initial_data",),
                 "judge": ("outputs", "final_data", "initial_data"),
                 "reference_and_judge": ("outputs", "final_data", "initial_data")}
SENT_BACK_ONLY = ("call", "reference")  # modes whose final data no checker of theirs reads


if __name__ == "__main__":
    sys.exit(main(sys.argv))

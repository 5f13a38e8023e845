"""The deterministic gates' runs of one sample in one confined process (``child_main.py``'s mode "runs";
the worker's side is ``gate_harness.py``). Standard library only, no baton imports: loaded by path beside
``child_main.py``, like it, in the sample server's sandbox.

The exported task runs every tool call and every judgement in a process of its own, each sent the sample's
data as JSON and sending it back: with a benchmark's megabytes of data that is most of what a gate costs. Here
the sample's process parses the data once and never runs generated code itself; it forks:

- the reference replay of the sample's expected actions (once for all its runs);
- per run, one process that makes the run's calls one after another on its copy-on-write copy of the data,
  with each call's effects checked and made JSON as the export's next call would receive them; a call that
  fails (raises, returns no dict, leaves data JSON cannot hold, or ends its process) leaves the data as it was
  before it, as the export's failed call does;
- per run, one process that loads the checkers and runs each, in a fork of its own, on the run's outcome.

The forks tell this process only what changed: the data is seen in *entries*, each top-level value, or each
value of a top-level object, by its bytes (``marshal``, version 2: no references, so equal values give equal
bytes). The final data of a run is this process's data with the changed entries put in (``apply``): what no
call touched is shared, and the comparison passes over it by identity (``compare.effect_differences``), so a
run costs what its calls change, not the size of the data. The differences are computed here with the
export's own ``compare.py``; the worker makes the verdict of them with the checkers' (``compare``, again).
"""

from __future__ import annotations

import copy
import json
import marshal
import os
import re
import resource
import select
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MISSING = object()
EXITED_AFTER_RESULT = 0
# The tools that only look, as coverage.py tells them (this file cannot import it).
LOOKING = re.compile(r"^(get|list|find|search|lookup|look_up|check|read|view|show|fetch|query|describe)_")


@dataclass(frozen=True)
class Top:
    """A top-level object's bytes as a whole (one C-speed ``marshal`` of it) and its values' bytes: a table no call
    touched is told by its whole, without a look at its rows."""

    whole: Any
    rows: dict[Any, Any]


Prints = dict[Any, Any]  # top-level key -> its bytes, or a Top


def load_beside(name: str) -> Any:
    """A stdlib module of baton's beside this file, by path (``-I``: no folder of baton is on sys.path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"baton_{name}", Path(__file__).with_name(f"{name}.py"))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


compare = load_beside("compare")


# ---- entries ------------------------------------------------------------------------------------------------


def _pack(value: Any) -> Any:
    try:
        return marshal.dumps(value, 2)
    except ValueError:  # not a plain JSON value (a set, an object): never equal to anything, so always changed
        return object()


def fingerprint(data: dict[Any, Any], previous: Prints | None = None) -> Prints:
    """The bytes of ``data``'s entries; a top-level object whose whole is as in ``previous`` keeps its rows."""
    found: Prints = {}
    for key, value in data.items():
        if type(value) is dict:
            whole = _pack(value)
            before = previous.get(key) if previous else None
            if isinstance(before, Top) and before.whole == whole:
                found[key] = before
            else:
                found[key] = Top(whole, {inner: _pack(item) for inner, item in value.items()})
        else:
            found[key] = _pack(value)
    return found


def changed(before: Prints, after: Prints) -> list[tuple[Any, ...]]:
    """The entries whose bytes differ: ``(key,)`` for a top-level value (or its kind), ``(key, row)`` for a value of
    a top-level object; the top-level ones first."""
    tops: list[tuple[Any, ...]] = []
    rows: list[tuple[Any, ...]] = []
    for key in [*after, *(k for k in before if k not in after)]:
        old, new = before.get(key, MISSING), after.get(key, MISSING)
        if old is new:
            continue
        if isinstance(old, Top) and isinstance(new, Top):
            if old.whole != new.whole:
                rows += [(key, r) for r in new.rows if old.rows.get(r, MISSING) != new.rows[r]]
                rows += [(key, r) for r in old.rows if r not in new.rows]
            continue
        if old == new:
            continue
        tops.append((key,))
        for side in (old, new):
            if isinstance(side, Top):
                rows += [(key, r) for r in side.rows if (key, r) not in rows]
    return tops + rows


def _get(data: dict[Any, Any], key: tuple[Any, ...]) -> Any:
    if len(key) == 1:
        return data.get(key[0], MISSING)
    parent = data.get(key[0], MISSING)
    return parent.get(key[1], MISSING) if type(parent) is dict else MISSING


def _put(data: dict[Any, Any], key: tuple[Any, ...], value: Any) -> None:
    """Set (or, with MISSING, remove) an entry; a Top makes its key an object if it is not one."""
    if len(key) == 1:
        if value is MISSING:
            data.pop(key[0], None)
        elif isinstance(value, Top):
            if type(data.get(key[0])) is not dict:
                data[key[0]] = {}
        else:
            data[key[0]] = value
        return
    parent = data.get(key[0])
    if type(parent) is not dict:
        parent = data[key[0]] = {}
    if value is MISSING:
        parent.pop(key[1], None)
    else:
        parent[key[1]] = value


def _old(before: Prints, key: tuple[Any, ...]) -> Any:
    top = before.get(key[0], MISSING)
    if len(key) == 1:
        return top
    return top.rows.get(key[1], MISSING) if isinstance(top, Top) else MISSING


def restore(data: dict[Any, Any], before: Prints, keys: list[tuple[Any, ...]]) -> None:
    """Put the entries ``keys`` back as ``before`` holds them (a failed call's effects undone)."""
    for key in keys:
        old = _old(before, key)
        _put(data, key, old if old is MISSING or isinstance(old, Top) else marshal.loads(old))


def normalise(data: dict[Any, Any], keys: list[tuple[Any, ...]], now: Prints,
              touched: set[Any] | None = None) -> str | None:
    """Make the changed entries what JSON gives back (tuples lists, int keys strings), as the export's next call
    receives its data, and ``now`` their bytes; why the data cannot be JSON, if it cannot (then nothing is
    changed). ``touched`` gets the top-level keys whose values JSON changed."""
    touched = set() if touched is None else touched
    try:
        if any(not isinstance(part, str) for key in keys for part in key):  # a key JSON turns into a string
            whole = json.loads(json.dumps(data, ensure_ascii=False, allow_nan=False))
            data.clear()
            data.update(whole)
            now.clear()
            now.update(fingerprint(data))
            touched.update(data)
            return None
        made = {}
        for key in keys:
            value = _get(data, key)
            if value is not MISSING and not (len(key) == 1 and type(value) is dict):
                made[key] = json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        return f"the tools left a value in data that is not JSON-serialisable ({exc})"
    for key, value in made.items():
        if _pack(value) != _pack(_get(data, key)):  # JSON gave back another value: its bytes are new
            _put(data, key, value)
            touched.add(key[0])
    if touched:
        now.update(fingerprint({k: data[k] for k in touched if k in data}))
    return None


def delta(base: Prints, data: dict[Any, Any], now: Prints) -> dict[str, Any]:
    """What changed from ``base`` (the sample's data) to ``data`` (whose entries' bytes are ``now``), as JSON:
    entries set, top-level objects made, and entries gone."""
    keys = changed(base, now)
    put = [[list(k), v] for k in keys if (v := _get(data, k)) is not MISSING and not (len(k) == 1 and type(v) is dict)]
    objects = [k[0] for k in keys if len(k) == 1 and type(_get(data, k)) is dict]
    gone = [list(k) for k in keys if _get(data, k) is MISSING]
    return {"set": put, "objects": objects, "gone": gone}


def apply(base: dict[Any, Any], change: dict[str, Any]) -> dict[Any, Any]:
    """``base`` with ``change`` (a ``delta``) put in; what did not change is ``base``'s own, shared."""
    data = dict(base)
    copied: set[Any] = set()

    def own(top: Any) -> dict[Any, Any]:
        if top not in copied:
            data[top] = dict(data[top]) if type(data.get(top)) is dict else {}
            copied.add(top)
        return data[top]

    for top in change.get("objects", []):
        if type(data.get(top)) is not dict:
            data[top] = {}
            copied.add(top)
    for path in change.get("gone", []):
        if len(path) == 1:
            data.pop(path[0], None)
        elif type(data.get(path[0])) is dict:
            own(path[0]).pop(path[1], None)
    for path, value in change.get("set", []):
        if len(path) == 1:
            data[path[0]] = value
        else:
            own(path[0])[path[1]] = value
    return data


# ---- the processes ------------------------------------------------------------------------------------------


@dataclass
class Node:
    """A prefix tree of the runs' calls: a node is the data after the calls on the path to it."""

    call: dict[str, Any] | None = None
    children: list[Node] = field(default_factory=list)
    ends: list[str] = field(default_factory=list)  # the runs whose calls end here
    size: int = 0  # the calls in this subtree, its own included

    def child(self, call: dict[str, Any]) -> Node:
        found = next((c for c in self.children if c.call == call), None)
        if found is None:
            found = Node(call)
            self.children.append(found)
        return found


def tree(runs: dict[str, list[dict[str, Any]]]) -> Node:
    """The runs' calls as a prefix tree: runs whose first calls are the same share those calls' processes (and
    what the tools built in them: a model of the data, say)."""
    root = Node()
    for name, calls in runs.items():
        node = root
        for call in calls:
            node = node.child({"tool": call["tool"], "args": call.get("args") or {}})
        node.ends.append(name)
    _size(root)
    return root


def _size(node: Node) -> int:
    node.size = (node.call is not None) + sum(_size(c) for c in node.children)
    return node.size



def forked(body: Callable[[], int], cm: Any, deadline_s: float) -> tuple[int, bool]:
    """Run ``body`` in a fork of this process; (its exit code, whether it was killed at ``deadline_s``)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        cm.end_of_fork(body)
    handle = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([handle], [], [], deadline_s)
    finally:
        os.close(handle)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), not ready


def read(path: Path) -> dict[str, Any]:
    """What a fork wrote there ({} if nothing), and the file gone: a later fork may be given the same name."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    finally:
        try:
            path.unlink()
        except OSError:
            pass
    return value if isinstance(value, dict) else {}


class Sample:
    """The sample's process: its data parsed once, its runs forked from it."""

    def __init__(self, job: dict[str, Any], cm: Any) -> None:
        self.job, self.cm = job, cm
        self.sample: dict[str, Any] = job["sample"]
        self.limit_s = float(job["call_timeout_s"])
        self.work = Path(job["result_path"]).parent
        self.data: dict[str, Any] = {}
        self.base: Prints = {}
        self.count = 0
        self.tools: dict[str, Callable[..., Any]] | None = None  # in a run's fork: loaded once

    def file(self, name: str) -> Path:
        self.count += 1
        return self.work / f"{name}-{os.getpid()}-{self.count}.json"  # forks count on from their parent's count

    def progress(self, phase: str, **detail: Any) -> None:
        self.cm.write_json(self.job["progress_path"], {"phase": phase, **detail, "design_issues": []})

    def load(self) -> str | None:
        """The sample's data, parsed once for every run; why it cannot be, if it cannot."""
        self.progress("load", step="data")
        path = Path(self.job["tools_dir"]) / "data.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            json.dumps(data, allow_nan=False)  # as the export's replay checks its final data
        except FileNotFoundError:
            return "tools/data.json not found"
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            return f"tools/data.json is not valid JSON data: {exc}"
        if not isinstance(data, dict):
            return "tools/data.json must hold a JSON object"
        self.data, self.base = data, fingerprint(data)
        return None

    # -- calls: a tree of forks, one per call, shared by the runs whose calls begin alike

    def visit(self, node: Node, data: dict[str, Any], now: Prints, made: list[dict[str, Any]], fresh: bool) -> None:
        """At ``node`` (the data as the calls to it left it, in this process): each run that ends here written, then
        each next call made in a fork of this process that goes on from there, one after another."""
        for run in node.ends:
            done = {"calls": made, "delta": delta(self.base, data, now)}
            self.cm.write_json(str(self.work / f"run-{run}.json"), done)
        for child in node.children:
            assert child.call is not None
            marker = self.file("call")
            forked(lambda: self.edge(child, data, now, made, fresh, marker), self.cm,
                   self.limit_s * (2 * child.size + 1))
            if read(marker):
                continue  # the fork made the call and went on with everything after it
            # It ended inside the call (its time limit, its memory, a crash): nothing it did counts, as the export's
            # call in a process of its own, and the runs through it go on from here.
            call = child.call
            record = {"tool": call["tool"], "args": call.get("args") or {}, "output": None,
                      "error": f"tool {call['tool']} did not finish within the time limit ({self.limit_s:g} s) or "
                               "ended without a result"}
            self.visit(child, data, now, [*made, record], True)

    def warm_and_visit(self, root: Node, actions: list[dict[str, Any]]) -> int:
        """In a fork (this sample's process never runs generated code): load the tools and make the sample's first
        call that only looks (get_, find_, list_...), so what the tools build on a first call (a model of the data)
        is built once for every run, then every run's calls. A look that changed the data, or failed, is undone
        and the runs load the tools afresh, as without it."""
        look = next((a for a in actions if LOOKING.match(str(a.get("tool", "")))), None)
        warm = False
        if look is not None:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.setitimer(signal.ITIMER_REAL, self.limit_s)
            _, error = self.call({"tool": look["tool"], "args": look.get("args") or {}}, self.data, True)
            signal.setitimer(signal.ITIMER_REAL, 0)
            keys = changed(self.base, fingerprint(self.data, self.base))
            restore(self.data, self.base, keys)
            warm = error is None and not keys
        self.visit(root, self.data, self.base, [], not warm)
        return EXITED_AFTER_RESULT

    def edge(self, node: Node, data: dict[str, Any], now: Prints, made: list[dict[str, Any]], fresh: bool,
             marker: Path) -> int:
        """In a fork: make ``node``'s call, tell the parent it was made, and go on from there."""
        call = node.call
        assert call is not None
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # a call past its limit ends this process
        signal.setitimer(signal.ITIMER_REAL, self.limit_s)
        output, error = self.call(call, data, fresh)
        after = fingerprint(data, now)
        keys = changed(now, after)
        touched: set[Any] = set()
        if error is None and keys:
            error = normalise(data, keys, after, touched)
        if error is not None:
            restore(data, now, keys)
            after = now
        signal.setitimer(signal.ITIMER_REAL, 0)
        record = {"tool": call["tool"], "args": call.get("args") or {}, "output": output, "error": error}
        self.cm.write_json(str(marker), {"made": True})
        # The data was changed behind the tools' back (a failed call undone, JSON's form of a value): whatever the
        # tools keep of it (a model built from it) is stale, so the next call loads them afresh.
        self.visit(node, data, after, [*made, record], bool(touched) or (error is not None and bool(keys)))
        return EXITED_AFTER_RESULT

    def call(self, call: dict[str, Any], data: dict[str, Any], fresh: bool) -> tuple[Any, str | None]:
        """One call as the export's box makes it (child_main's mode "call"): (its output, None) or (None, why).

        The tools stay loaded from one call of a run to the next (``fresh``: loaded again), so what they keep
        between calls (a model of the data built once) is kept, where the export loads them for each call."""
        runner = self.cm.Runner({**self.job, "sample": {"id": "call", "actions": [call]}, "mode": "call"})
        if fresh or self.tools is None:
            for name in [n for n, m in sys.modules.items() if _from(m, runner.tools_dir)]:
                del sys.modules[name]
            self.tools = runner.load_tools()
        tools = self.tools
        if tools is None or not runner.check_sample(tools):
            return None, _said(runner.result.get("error"))
        name = call["tool"]
        try:
            output = tools[name](data, **copy.deepcopy(call.get("args") or {}))
        except MemoryError:
            return None, "memory limit reached (MemoryError)"
        except BaseException as exc:  # noqa: BLE001 - whatever the tool raises is its failure
            info = runner.where(exc)
            return None, f"tool {name} raised {info['exception']}"
        if not isinstance(output, dict):
            return None, f"tool {name} returned {type(output).__name__}, not a dict"
        try:
            return self.cm.jsonable(output), None
        except (TypeError, ValueError, RecursionError) as exc:
            return None, f"tool {name} returned a dict that is not JSON-serialisable ({exc})"

    # -- checkers, in a fork

    def checkers(self, outcome: dict[str, Any], out: Path) -> int:
        """In a fork: every checker on ``outcome``, each in a fork of its own (no copy of the data to make)."""
        runner = self.cm.Runner(self.job)
        checks = runner.load_checkers()
        verdicts: dict[str, Any] = {"checkers": [], "checker_errors": runner.result["checker_errors"], "error": None}
        for name, check in checks:
            answer = self.file("checker")
            code, killed = forked(lambda: _check(runner, name, check, outcome, answer, self.cm),
                                  self.cm, self.limit_s)
            verdict = read(answer)
            if not verdict:
                why = "memory limit reached (MemoryError)" if code == 3 else (
                    f"did not finish within the time limit ({self.limit_s:g} s)" if killed
                    else f"ended without a result (exit {code})")
                verdicts["error"] = {"phase": "checkers", "kind": "memory" if code == 3 else "ended",
                                     "checker": name, "message": why}
                break
            verdicts["checkers"].append(verdict)
        self.cm.write_json(str(out), verdicts)
        return EXITED_AFTER_RESULT

    # -- the whole sample

    def main(self) -> int:
        result: dict[str, Any] = {"completed": False, "runs": {}, "reference_error": None}
        problem = self.load()
        if problem is not None:
            result["reference_error"] = problem
            self.cm.write_json(self.job["result_path"], result)
            return 0
        actions = [a for a in self.sample.get("actions", []) if isinstance(a, dict)]
        runs = {str(i): [c for c in run.get("calls", []) if isinstance(c, dict)]
                for i, run in enumerate(self.job["runs"])}
        self.progress("runs")
        root = tree({"reference": actions, **runs})
        forked(lambda: self.warm_and_visit(root, actions), self.cm, self.limit_s * (2 * root.size + 2))
        reference_run = read(self.work / "run-reference.json")
        failed = next((c for c in reference_run.get("calls", []) if c.get("error")), None)
        if failed is not None or not reference_run:
            result["reference_error"] = str(failed["error"]) if failed else "the replay left no result"
            self.cm.write_json(self.job["result_path"], result)
            return 0
        reference = apply(self.data, reference_run.get("delta") or {})
        written = compare.free_text(actions, self.data)
        for index, run in enumerate(self.job["runs"]):
            self.progress("run", run=run["id"])
            done = read(self.work / f"run-{index}.json")
            made = [c for c in done.get("calls", []) if isinstance(c, dict)]
            change = done.get("delta") or {}
            final = apply(self.data, change) if change else self.data
            differences = compare.outcome_differences(self.sample, reference, final, written)
            outcome = {"outputs": [c["output"] for c in made if c.get("output") is not None], "final_data": final,
                       "initial_data": self.data}
            out = self.file("checkers")
            code, killed = forked(lambda: self.checkers(outcome, out), self.cm, self.limit_s * 4)
            verdicts = read(out) or None
            problem = None if verdicts is not None else (
                f"did not finish within the time limit ({self.limit_s:g} s)" if killed
                else f"ended without a result (exit {code})")
            if not done:
                problem = "the run's calls left no result"
            result["runs"][run["id"]] = {"calls": made, "differences": differences, "verdicts": verdicts,
                                         "problem": problem}
        result["completed"] = True
        mine, forks = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        result["cpu_s"] = mine.ru_utime + mine.ru_stime + forks.ru_utime + forks.ru_stime  # for the benches
        result["peak_kb"] = max(mine.ru_maxrss, forks.ru_maxrss)
        self.cm.write_json(self.job["result_path"], result)
        return 0


def _check(runner: Any, name: str, check: Callable[..., Any], outcome: dict[str, Any], out: Path, cm: Any) -> int:
    try:
        verdict = runner.run_checker(name, check, outcome, copy_outcome=False)  # this fork's own copy already
    except MemoryError:
        return 3
    cm.write_json(str(out), verdict)
    return EXITED_AFTER_RESULT


def _from(module: Any, folder: Path) -> bool:
    where = getattr(module, "__file__", None)
    return isinstance(where, str) and where.startswith(str(folder) + os.sep)


def _said(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("why") or error.get("message") or "the call could not be made")
    return "the call could not be made"


def run(job: dict[str, Any], cm: Any) -> int:
    """child_main's mode "runs"."""
    return Sample(job, cm).main()

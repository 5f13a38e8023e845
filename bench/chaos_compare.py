"""What a copy of the chaos suite (bench/chaos.py) means, compared with its undisturbed twin.

Two runs of one copy by the same code mean the same when their figures, findings, handoffs, samples, the agents'
logs and the gates' Inspect logs say the same things. They never hold the same bytes: clocks, durations, usage and
the estimates that follow from quoted clocks differ between two undisturbed runs too, Inspect names its logs after
the time and a random id, and the copies live in different folders. So each file is parsed and those parts are set
aside before comparing (the constants below say which and why); an Inspect log is compared by what it records
(task, model, arguments, each sample's messages and scores, the metrics), matched by gate rather than by file name.

A difference that a fault explains is listed apart with its reason (``expected``) instead of counted: a gate that
ran again because its proving task was killed or redelivered leaves the earlier attempt's Inspect log.

Also here: ``audit``, the duplicated and lost records of a copy's logs (bench/scale.py uses it too).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = ("init", "execute")

# Files that differ between two runs by design, never compared: fencing's bookkeeping, and Python's bytecode caches
# (``__pycache__`` appears in an exported inspect_task/ when a gate's process imports it, and which process did,
# with which interpreter, is not part of what the run means).
EXCLUDED_NAMES = {"lease.json", "phase.lease.json", "discarded.jsonl", ".lock"}
EXCLUDED_DIRS = {"__pycache__"}
# The distributed gates' bookkeeping (proving/evaluation/gate_shards.py): ``state/gates/activity`` names the shard that
# wrote last (for the reaper's clock), which is the order in which workers happened to run them, and a shard's
# ``.progress`` counts its samples while it runs; the shard's result file beside it is what is compared.
GATES_DIR = ("state", "gates")
# Keys whose values are clocks, durations, or figures of the model's usage and cost: never compared.
# "reads" (agent.json's tool_memory) maps each file an agent read to the file's mtime when read:
# a clock too (two undisturbed runs differ there and nowhere else in agent.json).
IGNORED_KEYS = {"at", "since", "duration_s", "generated_at", "started_at", "updated_at", "usage", "cost_usd", "cost",
                "reads", "mtime"}
# Found by comparing two undisturbed runs (`--faults 0`), which differ in these and nowhere else: the clocks quoted
# in tool results make every later request differ, hence its fingerprint ("request"), and a few characters of
# length, hence the token estimates ("estimated_input"; a compaction's "tokens_before"/"tokens_after") and the
# estimator calibrated on the usage ("estimator"). Where a compaction happens is still compared (its after_step).
# The prefix digest after a reply ("prefix_after", context/prefix.py) hashes those requests too.
ESTIMATES = {"request", "estimated_input", "tokens_before", "tokens_after", "estimator", "prefix_after"}
IGNORED_KEYS |= ESTIMATES
# The same clocks quoted inside text: a tool result (Read of report.json, a file's "mtime") lands in the log, in
# tool_results/*.txt and so in the next request. Two undisturbed runs differ there, so inside any string the values
# of these keys (at any level of JSON escaping) and ISO timestamps are blanked before comparing.
_CLOCK_KEYS = "|".join(sorted(IGNORED_KEYS - ESTIMATES - {"usage", "reads"}))
_QUOTED_CLOCK = re.compile(rf'(\\*"(?:{_CLOCK_KEYS})\\*":\s*)(\\*"[^"\\]*\\*"|[-0-9.eE+]+)')
_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?")
# Inspect names a log "<start time>_<task>_<random id>.eval" (solver.json quotes it): the name says when, not what.
_INSPECT_LOG = re.compile(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(?:[-+]\d\d-\d\d|Z)?_[A-Za-z0-9_-]+?_[A-Za-z0-9]{22}\.eval")

# Where a compaction happens is decided by the token estimate against the threshold, and in the demo profile a
# step can land within a few tokens of it (10,991 of 11,000 in refund_desk's init step 8). A compaction in one run
# only therefore counts as a difference like any other (a crash that lost an estimator observation moved one:
# seed 5, fixed in 6089287), but the report names it and says when the deciding estimate was that close.
BORDERLINE_SHARE = 0.01


@dataclass
class Comparison:
    """One copy against its twin: (file, first difference) pairs counted as differing, and (file, reason) pairs
    that a fault explains."""

    diffs: list[tuple[str, str]] = field(default_factory=list)
    expected: list[tuple[str, str]] = field(default_factory=list)


# ---- reading ------------------------------------------------------------------------------------


def raw_jsonl(path: Path) -> list[Any]:
    out = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            out.append({"torn line": line[:80]})
    return out


def excluded(rel: Path) -> bool:
    gates = rel.parts[:2] == GATES_DIR
    return (rel.name in EXCLUDED_NAMES or rel.suffix in (".tmp", ".pyc") or ".tmp" in rel.name
            or any(part in EXCLUDED_DIRS for part in rel.parts)
            or (gates and (rel.parts[2:] == ("activity",) or rel.suffix == ".progress")))


class Normalizer:
    """Sets aside what says where and when rather than what: the copy's own folder (``<copy>``) and the folder of
    its run (``<scenarios>``) in any string, Inspect's log names, the clocks quoted in text, and the ids of the
    gates' plans, in strings and in paths (a plan is named by a digest of the iteration's report.json, which holds
    when it was written: ``<plan of iteration n>``, numbered in the order they were made when there are more)."""

    def __init__(self, root: Path):
        self.places = [(str(root), "<copy>"), (str(root.parent), "<scenarios>")]
        self.plans: dict[str, str] = {}
        for iteration in sorted(root.joinpath(*GATES_DIR).glob("iteration_*")):
            made = sorted((p for p in iteration.iterdir() if p.is_dir()), key=lambda p: (p.stat().st_mtime, p.name))
            for k, plan in enumerate(made, 1):
                self.plans[plan.name] = (f"<plan of {iteration.name}>" if len(made) == 1
                                         else f"<plan {k} of {iteration.name}>")
        self.places += [(plan, name) for plan, name in self.plans.items() if len(plan) >= 8]

    def path(self, rel: Path) -> Path:
        """``rel`` as both runs name it: a plan's folder by its place, not its id."""
        if rel.parts[:2] != GATES_DIR or len(rel.parts) < 4:
            return rel
        return Path(*rel.parts[:3], self.plans.get(rel.parts[3], rel.parts[3]), *rel.parts[4:])

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            for place, name in self.places:
                value = value.replace(place, name)
            value = _INSPECT_LOG.sub("<inspect log>.eval", value)
            return _ISO_TIME.sub("<time>", _QUOTED_CLOCK.sub(r"\1<clock>", value))
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        return value


def parsed(path: Path, norm: Normalizer) -> Any:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".jsonl":
        return norm(raw_jsonl(path))
    try:  # a .json file, and a tool result archived as text is often JSON
        return norm(json.loads(text))
    except json.JSONDecodeError:
        return norm(text)


def eval_meaning(path: Path, norm: Normalizer) -> dict[str, Any]:
    """What an Inspect log records: task, model, arguments, status, each sample's messages (role, text, the tools
    called with their arguments; not the calls' ids) and scores, and the metrics."""
    from inspect_ai.log import read_eval_log  # the gates' own dependency: only the comparison needs it here

    try:
        log = read_eval_log(str(path))
    except Exception as exc:  # a log Inspect cannot read is a finding to show, not a reason to stop comparing
        reason = f"Inspect cannot read it: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        try:
            head = read_eval_log(str(path), header_only=True).eval
            gate = {"model": head.model, "task_args": head.task_args}
        except Exception:
            gate = {"model": None, "task_args": {"unreadable log": path.name}}
        return norm(json.loads(json.dumps(gate | {"unreadable": reason}, default=str)))
    samples = []
    for s in sorted(log.samples or [], key=lambda s: (str(s.id), s.epoch)):
        samples.append({
            "id": s.id, "epoch": s.epoch, "error": s.error.message if s.error else None,
            "messages": [{"role": m.role, "text": m.text,
                          "calls": [[c.function, c.arguments] for c in getattr(m, "tool_calls", None) or []]}
                         for m in s.messages],
            "scores": {name: {"value": v.value, "answer": v.answer, "explanation": v.explanation,
                              "metadata": v.metadata} for name, v in (s.scores or {}).items()},
        })
    metrics = {score.name: {k: m.value for k, m in score.metrics.items()}
               for score in (log.results.scores if log.results else [])}
    meaning = {"task": log.eval.task, "model": log.eval.model, "task_args": log.eval.task_args,
               "status": log.status, "samples": samples, "metrics": metrics}
    return norm(json.loads(json.dumps(meaning, default=str)))


# ---- comparing ----------------------------------------------------------------------------------


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """The path of the first value that differs, ignoring IGNORED_KEYS at any depth."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key in IGNORED_KEYS:
                continue
            if key not in a or key not in b:
                return f"{where}.{key} (only in {'the chaos run' if key in b else 'the undisturbed run'})"
            found = first_difference(a[key], b[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        if len(a) != len(b):
            return f"{where or '(file)'} has {len(b)} items, {len(a)} undisturbed"
        return None
    return None if a == b else (where or "(whole value)")


def moved_compactions(a: Any, b: Any) -> list[str]:
    """The compactions in one of two events.jsonl only, each said with how close the other run's deciding estimate
    (the step after it) was to the threshold."""
    if not (isinstance(a, list) and isinstance(b, list)):
        return []

    def compacted(events: list[Any]) -> set[Any]:
        return {e.get("after_step") for e in events if isinstance(e, dict) and e.get("kind") == "compaction"}

    def estimate(events: list[Any], step: Any) -> str:
        for e in events:
            if isinstance(e, dict) and e.get("kind") == "step" and e.get("step") == step:
                est, limit = e.get("estimated_input"), e.get("threshold")
                if isinstance(est, int) and isinstance(limit, int):
                    close = " (borderline)" if abs(est - limit) <= BORDERLINE_SHARE * limit else ""
                    return f"{est:,} of {limit:,} tokens{close}"
        return "no step event"

    notes = []
    for run, mine, other in (("undisturbed", a, b), ("chaos", b, a)):
        for k in sorted(x for x in compacted(mine) - compacted(other) if isinstance(x, int)):
            notes.append(f"compaction after step {k} only in the {run} run; the other run estimated step {k + 1} "
                         f"at {estimate(other, k + 1)}")
    return notes


def compare_inspect_logs(twin: Path, root: Path, folder: Path, proving_faulted: bool, out: Comparison) -> None:
    """The Inspect logs of one proving_logs/ folder, matched by gate (model and task arguments, which name the
    runs file of a floor or mutation gate, or none for the solver) rather than by file name; within a gate the
    latest logs of the chaos run are compared with the undisturbed run's, in the order they were written."""
    where = f"{root.name}/{folder}/*.eval"
    by_gate: list[dict[str, list[dict[str, Any]]]] = []
    for base in (twin, root):
        norm = Normalizer(base)
        gates: dict[str, list[dict[str, Any]]] = {}
        for path in sorted((base / folder).glob("*.eval")):  # names start with the time: oldest first
            meaning = eval_meaning(path, norm)
            gate = json.dumps({"model": meaning["model"], "task_args": meaning["task_args"]}, sort_keys=True)
            gates.setdefault(gate, []).append(meaning)
        by_gate.append(gates)
    calm, chaos = by_gate
    for gate in sorted(set(calm) | set(chaos)):
        want, got = calm.get(gate, []), chaos.get(gate, [])
        label = f"{where} (gate {gate})"
        unreadable = "; ".join(f"{run}: {log['unreadable']}" for run, logs in (("undisturbed", want), ("chaos", got))
                               for log in logs if "unreadable" in log)
        if len(got) < len(want):
            out.diffs.append((label, f"{len(got)} Inspect logs, {len(want)} undisturbed" + (
                f"; {unreadable}" if unreadable else "")))
            continue
        extra = len(got) - len(want)
        for i, (a, b) in enumerate(zip(want, got[extra:])):
            diff = first_difference(a, b)
            if diff is not None:
                said = [f"{run}: {log['unreadable']}" for run, log in (("undisturbed", a), ("chaos", b))
                        if "unreadable" in log]
                out.diffs.append((label, f"log {i + 1}: " + ("; ".join(said) or diff)))
        if extra and proving_faulted:
            out.expected.append((label, f"{extra} earlier attempt(s) of this gate left their Inspect log: a fault hit "
                                        "this copy's proving task, which ran again (its last attempt is compared)"))
        elif extra:
            out.diffs.append((label, f"{len(got)} Inspect logs, {len(want)} undisturbed, and no fault hit this "
                                     "copy's proving task" + (f"; {unreadable}" if unreadable else "")))


def compare(twin: Path, root: Path, proving_faulted: bool = False) -> Comparison:
    """Every file of ``root`` against ``twin``'s by meaning (see the module's docstring). ``proving_faulted``: a
    fault hit one of the copy's proving tasks, so a gate may have run more than once."""
    calm_norm, chaos_norm = Normalizer(twin), Normalizer(root)
    sides = []
    for base, norm in ((twin, calm_norm), (root, chaos_norm)):
        rels = (p.relative_to(base) for p in base.rglob("*") if p.is_file())
        sides.append({norm.path(rel): base / rel for rel in rels if not excluded(rel)})
    calm, chaos = sides
    out = Comparison()
    log_folders: set[Path] = set()
    for rel in sorted(set(calm) | set(chaos)):
        if rel.suffix == ".eval":
            log_folders.add(rel.parent)
            continue
        a, b = calm.get(rel), chaos.get(rel)
        if b is None:
            out.diffs.append((f"{root.name}/{rel}", "missing in the chaos run"))
        elif a is None:
            out.diffs.append((f"{root.name}/{rel}", "not in the undisturbed run"))
        else:
            left, right = parsed(a, calm_norm), parsed(b, chaos_norm)
            diff = first_difference(left, right)
            if diff is not None and rel.name == "events.jsonl":
                diff = "; ".join([diff, *moved_compactions(left, right)])
            if diff is not None:
                out.diffs.append((f"{root.name}/{rel}", diff))
    for folder in sorted(log_folders):
        compare_inspect_logs(twin, root, folder, proving_faulted, out)
    return out


# ---- duplicated and lost records ----------------------------------------------------------------


def audit(root: Path, twin: Path) -> tuple[list[str], list[str]]:
    """(duplicates, lost) of one copy, each a list of findings."""
    dups: list[str] = []
    lost: list[str] = []
    for role in ROLES:
        state = root / "state" / role
        log = [r for r in raw_jsonl(state / "log.jsonl") if isinstance(r, dict)]
        events = [e for e in raw_jsonl(state / "events.jsonl") if isinstance(e, dict)]
        seqs = Counter(r.get("seq") for r in log)
        dups += [f"{root.name}/{role}: {n} log records with seq {s}" for s, n in sorted(seqs.items(), key=str) if n > 1]
        numbers = [s for s in seqs if isinstance(s, int)]
        if numbers:
            gaps = sorted(set(range(1, max(numbers) + 1)) - set(numbers))
            lost += [f"{root.name}/{role}: no log record with seq {s}" for s in gaps]
        for kind in ("assistant", "results"):
            steps = Counter(r.get("step") for r in log if r.get("kind") == kind)
            dups += [f"{root.name}/{role}: {n} {kind} records for step {s}" for s, n in sorted(steps.items()) if n > 1]
        step_events = Counter(e.get("step") for e in events if e.get("kind") == "step")
        dups += [f"{root.name}/{role}: {n} step events for step {s}" for s, n in sorted(step_events.items()) if n > 1]
        compactions = Counter(e.get("after_step") for e in events if e.get("kind") == "compaction")
        dups += [f"{root.name}/{role}: {n} compaction records after step {s}"
                 for s, n in sorted(compactions.items(), key=str) if n > 1]
        answered = {r.get("step") for r in log if r.get("kind") == "assistant"}
        lost += [f"{root.name}/{role}: step {s} has no step event" for s in sorted(answered - set(step_events))]
    for path in sorted(twin.rglob("*.jsonl")):
        rel = path.relative_to(twin)
        if excluded(rel):
            continue
        want, got = len(raw_jsonl(path)), len(raw_jsonl(root / rel))
        if got < want:
            lost.append(f"{root.name}/{rel}: {got} records, {want} undisturbed")
    return dups, lost

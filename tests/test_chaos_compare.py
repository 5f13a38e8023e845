"""The chaos suite's comparison of a copy with its undisturbed twin (bench/chaos_compare.py, issue 38): by what the
run means, not by bytes. Two synthetic copies in different folders that differ only where two runs always differ
(clocks, Inspect's log names, the folder quoted in solver.json, bytecode caches) compare equal; a changed finding,
handoff, log message or Inspect score does not; an extra attempt of a gate is explained only after a fault that hit
the copy's proving task."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench

pytest.importorskip("inspect_ai")

from inspect_ai.log import (  # noqa: E402
    EvalConfig,
    EvalDataset,
    EvalLog,
    EvalMetric,
    EvalResults,
    EvalSample,
    EvalScore,
    EvalSpec,
    write_eval_log,
)
from inspect_ai.model import ChatMessageAssistant, ChatMessageUser  # noqa: E402
from inspect_ai.scorer import Score  # noqa: E402
from inspect_ai.tool import ToolCall  # noqa: E402

cmp = load_bench("chaos_compare")

FINDING = "rule R6 is only seen refusing; add a sample where it is granted"


def write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2), encoding="utf-8")


def inspect_log(path: Path, root: Path, when: str, call_id: str, score: float = 1.0) -> None:
    """An Inspect log as the solver gate writes one: its name starts with the time, its tool calls have ids."""
    spec = EvalSpec(created=when, task="chaos_01", dataset=EvalDataset(), model="baton/simulated", config=EvalConfig(),
                    task_args={"agent": "model", "runs": None, "data": str(root / "tools" / "data.json")})
    sample = EvalSample(id="s01_day30_refund", epoch=1, input="refund please", target="", messages=[
        ChatMessageUser(content=f"Hi, it is {when}; my blender from order O1001 arrived 30 days ago."),
        ChatMessageAssistant(content="Let me look up order O1001.",
                             tool_calls=[ToolCall(id=call_id, function="get_order", arguments={"order_id": "O1001"})]),
    ], scores={"baton_scorer": Score(value=score, explanation="passed after 1 tool call(s)")})
    results = EvalResults(scores=[EvalScore(name="baton_scorer", scorer="baton_scorer",
                                            metrics={"accuracy": EvalMetric(name="accuracy", value=score)})])
    write_eval_log(EvalLog(eval=spec, status="success", samples=[sample], results=results), str(path))


def make_copy(base: Path, when: str, uid: str, finding: str = FINDING, message: str = "Let me read the brief.",
              handoff: str = "focus on R6", score: float = 1.0, attempts: int = 1, pycache: bool = False,
              plan: str = "5ffecba8408ae919", shard_finding: str = FINDING) -> Path:
    """A finished copy of the example named chaos_01 under ``base``/scenarios, stamped with ``when``."""
    root = base / "scenarios" / "chaos_01"
    figures = {"coverage": 0.8571, "findings": 1, "pass_hat_k": 0.8}
    write_json(root / "run.json", {"phase": "done", "status": "succeeded", "updated_at": when, "started_at": when,
                                   "results": [{"iteration": 1, "figures": figures, "passed": 8, "total": 10}]})
    out = root / "execution_outputs" / "iteration_1"
    write_json(out / "report.json", {"generated_at": when, "duration_s": 0.4, "passed": 8, "quality": {
        "figures": figures, "findings": [{"class": "L4", "gate": "coverage", "rule": "R6", "detail": finding}]}})
    logs = out / "proving_logs"
    logs.mkdir(parents=True)
    name = ""
    for i in range(attempts):
        name = f"{when.replace(':', '-')[:19]}-00-00_chaos-01_{uid}{i}{'x' * (21 - len(uid))}.eval"
        inspect_log(logs / name, root, when, call_id=f"toolu_{uid}{i}", score=score)
    write_json(logs / "solver.json", {"solver": {"log": str(logs / name), "pass_rate": 0.8, "duration_s": 6.9}})
    write_json(root / "handoffs" / "iteration_1" / "init_to_execute_context.json", {"notes": handoff})
    records = [{"seq": 1, "kind": "assistant", "step": 1, "at": when,
                "message": {"role": "assistant", "content": [{"type": "text", "text": message}]}},
               {"seq": 2, "kind": "results", "step": 1, "at": when,
                "content": json.dumps({"path": "report.json", "mtime": when, "text": f"generated_at {when}"})}]
    log = root / "state" / "init" / "log.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    event = {"kind": "step", "step": 1, "at": when, "estimated_input": len(uid) * 100, "threshold": 11000}
    (log.parent / "events.jsonl").write_text(json.dumps(event) + "\n", encoding="utf-8")
    # The distributed gates' files: a shard's result under its plan (named by a digest of report.json, so by when it
    # was written), the last shard's activity and a shard's progress counter.
    gates = root / "state" / "gates"
    shard = {"findings": [{"key": [0], "finding": {"gate": "coverage", "rule": "R6", "detail": shard_finding}}]}
    write_json(gates / "iteration_1" / plan / "coverage-0.json", {"plan": plan, "gate": "coverage", "part": shard})
    (gates / "iteration_1" / plan / "floor-0.progress").write_text(str(len(uid)), encoding="utf-8")
    (gates / "activity").write_text(f"{plan} {uid} 0 done", encoding="utf-8")
    if pycache:
        cache = out / "inspect_task" / "__pycache__"
        cache.mkdir(parents=True)
        (cache / "task.cpython-311.pyc").write_bytes(b"\x00bytecode")
    return root


def pair(tmp_path: Path, **chaos: object) -> tuple[Path, Path]:
    twin = make_copy(tmp_path / "undisturbed", "2026-11-28T14:16:15+00:00", "T83SNw6sDqQMp", pycache=True)
    chaos.setdefault("plan", "d7dde8243c82ba20")
    root = make_copy(tmp_path / "chaos", "2026-11-28T14:21:40+00:00", "RVsZSGaXf37Qb", **chaos)  # type: ignore[arg-type]
    return twin, root


def test_copies_differing_only_in_clocks_names_folders_and_caches_compare_equal(tmp_path):
    twin, root = pair(tmp_path)
    found = cmp.compare(twin, root)
    assert found.diffs == [] and found.expected == []


def test_a_changed_finding_differs(tmp_path):
    twin, root = pair(tmp_path, finding="rule R6 is never seen")
    found = cmp.compare(twin, root)
    assert found.diffs == [("chaos_01/execution_outputs/iteration_1/report.json", ".quality.findings[0].detail")]


@pytest.mark.parametrize("change, where", [
    ({"handoff": "focus on R2"}, "chaos_01/handoffs/iteration_1/init_to_execute_context.json"),
    ({"message": "Let me read the design."}, "chaos_01/state/init/log.jsonl"),
    ({"shard_finding": "rule R6 is never seen"},
     "chaos_01/state/gates/iteration_1/<plan of iteration_1>/coverage-0.json"),
])
def test_a_changed_handoff_log_message_or_gate_shard_differs(tmp_path, change, where):
    twin, root = pair(tmp_path, **change)
    assert [file for file, _ in cmp.compare(twin, root).diffs] == [where]


def test_a_changed_score_in_an_inspect_log_differs(tmp_path):
    twin, root = pair(tmp_path, score=0.0)
    (diff,) = cmp.compare(twin, root).diffs
    assert diff[0].startswith("chaos_01/execution_outputs/iteration_1/proving_logs/*.eval")
    assert diff[1] == "log 1: .metrics.baton_scorer.accuracy"


def test_an_extra_attempt_of_a_gate_is_explained_only_by_a_fault_on_the_proving_task(tmp_path):
    twin, root = pair(tmp_path, attempts=2)
    unexplained = cmp.compare(twin, root)
    assert len(unexplained.diffs) == 1 and "no fault hit this copy's proving task" in unexplained.diffs[0][1]
    explained = cmp.compare(twin, root, proving_faulted=True)
    assert explained.diffs == []
    assert len(explained.expected) == 1 and "1 earlier attempt(s) of this gate" in explained.expected[0][1]


def test_an_inspect_log_that_inspect_cannot_read_differs_and_says_why(tmp_path):
    """As a log whose span event lost its "event" tag to a redaction (the chaos run of issue 38): shown, not a crash."""
    twin, root = pair(tmp_path)
    (log,) = root.rglob("*.eval")
    with zipfile.ZipFile(log) as source:
        members = {m.filename: source.read(m) for m in source.infolist()}
    name = next(n for n in members if n.startswith("samples/"))
    sample = json.loads(members[name])
    sample["events"].append({"event": "<REDACTED>", "id": "<REDACTED>", "timestamp": "2026-11-28T14:<REDACTED>"})
    members[name] = json.dumps(sample).encode()
    with zipfile.ZipFile(log, "w", zipfile.ZIP_DEFLATED) as target:
        for member, data in members.items():
            target.writestr(member, data)
    (diff,) = cmp.compare(twin, root).diffs
    assert diff[1].startswith("log 1: chaos: Inspect cannot read it: ValidationError")


def test_a_missing_inspect_log_differs(tmp_path):
    twin, root = pair(tmp_path)
    for log in root.rglob("*.eval"):
        log.unlink()
    (diff,) = cmp.compare(twin, root).diffs
    assert diff[1] == "0 Inspect logs, 1 undisturbed"


@pytest.mark.parametrize("change, status", [({}, 0), ({"finding": "rule R6 is never seen"}, 1)])
def test_the_bench_compares_a_kept_run_again(tmp_path, capsys, change, status):
    """``bench/chaos.py --compare KEPT``: the comparison and audit of a kept run's folder, without running it."""
    pair(tmp_path, **change)
    assert load_bench("chaos").main(["--compare", str(tmp_path)]) == status
    out = capsys.readouterr().out
    assert f"duplicates 0, lost 0, differing files {status}" in out

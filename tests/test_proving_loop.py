"""The proving phase (issue 31, item 6): the gates run after Execute's handoff, their quality lands in
report.json, "done" needs every target, the findings reach Init's next opening, ``baton evaluate`` re-runs the
gates, and ``baton status`` shows the figures at 80 and 120 columns.

The runs start from one simulated run of the example, made once for the module as a user makes it: all seven gates
(its scenario.toml), whose figures for every iteration are checked here. The tests after it run only the coverage
and duplicate gates on copies of that run (``[proving] gates``): they need no Inspect and take milliseconds.
Whatever the example's final iteration scores, each test sets up the iteration it needs from it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents.config import ConfigError
from agents.disk import AgentDisk
from agents.settings_layers import load_scenario_config, proving_settings
from proving.evaluation.quality import Finding, Quality
from scenarios.run import load_run
from tests.export_support import UNSET, run_example
from tests.export_support import baton as invoke
from tests.shared_runs import shared_run
from workers.loop import Task, do_phase, do_proving

FAST = '\n[proving]\ngates = ["coverage", "duplicate"]\n'


@pytest.fixture(autouse=True)
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in __import__("os").environ if n.startswith("BATON_PROVING_")]:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of the example with its own seven gates, not the suite's two quick ones (conftest). Made once
    per test session for every xdist worker (tests.shared_runs: it takes about 50 s), and read only: the tests
    that change it take a copy (``_copy``)."""

    def make(folder: Path) -> tuple[Path, int, str]:
        with pytest.MonkeyPatch.context() as env:
            env.delenv("BATON_PROVING_GATES", raising=False)
            return run_example(folder, "--auto-approve")

    run = shared_run(tmp_path_factory, "proven", make)
    assert run.exit_code in (0, 1), run.output
    return run.root


@pytest.mark.slow
def test_the_examples_run_reports_every_figure_for_every_iteration_and_ends_proven(ran: Path) -> None:
    """Issue 31's first "done when", offline: every iteration's report.json holds every gate's figures; the final
    one has floor 0 for every agent, every rule covered, no duplicate, every sample solved by the blind solver
    (the simulated model, labelled so) and every mutant rejected; the run ends done."""
    record = load_run(ran)
    assert record.status == "succeeded", record
    for n in range(1, record.iteration + 1):
        quality = Quality.model_validate(_report(ran, n)["quality"])
        assert sorted(quality.ran) == ["coverage", "duplicate", "floor", "gold", "mutation", "policy", "solver"], \
            (n, quality.skipped)
        figures = quality.figures
        assert set(figures.floor or {}) == {"do_nothing", "refuse_all", "reckless"}, n
        assert figures.mutation_score is not None and figures.mutants, n
        assert figures.solver is not None and figures.solver.simulated and figures.solver.k == 1, n
        assert figures.coverage is not None and figures.duplicates is not None, n
    final = Quality.model_validate(_report(ran, record.iteration)["quality"]).figures
    assert final.floor == {"do_nothing": 0.0, "refuse_all": 0.0, "reckless": 0.0}
    assert final.coverage == 1.0 and final.duplicates == 0
    assert final.solver is not None and final.solver.solvable_share == 1.0
    assert final.mutation_score == 1.0
    first = Quality.model_validate(_report(ran, 1)["quality"])
    assert record.iteration > 1 and any(f.gate == "floor" for f in first.findings)  # the story's first design
    # docs/proving.md's table: six findings, each named; the gold and the policy gates find none in either iteration
    assert sorted(f.defect for f in first.findings) == ["shortcut", "shortcut", "shortcut", "uncovered_rule",
                                                        "unsolved", "unsolved"], first.findings
    assert Quality.model_validate(_report(ran, record.iteration)["quality"]).findings == []


def _fast(root: Path) -> None:
    toml = root / "scenario.toml"
    text = toml.read_text()
    if "[proving]" in text:
        text = text[: text.index("[proving]")]
    toml.write_text(text + FAST)


def _copy(ran: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / ran.name
    shutil.copytree(ran, root)
    _fast(root)
    monkeypatch.setenv("BATON_SCENARIOS_DIR", str(tmp_path))
    return root


def _last(root: Path) -> int:
    return load_run(root).iteration


def _report(root: Path, n: int) -> dict:
    return json.loads((root / f"execution_outputs/iteration_{n}/report.json").read_text())


def _samples(root: Path, n: int) -> Path:
    return root / f"execution_outputs/iteration_{n}/samples"


def _to_proving(root: Path, *, iteration: int, max_iterations: int, report: dict | None = None) -> None:
    """run.json as a phase task leaves it after accepting Execute's handoff of ``iteration``."""
    record = json.loads((root / "run.json").read_text())
    results = [r for r in record["results"] if r["iteration"] < iteration]
    record |= {"phase": "proving", "status": "running", "iteration": iteration, "max_iterations": max_iterations,
               "results": results}
    (root / "run.json").write_text(json.dumps(record))
    path = root / f"execution_outputs/iteration_{iteration}/report.json"
    base = {k: v for k, v in json.loads(path.read_text()).items() if k != "quality"}
    path.write_text(json.dumps(report if report is not None else base))


def _without_rule(root: Path, n: int, rule: str) -> list[str]:
    """Remove every sample of iteration ``n`` that names ``rule``; the ids removed."""
    gone = []
    for path in sorted(_samples(root, n).glob("*.json")):
        if rule in json.loads(path.read_text()).get("rules", []):
            path.unlink()
            gone.append(path.stem)
    assert gone, f"no sample of iteration {n} names {rule}"
    return gone


def _a_rule(root: Path, n: int) -> str:
    """A rule that some sample of iteration ``n`` names, and not every sample."""
    counts: dict[str, int] = {}
    for path in _samples(root, n).glob("*.json"):
        for rule in json.loads(path.read_text()).get("rules", []):
            counts[rule] = counts.get(rule, 0) + 1
    return min(counts, key=lambda r: (counts[r], r))


# ---- settings ----------------------------------------------------------------------------------


def test_targets_and_proving_settings_come_from_scenario_toml_and_the_environment(tmp_path: Path) -> None:
    root = tmp_path / "s"
    root.mkdir()
    (root / "scenario.toml").write_text('name = "s"\ntarget_coverage = 0.9\ntarget_floor = 0.1\n'
                                        '[proving]\ngates = ["coverage"]\nsolver_k = 5\n')
    config = load_scenario_config(root / "scenario.toml")
    assert (config.target_coverage, config.target_floor, config.target_solvable_share) == (0.9, 0.1, 1.0)
    settings = proving_settings(root, env={})
    assert settings.gates == ["coverage"] and settings.solver_k == 5
    settings = proving_settings(root, env={"BATON_PROVING_GATES": "coverage, duplicate",
                                           "BATON_PROVING_SOLVER_MODEL": "openai/gpt-5"})
    assert settings.gates == ["coverage", "duplicate"] and settings.solver_model == "openai/gpt-5"
    with pytest.raises(ConfigError, match="BATON_PROVING_GATEZ"):
        proving_settings(root, env={"BATON_PROVING_GATEZ": "coverage"})
    with pytest.raises(ConfigError, match="BATON_PROVING_GATES"):
        proving_settings(root, env={"BATON_PROVING_GATES": "coverage,bogus"})
    (root / "scenario.toml").write_text('name = "s"\n[proving]\ngatez = ["coverage"]\n')
    with pytest.raises(ConfigError, match="did you mean 'gates'"):
        load_scenario_config(root / "scenario.toml")


def test_an_older_run_json_without_the_new_fields_still_reads(tmp_path: Path) -> None:
    root = tmp_path / "old"
    root.mkdir()
    (root / "run.json").write_text(json.dumps({
        "scenario": "old", "phase": "done", "iteration": 2, "status": "succeeded",
        "results": [{"iteration": 1, "success_rate": 0.8, "passed": 8, "total": 10}]}))
    record = load_run(root)
    assert record.target_coverage == 1.0 and record.target_floor == 0.0 and record.results[0].unmet == []


# ---- the loop ----------------------------------------------------------------------------------


def test_the_loop_does_not_end_done_when_coverage_fails_although_the_success_rate_passes(
        ran: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy(ran, tmp_path, monkeypatch)
    n = _last(root)
    rule = _a_rule(root, n)
    _without_rule(root, n, rule)
    _to_proving(root, iteration=n, max_iterations=n)
    assert do_proving(root) == []
    record = load_run(root)
    assert (record.phase, record.status) == ("done", "failed_target"), record
    (result,) = [r for r in record.results if r.iteration == n]
    assert result.success_rate >= record.target_success_rate  # the evaluation alone would have called it done
    assert any(u.startswith("coverage") for u in result.unmet), result.unmet
    quality = Quality.model_validate(_report(root, n)["quality"])  # baton wrote it into report.json
    assert any(f.gate == "coverage" and f.rule == rule for f in quality.findings)


def test_the_loop_does_not_end_done_when_a_floor_agent_passes(
        ran: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy(ran, tmp_path, monkeypatch)
    monkeypatch.setenv("BATON_PROVING_GATES", "floor,coverage,duplicate")
    n = _last(root)
    report = {k: v for k, v in _report(root, n).items() if k != "quality"}
    finding = Finding.of("floor", "L1", "refuse_all passes: nothing records a refusal", sample="s1")
    quality = Quality(findings=[finding], ran=["floor", "coverage", "duplicate"])
    quality.figures.floor, quality.figures.coverage, quality.figures.duplicates = {"refuse_all": 0.2}, 1.0, 0
    # A report that carries quality already: the gates ran and the worker died before deciding; it decides now.
    _to_proving(root, iteration=n, max_iterations=n,
                report=report | {"success_rate": 1.0, "quality": quality.model_dump(mode="json", by_alias=True)})
    do_proving(root)
    record = load_run(root)
    assert (record.phase, record.status) == ("done", "failed_target")
    assert record.results[-1].unmet == ["floor: refuse_all 20% > target 0%"]
    # A configured gate that could not run misses its target, saying why.
    quality = Quality(ran=["coverage"], skipped={"floor": "Inspect is not installed"})
    quality.figures.coverage = 1.0
    _to_proving(root, iteration=n, max_iterations=n,
                report=report | {"success_rate": 1.0, "quality": quality.model_dump(mode="json", by_alias=True)})
    do_proving(root)
    assert "the floor gate did not run (Inspect is not installed)" in load_run(root).results[-1].unmet[0]


def test_a_finding_reaches_inits_next_design(ran: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy(ran, tmp_path, monkeypatch)
    n = _last(root)  # the last iteration: Init's turn for n + 1 has never opened
    rule = _a_rule(root, n)
    _without_rule(root, n, rule)
    _to_proving(root, iteration=n, max_iterations=n + 1)
    following = do_proving(root)
    record = load_run(root)
    assert (record.phase, record.iteration) == ("designing", n + 1)
    assert following and following[0].kind == "step" and following[0].agent == "init"
    opening = [r for r in AgentDisk.load(root, "init").records if r.kind == "opening"][-1]
    text = json.dumps(opening.message)
    body = opening.message["content"][0]["text"] if isinstance(opening.message["content"], list) else \
        opening.message["content"]
    payload = json.loads(body.split("<execute_to_init_context>", 1)[1].split("</execute_to_init_context>")[0])
    findings = [f for f in payload["findings"] if f["gate"] == "coverage" and f["rule"] == rule]
    assert findings and findings[0]["class"] in ("L1", "L4"), payload["findings"]
    assert payload["quality"]["figures"]["coverage"] < 1.0
    assert any(u.startswith("coverage") for u in payload["quality"]["unmet_targets"])
    assert "answer every finding" in text


def test_a_phase_task_hands_the_decision_to_a_proving_task(ran: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy(ran, tmp_path, monkeypatch)
    n = _last(root)
    record = json.loads((root / "run.json").read_text())
    record |= {"phase": "executing", "status": "running", "iteration": n}
    (root / "run.json").write_text(json.dumps(record))
    assert do_phase(root) == [Task(kind="proving", scenario=root.name)]
    assert load_run(root).phase == "proving"
    from workers.loop import resume

    assert resume(root) == [Task(kind="proving", scenario=root.name)]  # a worker died mid-proving: run again
    do_proving(root)
    assert load_run(root).phase in ("done", "designing") and "quality" in _report(root, n)


# ---- baton evaluate ----------------------------------------------------------------------------


def test_evaluate_reruns_the_gates_on_a_hand_edited_copy(ran: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy(ran, tmp_path, monkeypatch)
    n = _last(root)
    # A sample copied under a new id: a duplicate.
    source = sorted(_samples(root, n).glob("*.json"))[0]
    copy = json.loads(source.read_text()) | {"id": "copied_sample"}
    (_samples(root, n) / "copied_sample.json").write_text(json.dumps(copy))
    result = invoke(tmp_path, "evaluate", "refund_desk", "--iteration", str(n))
    assert result.exit_code == 0, result.output
    findings = Quality.model_validate(_report(root, n)["quality"]).findings
    assert any(f.gate == "duplicate" and "copied_sample" in (f.sample or "") + f.detail for f in findings), findings
    assert "duplicate" in result.output and "gates: coverage, duplicate" in result.output
    # Every sample of one rule removed: a coverage finding naming the rule.
    (_samples(root, n) / "copied_sample.json").unlink()
    rule = _a_rule(root, n)
    _without_rule(root, n, rule)
    result = invoke(tmp_path, "evaluate", "refund_desk", "--iteration", str(n))
    assert result.exit_code == 0, result.output
    findings = Quality.model_validate(_report(root, n)["quality"]).findings
    assert any(f.gate == "coverage" and f.rule == rule for f in findings), findings
    assert rule in result.output
    # --no-gates: the evaluation alone, its report without quality.
    result = invoke(tmp_path, "evaluate", "refund_desk", "--iteration", str(n), "--no-gates")
    assert result.exit_code == 0 and "quality" not in _report(root, n) and "gates:" not in result.output


@pytest.mark.slow
def test_evaluate_finds_each_hand_edit_with_the_gates_that_run_the_export(ran: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31's second "done when", all four edits on one copy of the final iteration, re-run with `baton
    evaluate`: a sample with no expected action and no expected state (floor), a tool whose effect is not
    recorded (mutation), a sample copied under a new id (duplicate), every sample of one rule removed (coverage)."""
    from tests.test_gate_mutants import RECEIPT

    root = _copy(ran, tmp_path, monkeypatch)
    monkeypatch.setenv("BATON_PROVING_GATES", "coverage,duplicate,floor,mutation")
    n = _last(root)
    rule = _a_rule(root, n)
    _without_rule(root, n, rule)
    left = sorted(_samples(root, n).glob("*.json"))
    emptied, receipted, copied = left[0], left[1], left[2]
    sample = json.loads(emptied.read_text())
    emptied.write_text(json.dumps(sample | {"actions": [], "expected_outputs": [], "expected_state": {}}))
    sample = json.loads(receipted.read_text())
    order = next(a["args"]["order_id"] for a in sample["actions"] if "order_id" in a.get("args", {}))
    sample["actions"].append({"tool": "send_receipt", "args": {"order_id": order}})
    sample["expected_outputs"].append(None)
    receipted.write_text(json.dumps(sample))
    with (root / f"execution_outputs/iteration_{n}/tools/tools.py").open("a") as tools:
        tools.write(RECEIPT)
    (_samples(root, n) / "copied_sample.json").write_text(json.dumps(json.loads(copied.read_text()) |
                                                                     {"id": "copied_sample"}))
    result = invoke(tmp_path, "evaluate", "refund_desk", "--iteration", str(n))
    assert result.exit_code == 0, result.output
    quality = Quality.model_validate(_report(root, n)["quality"])
    assert sorted(quality.ran) == ["coverage", "duplicate", "floor", "mutation"], quality.skipped
    found = {(f.gate, f.sample, f.rule) for f in quality.findings}
    assert ("floor", emptied.stem, None) in found, quality.findings
    assert any(f.gate == "mutation" and f.sample == receipted.stem and "send_receipt" in f.detail
               for f in quality.findings), quality.findings
    assert any(f.gate == "duplicate" and "copied_sample" in (f.sample or "") + f.detail for f in quality.findings)
    assert ("coverage", None, rule) in found, quality.findings


# ---- baton status ------------------------------------------------------------------------------


@pytest.mark.parametrize("columns", [80, 120])
def test_status_shows_the_figures_and_stays_readable(ran: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      columns: int) -> None:
    root = _copy(ran, tmp_path, monkeypatch)
    shown = invoke(tmp_path, "status", "refund_desk", COLUMNS=str(columns))
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    tables = [line for line in lines if line[:1] in "┏┃┡│└"]  # text lines wrap on a terminal; tables must fit
    assert max(len(line) for line in tables) <= columns, shown.output
    assert "…" not in shown.output, shown.output  # nothing cut: every cell whole
    record = load_run(root)
    for r in record.results:  # each iteration's row names its iteration, with its figures
        (row,) = [line for line in lines if line.startswith(f"│ {r.iteration} ")]
        cells = [c.strip() for c in row.split("│")[1:-1]]
        assert cells[1] == f"{r.success_rate:.0%}" and f"{r.figures['coverage']:.0%}" in cells, row
    for role in ("init", "execute"):
        assert any(line.startswith(f"│ {role} ") for line in lines), shown.output
    assert "targets: success rate >= 85%, floor <= 0%, solvable share >= 100%, coverage >= 100%" in shown.output
    data = json.loads(invoke(tmp_path, "status", "refund_desk", "--json").output)
    assert data["run"]["results"][-1]["figures"]["coverage"] is not None


# ---- the export --------------------------------------------------------------------------------


def test_the_exports_metadata_carries_the_iterations_quality(ran: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.scenario_facts import scenario_facts
    from proving.export.build import export_inspect

    root = _copy(ran, tmp_path, monkeypatch)
    n = _last(root)
    exported = export_inspect(root, tmp_path / "export", scenario_facts(root), iteration=n)
    spec = json.loads((exported.folder / "scenario.json").read_text())
    quality = _report(root, n)["quality"]
    assert spec["quality"]["figures"] == quality["figures"] and spec["quality"]["ran"] == quality["ran"]
    assert spec["quality"]["findings"] == len(quality["findings"])


# ---- conversations (issue 33) ------------------------------------------------------------------


@pytest.mark.slow
def test_a_conversation_whose_user_never_gives_a_needed_fact_is_unsolvable_and_goes_back_to_init(
        ran: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy(ran, tmp_path, monkeypatch)
    monkeypatch.setenv("BATON_PROVING_GATES", "coverage,duplicate,solver")
    n = _last(root)
    path = next(p for p in _samples(root, n).glob("*.json")
                if json.loads(p.read_text()).get("user") and "O1003" in p.read_text())
    sample = json.loads(path.read_text())
    assert "O1003" not in sample["instruction"]  # the order id is the user's alone
    # The user no longer knows the order: nothing the agent can ask or look up gives it.
    sample["user"] |= {"facts": {"customer_id": "C3"}, "withheld": [], "asked_by": {}}
    path.write_text(json.dumps(sample))
    result = invoke(tmp_path, "evaluate", "refund_desk", "--iteration", str(n), "--no-gates")
    assert result.exit_code == 0, result.output
    # The reference replay still passes; the sample is caught as unsolvable all the same (L4).
    lines = [json.loads(line) for line in (root / f"execution_outputs/iteration_{n}/results.jsonl").open()]
    caught = next(r for r in lines if r["id"] == sample["id"])
    assert caught["layer"] == "L4" and caught["reason"].startswith("unsolvable: action 0 (get_order) needs "
                                                                   "order_id = 'O1003'"), caught
    # The gates run on it: the blind solver asks the user for the order, the user cannot say, and the finding
    # is in Init's next opening.
    _to_proving(root, iteration=n, max_iterations=n + 1, report=_report(root, n))
    do_proving(root)
    assert (load_run(root).phase, load_run(root).iteration) == ("designing", n + 1)
    opening = [r for r in AgentDisk.load(root, "init").records if r.kind == "opening"][-1]
    body = opening.message["content"][0]["text"] if isinstance(opening.message["content"], list) else \
        opening.message["content"]
    payload = json.loads(body.split("<execute_to_init_context>", 1)[1].split("</execute_to_init_context>")[0])
    found = [f for f in payload["findings"] if f["gate"] == "solver" and f["sample"] == sample["id"]]
    assert found and found[0]["class"] == "L1", payload["findings"]
    assert "the user may not hold or not give a fact the task needs" in found[0]["detail"]
    assert 'expected get_order(order_id="O1003")' in found[0]["detail"]
    assert payload["quality"]["figures"]["solvable_share"] < 1.0

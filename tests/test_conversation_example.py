"""Issue 33's "done when" on the example: its run writes conversational samples whose goal needs a fact only the
user has, and `inspect eval` of its export runs them offline, with the scripted user and with the simulated model
playing the user (the ``baton/simulated`` provider Inspect loads from baton's entry point)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proving.evaluation.blind import LABEL
from tests.export_support import baton
from tests.shared_runs import SharedRun

pytestmark = pytest.mark.slow


def _last(root: Path) -> int:
    return max(int(p.name.removeprefix("iteration_")) for p in (root / "execution_outputs").glob("iteration_*"))


def _samples(root: Path, iteration: int) -> list[dict[str, Any]]:
    folder = root / "execution_outputs" / f"iteration_{iteration}" / "samples"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_the_example_writes_conversations_whose_goal_needs_a_fact_only_the_user_has(finished_run: SharedRun):
    root = finished_run.root
    spec = (root / "design" / "format_spec.md").read_text()
    for iteration in range(1, _last(root) + 1):
        talks = [s for s in _samples(root, iteration) if s.get("user")]
        assert len(talks) >= 3, [s["id"] for s in _samples(root, iteration)]
        for sample in talks:
            assert sample["id"].split("_")[0] in spec  # the design says which samples are conversations
            user = sample["user"]
            needed = {a["args"]["order_id"] for a in sample["actions"] if "order_id" in a["args"]}
            assert needed and all(order not in sample["instruction"] for order in needed)
            assert needed <= {str(v) for v in user["facts"].values()} and user["withheld"] == ["order_id"]
    results = [json.loads(line) for line in
               (root / "execution_outputs" / f"iteration_{_last(root)}" / "results.jsonl").open()]
    assert all(r["passed"] for r in results), [r for r in results if not r["passed"]]


@pytest.fixture(scope="module")
def exported(finished_run: SharedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("conversations")
    root = finished_run.copy_to(folder)
    out = folder / "export"
    result = baton(root.parent, "export", root.name, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def inspect_eval(export: Path, logs: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """``inspect eval task.py ARGS`` as a user runs it, from the export's folder; its one log."""
    from inspect_ai.log import read_eval_log

    inspect = str(Path(sys.executable).parent / "inspect")
    done = subprocess.run([inspect, "eval", "task.py", "--log-dir", str(logs), "--display", "none", *args],
                          cwd=export, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (log,) = [read_eval_log(str(p)) for p in logs.glob("*.eval")]
    assert log.status == "success", log.error
    return log


def conversations(log: Any) -> dict[str, list[tuple[str, str]]]:
    """Per conversational sample, what each side said (tool results left out)."""
    return {str(s.id): [(m.role, m.text) for m in s.messages if m.role in ("user", "assistant") and m.text]
            for s in log.samples if (s.metadata or {}).get("user_simulator")}


def check_conversations(log: Any, user_label: str) -> dict[str, list[tuple[str, str]]]:
    said = conversations(log)
    assert len(said) >= 3, [s.id for s in log.samples]
    for sample in log.samples:
        score = next(iter(sample.scores.values()))
        assert score.value == 1.0, (sample.id, score.explanation)
        if str(sample.id) in said:
            assert score.metadata["conversation"]["ended"] == "user", score.metadata
            assert score.metadata["simulator_fault"] is None
    for turns in said.values():
        users = [text for role, text in turns if role == "user"]
        assert "Order id" not in users[0] and users[1].startswith(f"{user_label}Order id: O")
        assert users[-1].endswith("###STOP###") and all(t.startswith(LABEL) for r, t in turns if r == "assistant")
    metrics = {m.name: m.value for score in log.results.scores for m in score.metrics.values()}
    assert metrics["accuracy"] == 1.0 and metrics["agent_accuracy"] == 1.0 and metrics["simulator_faults"] == 0
    return said


def test_inspect_eval_of_the_export_runs_the_conversations_with_the_scripted_user(exported: Path, tmp_path: Path):
    log = inspect_eval(exported, tmp_path, "--model", "baton/simulated")
    assert log.eval.task_args.get("user") in (None, "scripted")
    check_conversations(log, "")


def test_inspect_eval_of_the_export_runs_the_conversations_with_the_simulated_user(exported: Path, tmp_path: Path):
    log = inspect_eval(exported, tmp_path, "--model", "baton/simulated", "-T", "user=baton/simulated")
    check_conversations(log, f"{LABEL} ")


def test_inspect_eval_of_the_export_runs_the_conversations_through_baton_fake_api(exported: Path, tmp_path: Path):
    from tests.fake_api_support import fake_api_process, stats

    with fake_api_process(tmp_path) as url:
        # Both sides are `anthropic/...` models the double answers with the simulated model; unstreamed (the
        # double does not stream), so below Inspect's streaming limit for the model under test.
        log = inspect_eval(exported, tmp_path / "logs", "--model", "anthropic/claude-sonnet-5-5", "--max-tokens",
                           "4096", "-T", "user=anthropic/claude-haiku-5-5",
                           env={"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-test"})
        seen = stats(url)
    said = check_conversations(log, f"{LABEL} ")
    assert not seen["errors"] and set(seen["models"]) == {"claude-sonnet-5-5", "claude-haiku-5-5"}
    # The user's model was asked once per user turn after the opening, in every conversation.
    replies = sum(role == "user" for turns in said.values() for role, _ in turns) - len(said)
    assert seen["models"]["claude-haiku-5-5"] == replies


def test_the_scenarios_user_simulator_is_the_exports_default(finished_run: SharedRun, tmp_path: Path):
    root = finished_run.copy_to(tmp_path / "scenarios")
    toml = root / "scenario.toml"
    toml.write_text(toml.read_text().replace('# user_simulator = "scripted"', 'user_simulator = "baton/simulated"'))
    out = tmp_path / "export"
    result = baton(root.parent, "export", root.name, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads((out / "scenario.json").read_text())["user_simulator"] == "baton/simulated"
    log = inspect_eval(out, tmp_path / "logs", "--model", "baton/simulated")  # no -T user=
    check_conversations(log, f"{LABEL} ")
    assert {s.metadata["user_simulator"] for s in log.samples if s.metadata.get("user_simulator")} == \
        {"baton/simulated"}


def test_a_user_simulator_setting_with_no_model_is_refused_where_it_is_written():
    from agents.proving_settings import check_table

    assert check_table({"user_simulator": "openai/gpt-5"}).user_simulator == "openai/gpt-5"
    with pytest.raises(ValueError, match=r"\[proving\] user_simulator = ' ':"):
        check_table({"user_simulator": " "})


def test_baton_try_converses_and_labels_the_simulated_model_on_both_sides(finished_run: SharedRun, tmp_path: Path):
    root = finished_run.copy_to(tmp_path)
    result = baton(root.parent, "try", root.name, "--model", "baton/simulated", "--user", "baton/simulated")
    assert result.exit_code == 0, result.output
    assert ("baton/simulated (SIMULATED): 100% of 10 samples x 1 epochs; pass^1 1.00; the user: baton/simulated "
            "(SIMULATED)") in " ".join(result.output.split())

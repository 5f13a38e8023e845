"""The exported task run by Inspect AI itself, offline: its mock model scripted to make
each sample's expected calls (every sample scores 1), scripted to make a wrong call (0,
with the reason), and unscripted as in the issue's command; `baton try` and what
`baton status` shows of it. Needs Inspect AI (a core dependency: pip install -e .)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proving.export.runtime.offline_tokens import O200K_SHA256, O200K_URL, provide_o200k
from proving.export.tryout import eval_export, pass_hat
from tests.export_support import baton

# Inspect is imported only by the tests that run it: collecting this module must not cost every
# xdist worker an import of Inspect (seconds of CPU), and its tests go to two workers (tests/conftest.py).
for needed, why in (("inspect_ai", "Inspect AI is not installed: pip install -e ."),
                    ("quicktok", "quicktok-v1 (the offline o200k vocabulary) is not installed: "
                                 "pip install -e .")):
    if importlib.util.find_spec(needed) is None:
        pytest.skip(why, allow_module_level=True)
# Two groups, each kept on one worker: each pays Inspect's import once, and the halves run side by side.
pytestmark = pytest.mark.xdist_group("inspect_ai")
SECOND_HALF = pytest.mark.xdist_group("inspect_ai_2")
WHOLE_EVAL = pytest.mark.slow  # a whole run of the exported task by Inspect: 10 or 20 samples, seconds of CPU

Script = dict[str, list[dict[str, Any]]]  # sample instruction -> the calls to make, in order


@pytest.fixture(scope="module", autouse=True)
def token_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Inspect's token counts read o200k from here; the export's task.py fills it offline."""
    cache = tmp_path_factory.mktemp("tiktoken")
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    yield
    if saved is None:
        del os.environ["TIKTOKEN_CACHE_DIR"]
    else:
        os.environ["TIKTOKEN_CACHE_DIR"] = saved


def samples(export: Path) -> list[dict[str, Any]]:
    return json.loads((export / "scenario.json").read_text())["samples"]


def scripted(script: Script) -> Any:
    """A model that makes the sample's calls one per turn, then answers in text (tests/inspect_models.py: it runs
    in Inspect's own process)."""
    from tests.inspect_models import spec

    return spec("scripted/model", script=script)


def whole(log: Any) -> Any:
    """Inspect's own log of an eval_export, for its events and errors (tests/inspect_models.py)."""
    from tests.inspect_models import whole as read

    return read(log)


def read_log(path: Path) -> Any:
    from inspect_ai.log import read_eval_log

    return read_eval_log(str(path))


def scores(log: Any) -> dict[tuple[str, int], Any]:
    return {(str(s.id), s.epoch): next(iter(s.scores.values())) for s in log.samples}


@WHOLE_EVAL
def test_the_expected_calls_score_1_on_every_sample_in_every_epoch(exported: Path, tmp_path: Path) -> None:
    # Each sample's own calls, with the agent's own words for free text: a second epoch would
    # fail (already refunded...) if a sample's data leaked into the next one.
    script = {s["instruction"]: [{"tool": a["tool"], "args": {k: ("in my own words" if k in ("reason", "note") else v)
                                                             for k, v in a["args"].items()}}
                                 for a in s["actions"]] for s in samples(exported)}
    log = whole(eval_export(exported, scripted(script), 2, tmp_path / "logs"))
    got = scores(log)
    assert len(got) == 20
    assert {key: score.value for key, score in got.items() if score.value != 1.0} == {}
    assert all("passed after" in score.explanation for score in got.values())
    system = log.samples[0].messages[0]
    assert system.role == "system" and "R8: Precedence" in system.text  # the policy, verbatim


@WHOLE_EVAL
def test_a_wrong_call_scores_0_and_the_explanation_says_why(exported: Path, tmp_path: Path) -> None:
    script = {s["instruction"]: [] for s in samples(exported)}
    refused = next(s for s in samples(exported) if s["id"] == "s02_final_sale_refused")
    script[refused["instruction"]] = [{"tool": "get_order", "args": {"order_id": "O1002"}},
                                      {"tool": "issue_refund", "args": {"order_id": "O1002", "amount": 59.0,
                                                                         "reason": "happy to help"}}]
    log = whole(eval_export(exported, scripted(script), 1, tmp_path / "logs"))
    score = scores(log)[("s02_final_sale_refused", 1)]
    assert score.value == 0.0
    assert "failed after 2 tool call(s)" in score.explanation
    assert 'orders.O1002.status: expected "delivered", got "refunded"' in score.explanation
    assert "R2: order O1002 called for refuse, the outcome was refund" in score.explanation


@WHOLE_EVAL
@SECOND_HALF
def test_bad_arguments_and_a_crashing_tool_reach_the_model_and_every_sample_is_still_scored(
        exported: Path, tmp_path: Path) -> None:
    export = tmp_path / "export"
    shutil.copytree(exported, export)
    with (export / "tools" / "tools.py").open("a") as fh:
        fh.write("\n\ndef explode(data, order_id):\n    raise RuntimeError('the warehouse is on fire')\n")
    spec = json.loads((export / "scenario.json").read_text())
    spec["tools"].append({"name": "explode", "description": "Explodes.", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string", "description": "Order."}},
        "required": ["order_id"], "additionalProperties": False}})
    (export / "scenario.json").write_text(json.dumps(spec))
    script = {s["instruction"]: [{"tool": "get_order", "args": {"order": "O1001"}},
                                 {"tool": "explode", "args": {"order_id": "O1001"}}] for s in samples(export)}
    log = whole(eval_export(export, scripted(script), 1, tmp_path / "logs"))
    errors = [m.error.message for m in log.samples[0].messages if m.role == "tool"]
    assert "'order_id' is a required property" in errors[0]  # the exported schema, enforced by Inspect
    assert errors[1].startswith("tool explode raised RuntimeError: the warehouse is on fire")
    assert len(log.samples) == 10 and all(s.scores for s in log.samples)


@pytest.mark.slow  # the inspect CLI in a process of its own: seconds of CPU to import it
def test_the_issue_s_command_runs_every_sample_offline(example: Path, exported: Path, tmp_path: Path) -> None:
    """`inspect eval export/task.py --model mockllm/model`: the mock calls no tool, so exactly the
    samples whose expected actions change nothing can score: in the example's final iteration, where every
    refusal is recorded (the floor gate's target), none."""
    inspect_cli = Path(sys.executable).with_name("inspect")
    logs = tmp_path / "logs"
    env = {**os.environ, "INSPECT_LOG_DIR": str(logs)}
    # A relative path, as a user types it (this Inspect cannot glob an absolute one).
    done = subprocess.run([str(inspect_cli), "eval", f"{exported.name}/task.py", "--model", "mockllm/model"],
                          cwd=exported.parent, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = logs.glob("*.eval")
    log = read_log(path)
    assert log.status == "success" and len(log.samples) == 10
    iteration = example / "execution_outputs" / "iteration_2"
    initial = json.loads((iteration / "tools" / "data.json").read_text())
    unchanged = {p.stem for p in (iteration / "traces").glob("*.json")
                 if json.loads(p.read_text())["final_data"] == initial}
    passed = {sid for (sid, _), score in scores(log).items() if score.value == 1.0}
    assert passed == unchanged and len(unchanged) < 10


@pytest.mark.slow  # `baton export` and the inspect CLI in processes of their own (the hint's text: test_export.py)
@pytest.mark.parametrize("inside", [True, False], ids=["export-below-cwd", "export-beside-cwd"])
def test_the_export_s_next_command_runs_as_printed(example: Path, tmp_path: Path, inside: bool) -> None:
    """`baton export` prints `next: inspect eval ...`: typed from where the user is, it runs (this Inspect
    cannot glob an absolute task path, its issue 5267)."""
    cwd = tmp_path / "here"
    cwd.mkdir()
    out = (cwd if inside else tmp_path) / "exported"
    env = {**os.environ, "INSPECT_LOG_DIR": str(tmp_path / "logs"), "COLUMNS": "200",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    exported = subprocess.run([sys.executable, "-m", "baton", "--scenarios-dir", str(example.parent), "export",
                               "refund_desk", "--out", str(out)], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=300)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    (hint,) = [line.removeprefix("next: ") for line in exported.stdout.splitlines() if line.startswith("next: ")]
    assert str(tmp_path) not in hint, hint  # relative to the cwd
    done = subprocess.run(hint.replace("<provider/model>", "mockllm/model"), shell=True, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, hint + "\n" + done.stdout + done.stderr
    (path,) = (tmp_path / "logs").glob("*.eval")
    assert read_log(path).status == "success"


def test_try_an_anthropic_model_without_a_key_says_what_is_missing(example: Path) -> None:
    result = baton(example.parent, "try", "refund_desk", "--model", "anthropic/claude-sonnet-4-5")
    assert result.exit_code == 2, result.output
    assert "No ANTHROPIC_API_KEY defined in the environment" in result.output, result.output
    assert "[bold]" not in result.output and "[/" not in result.output and "report" not in result.output
    assert "leave out --model" in result.output


@WHOLE_EVAL
@SECOND_HALF
def test_baton_try_writes_the_tryout_and_status_shows_it(example: Path) -> None:
    result = baton(example.parent, "try", "refund_desk", "--epochs", "2")
    assert result.exit_code == 0, result.output
    assert "mockllm/model" in result.output and "calls no tool" in result.output  # it says it used the mock
    tryout = json.loads((example / "execution_outputs" / "iteration_2" / "tryout.json").read_text())
    assert tryout["model"] == "mockllm/model" and tryout["mock"] and tryout["epochs"] == 2
    assert len(tryout["samples"]) == 10 and all(s["trials"] == 2 for s in tryout["samples"])
    assert set(tryout["pass_hat"]) == {"1", "2"} and Path(tryout["log"]).is_file()
    # Wide enough for the report's path in full: under pytest-xdist the temporary folder's path is longer.
    status = baton(example.parent, "status", "refund_desk", COLUMNS="400")
    assert "mockllm/model (mock)" in status.output and "pass^2" in status.output
    as_json = json.loads(baton(example.parent, "status", "refund_desk", "--json").output)
    assert as_json["tryouts"]["2"]["pass_rate"] == tryout["pass_rate"]


def test_try_with_a_key_but_no_model_asks_for_one(example: Path) -> None:
    result = baton(example.parent, "try", "refund_desk", ANTHROPIC_API_KEY="sk-ant-test")
    assert result.exit_code == 2 and "--model anthropic/<model id>" in result.output


def test_pass_hat_k_is_the_chance_that_k_trials_in_a_row_pass() -> None:
    assert pass_hat(4, 4, 4) == 1.0 and pass_hat(4, 3, 4) == 0.0
    assert pass_hat(4, 2, 1) == 0.5 and pass_hat(4, 2, 2) == pytest.approx(1 / 6)


def test_o200k_is_rebuilt_offline_with_tiktoken_s_own_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    path = provide_o200k()
    assert path == tmp_path / hashlib.sha1(O200K_URL.encode()).hexdigest()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == O200K_SHA256
    code = "import tiktoken; print(tiktoken.get_encoding('o200k_base').encode('refund desk'))"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().startswith("["), done.stderr
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # caching turned off: nothing to provide
    assert provide_o200k() is None

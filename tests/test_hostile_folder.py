"""Whatever a model left in a scenario folder is hostile to every baton command, not only to the agents' file
tools (issue 30, items 2, 4, 5, 6 and the "Done when"): a FIFO, a link to /dev/zero or a link to a secret left
anywhere makes no command hang, read without bound, follow it or copy its target. Each command runs as a real
process with a time limit, so a hang fails the test instead of stalling the suite."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.export_support import UNSET
from tests.load import load_scaled

BATON = str(Path(sys.executable).with_name("baton"))
SECRET = "hunter2-PLANTED-SECRET-0123456789"
HANG_S = 60  # far above what each command needs; a FIFO opened blocking waits for ever
KINDS = ["fifo", "zero", "secret"]
# Places a model can reach (Bash, a sample's tools.py in the days it could, a Write of a folder's name): none is
# state/, run.json or a person's file, which no agent can write.
PLACES = (
    "execution_outputs/iteration_1/report.json",  # a report status and the confinement notes read
    "execution_outputs/iteration_2/tryout.json",  # what status shows of a tryout
    "execution_outputs/iteration_2/tools/planted.txt",  # copied by the evaluation and the export
    "execution_outputs/iteration_2/checkers/planted.py",
    "execution_outputs/iteration_2/traces/planted.json",  # deleted by a re-run of the evaluation
    "design/planted.md",  # read by the export for tools' descriptions
    "handoffs/iteration_2/rejection_1.json",  # read by resume --rebuild
    "planted",
)


def plant(root: Path, rel: str, kind: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to(root.parent.parent / "secret.txt")


def planted_copy(run, tmp_path: Path, kind: str, places=PLACES) -> Path:
    scenarios = tmp_path / "scenarios"
    root = run.copy_to(scenarios)
    (tmp_path / "secret.txt").write_text(f"password {SECRET}\n")
    for rel in places:
        plant(root, rel, kind)
    return root


def baton(root: Path, *args: str, timeout: float = HANG_S) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env.update(COLUMNS="200", BATON_SCENARIOS_DIR=str(root.parent))
    try:
        done = subprocess.run([BATON, *args], capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=root.parent.parent)
    except subprocess.TimeoutExpired:
        pytest.fail(f"baton {' '.join(args)} hung with a planted file (no answer in {timeout:.0f} s)")
    assert SECRET not in done.stdout + done.stderr, f"baton {' '.join(args)} printed the planted secret"
    return done


def untouched(root: Path, kind: str) -> None:
    """Every plant is still there as planted (nothing followed it to write, nothing replaced it by what it
    points at), and the secret file was not changed."""
    assert (root.parent.parent / "secret.txt").read_text() == f"password {SECRET}\n"


@pytest.mark.parametrize("kind", KINDS)
def test_status_neither_hangs_nor_follows(finished_run, tmp_path, kind):
    root = planted_copy(finished_run, tmp_path, kind)
    for args in (("status", "refund_desk"), ("status",), ("status", "refund_desk", "--json")):
        done = baton(root, *args)
        assert done.returncode == 0, done.stdout + done.stderr
    untouched(root, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_evaluate_neither_hangs_nor_follows_and_removes_planted_traces(finished_run, tmp_path, kind):
    root = planted_copy(finished_run, tmp_path, kind)
    done = baton(root, "evaluate", "refund_desk", "--iteration", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    outputs = root / "execution_outputs" / "iteration_2"
    report = json.loads((outputs / "report.json").read_text())
    assert report["success_rate"] == 1.0  # the planted files were not copied into the samples' folders
    planted_trace = outputs / "traces" / "planted.json"
    assert not planted_trace.exists() and not planted_trace.is_symlink()  # removed, never written through
    untouched(root, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_export_copies_no_link_and_no_special_file(finished_run, tmp_path, kind):
    root = planted_copy(finished_run, tmp_path, kind)
    out = tmp_path / "export"
    done = baton(root, "export", "refund_desk", "--to", "inspect", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "planted" in done.stdout  # the refusal is named
    for path in out.rglob("*"):
        assert not path.is_symlink(), path
        assert path.is_dir() or path.is_file(), path
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    assert not (out / "tools" / "planted.txt").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_resume_rebuild_neither_hangs_nor_follows(finished_run, tmp_path, kind):
    root = planted_copy(finished_run, tmp_path, kind, places=(*PLACES, "run.json"))
    done = baton(root, "resume", "refund_desk", "--rebuild")
    assert "rebuilt" in done.stdout, done.stdout + done.stderr
    record = json.loads((root / "run.json").read_text())
    assert record["phase"] == "done" and record["status"] == "succeeded"
    kept = [p for p in root.iterdir() if p.name.startswith("run.json.broken-")]
    assert len(kept) == 1 and not stat.S_ISREG(kept[0].lstat().st_mode)  # the plant moved aside as it was
    untouched(root, kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "secret"])
def test_a_run_goes_on_past_planted_files(awaiting_run, tmp_path, kind):
    """The run itself: Execute's turn, its evaluations and the loop's reading of reports and handoffs, with a
    plant in the design folder, the iteration's tools and the folder's top."""
    places = ("design/planted.md", "execution_outputs/iteration_1/tools/planted.txt", "planted")
    root = planted_copy(awaiting_run, tmp_path, kind, places=places)
    done = baton(root, "run", "refund_desk", "--auto-approve", "--profile", "demo", timeout=load_scaled(180))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    untouched(root, kind)


def test_a_fifo_as_report_does_not_hang_the_handoff_check(tmp_path):
    """SubmitHandoff reads report.json to check the payload's figures: a FIFO there once hung the step."""
    from agents.tools.base import ToolContext
    from agents.tools.handoff import SubmitHandoff

    root = tmp_path / "demo"
    outputs = root / "execution_outputs" / "iteration_1"
    outputs.mkdir(parents=True)
    os.mkfifo(outputs / "report.json")
    payload = {"iteration": 1, "execution_output_dir": "execution_outputs/iteration_1", "success_rate": 1.0,
               "totals": {"samples": 1, "passed": 1, "failed": 0},
               "failures_per_layer": {"L1": 0, "L2": 0, "L3": 0, "L4": 0},
               "layer1_problems_summary": [], "fixed_by_execute": [], "recommendation": "done"}
    ctx = ToolContext(root=root, agent="execute", iteration=1)
    from tests.test_guarded_folder import within

    result = within(10, lambda: SubmitHandoff("execute").run({"payload": payload}, ctx))
    assert result.status == "error" and "report.json" in (result.error or ""), result


def test_evaluate_never_writes_through_a_linked_traces_folder(finished_run, tmp_path):
    """`baton evaluate` wrote its traces through a planted `traces -> elsewhere` link (its writer had no root):
    files there were deleted and new ones written. Now the link is removed and a real folder written."""
    root = finished_run.copy_to(tmp_path / "scenarios")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("a.json", "b.json", "keep.txt"):
        (elsewhere / name).write_text("theirs\n")
    traces = root / "execution_outputs" / "iteration_2" / "traces"
    for old in traces.iterdir():
        old.unlink()
    traces.rmdir()
    traces.symlink_to(elsewhere)
    done = baton(root, "evaluate", "refund_desk", "--iteration", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["a.json", "b.json", "keep.txt"]
    assert all(p.read_text() == "theirs\n" for p in elsewhere.iterdir())
    assert not traces.is_symlink() and traces.is_dir() and any(traces.glob("*.json"))


def test_export_follows_no_link_into_the_policy_or_the_tools(finished_run, tmp_path):
    """A linked design/business_rules.md once put a credentials file into the policy the model under test reads,
    and a link in tools/ carried the exporter's environment and another scenario's log into the export."""
    root = finished_run.copy_to(tmp_path / "scenarios")
    (tmp_path / "secret.txt").write_text(f"password {SECRET}\n")
    other = tmp_path / "other" / "state" / "execute"
    other.mkdir(parents=True)
    (other / "log.jsonl").write_text(f'{{"note": "{SECRET}"}}\n')
    tools = root / "execution_outputs" / "iteration_2" / "tools"
    (tools / "env.txt").symlink_to("/proc/self/environ")
    (tools / "other").symlink_to(tmp_path / "other")
    out = tmp_path / "export"
    done = baton(root, "export", "refund_desk", "--to", "inspect", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "env.txt" in done.stdout and "other" in done.stdout
    assert not (out / "tools" / "env.txt").exists() and not (out / "tools" / "other").exists()
    rules = root / "design" / "business_rules.md"
    rules.unlink()
    rules.symlink_to(tmp_path / "secret.txt")
    done = baton(root, "export", "refund_desk", "--to", "inspect", "--out", str(tmp_path / "export2"))
    assert done.returncode == 2 and "business_rules.md" in done.stdout + done.stderr
    assert not (tmp_path / "export2").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("inspect")
def test_try_neither_hangs_nor_follows(finished_run, tmp_path):
    pytest.importorskip("inspect_ai")
    root = planted_copy(finished_run, tmp_path, "fifo", places=[p for p in PLACES if "tryout" not in p])
    plant(root, "execution_outputs/iteration_2/tools/secret.txt", "secret")
    done = baton(root, "try", "refund_desk", "--model", "mockllm/model", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    task = root / "execution_outputs" / "iteration_2" / "inspect_task"
    assert not (task / "tools" / "planted.txt").exists() and not (task / "tools" / "secret.txt").exists()
    assert (root / "execution_outputs" / "iteration_2" / "tryout.json").is_file()

"""The ``baton`` CLI, run embedded (no broker) on copies of the refund_desk example.

Two simulated runs are shared by module fixtures (one finished, one waiting for
approval); tests that change a scenario work on a copy of them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scenarios.run import copy_scenario
from tests.export_support import EXAMPLE, UNSET
from tests.export_support import baton as invoke
from tests.shared_runs import SharedRun
from tests.suite_gates import suite_gates
from workers.cli import cli

runner = CliRunner()


def run_json(root: Path) -> dict:
    return json.loads((root / "run.json").read_text(encoding="utf-8"))


def copy_of(source: Path, folder: Path) -> Path:
    """A copy with its run outputs (a prepared run); the example itself comes without any."""
    target = folder / source.name
    if source == EXAMPLE:
        return copy_scenario(source, target)
    shutil.copytree(source, target)
    return target


@pytest.fixture(autouse=True)
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def finished(finished_run: SharedRun, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SharedRun]:
    """This module's copy of the session's finished run (tests/conftest.py), and what the run printed."""
    return finished_run.copy_to(tmp_path_factory.mktemp("finished")), finished_run


@pytest.fixture(scope="module")
def awaiting(awaiting_run: SharedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = awaiting_run.copy_to(tmp_path_factory.mktemp("awaiting"))
    assert run_json(root)["phase"] == "awaiting_approval"  # stopped, waiting for approval
    assert "baton approve refund_desk" in awaiting_run.output
    return root


# ---- new ------------------------------------------------------------------------------------


def test_new_creates_a_runnable_scenario(tmp_path: Path) -> None:
    result = invoke(tmp_path, "new", "gift_desk")
    assert result.exit_code == 0, result.output
    root = tmp_path / "gift_desk"
    toml = (root / "scenario.toml").read_text()
    assert 'name = "gift_desk"' in toml and "target_success_rate = 0.85" in toml and "max_iterations = 3" in toml
    assert "## Rules" in (root / "brief.md").read_text()  # the template tells the user what to write
    assert invoke(tmp_path, "status", "gift_desk").exit_code == 0  # and scenario.toml parses


def test_new_copies_a_brief(tmp_path: Path) -> None:
    copy_of(EXAMPLE, tmp_path)
    assert invoke(tmp_path, "new", "copy", "--from", "refund_desk").exit_code == 0
    assert (tmp_path / "copy" / "brief.md").read_text() == (EXAMPLE / "brief.md").read_text()
    toml = (tmp_path / "copy" / "scenario.toml").read_text()
    expected = (EXAMPLE / "scenario.toml").read_text().replace('name = "refund_desk"', 'name = "copy"')
    assert toml == expected  # its settings and comments, only the name changed
    own = tmp_path / "mine.md"
    own.write_text("# my brief\n")
    assert invoke(tmp_path, "new", "mine", "--brief", str(own)).exit_code == 0
    assert (tmp_path / "mine" / "brief.md").read_text() == "# my brief\n"


@pytest.mark.slow  # a whole simulated run
def test_new_from_a_run_copies_its_definition_not_its_run(finished: tuple[Path, SharedRun]) -> None:
    root, _ = finished
    (root / "notes.txt").write_text("kept\n")
    try:
        result = invoke(root.parent, "new", "again", "--from", str(root))
    finally:
        (root / "notes.txt").unlink()
    assert result.exit_code == 0, result.output
    copy = root.parent / "again"
    assert sorted(p.name for p in copy.iterdir()) == ["brief.md", "notes.txt", "scenario.toml"]
    assert 'name = "again"' in (copy / "scenario.toml").read_text()
    shutil.rmtree(copy)


def test_new_refuses_hostile_and_existing_names(tmp_path: Path) -> None:
    result = invoke(tmp_path / "inner", "new", "../x")
    assert result.exit_code == 2
    assert "invalid scenario name '../x'" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x").exists()
    assert invoke(tmp_path, "new", "twice").exit_code == 0
    result = invoke(tmp_path, "new", "twice")
    assert result.exit_code == 2 and "already exists" in result.output


# ---- run, approve, reject ---------------------------------------------------------------


def test_run_with_auto_approve_finishes(finished: tuple[Path, SharedRun]) -> None:
    root, result = finished
    assert result.exit_code == 0, result.output
    record = run_json(root)
    assert (record["phase"], record["status"]) == ("done", "succeeded")
    assert "SIMULATED" in result.output
    assert "compaction #1" in result.output
    assert "success rate 80%" in result.output  # iteration 1 misses the target, iteration 2 meets it
    assert "execution_outputs/iteration_2/report.json" in result.output


@pytest.mark.slow  # a whole simulated run
def test_approve_continues_to_execute(awaiting: Path, tmp_path: Path) -> None:
    root = copy_of(awaiting, tmp_path)
    result = invoke(tmp_path, "approve", "refund_desk", "--profile", "demo")
    assert result.exit_code == 3, result.output  # iteration 2's design waits for approval
    record = run_json(root)
    # Execute ran iteration 1 (80% < 85%), Init redesigned, and iteration 2 waits for approval.
    assert [r["success_rate"] for r in record["results"]] == [0.8]
    assert (record["phase"], record["iteration"]) == ("awaiting_approval", 2)
    assert (root / "handoffs" / "iteration_1" / "approval.json").exists()


def test_reject_sends_the_feedback_to_init(awaiting: Path, tmp_path: Path) -> None:
    root = copy_of(awaiting, tmp_path)
    feedback = "add a rule about gift cards"
    result = invoke(tmp_path, "reject", "refund_desk", "--feedback", feedback, "--profile", "demo")
    assert result.exit_code == 3, result.output
    log = [json.loads(line) for line in (root / "state" / "init" / "log.jsonl").read_text().splitlines()]
    openings = [r for r in log if r["kind"] == "opening"]
    assert len(openings) == 2 and feedback in json.dumps(openings[-1]["message"])
    assert run_json(root)["phase"] == "awaiting_approval"  # Init redesigned and handed off again


@pytest.mark.slow  # a whole simulated run
def test_a_missed_target_exits_1(tmp_path: Path) -> None:
    root = copy_of(EXAMPLE, tmp_path)
    toml = root / "scenario.toml"
    toml.write_text(toml.read_text().replace("max_iterations = 3", "max_iterations = 1"))
    result = invoke(tmp_path, "run", "refund_desk", "--auto-approve", "--profile", "demo")
    assert result.exit_code == 1, result.output
    assert run_json(root)["status"] == "failed_target"
    assert "below its target" in result.output


# ---- status and context -------------------------------------------------------------------


def test_status_of_one_and_of_all(finished: tuple[Path, SharedRun]) -> None:
    root, _ = finished
    one = invoke(root.parent, "status", "refund_desk")
    assert one.exit_code == 0, one.output
    for word in ("done", "succeeded", "it1 80%", "it2 100%", "SIMULATED", "circuit breaker", "/18,000"):
        assert word in one.output
    every = invoke(root.parent, "status")
    assert every.exit_code == 0 and "refund_desk" in every.output and "done" in every.output


def test_status_reports_torn_log_lines(finished: tuple[Path, SharedRun], tmp_path: Path) -> None:
    root = copy_of(finished[0], tmp_path)
    with open(root / "state" / "execute" / "log.jsonl", "a") as fh:
        fh.write('{"seq": 999, "kind": "assis')  # what a crash mid-append leaves
    result = invoke(tmp_path, "status", "refund_desk")
    assert result.exit_code == 0
    assert "not valid JSON" in result.output


def test_status_with_a_corrupted_run_json(finished: tuple[Path, SharedRun], tmp_path: Path) -> None:
    root = copy_of(finished[0], tmp_path)
    (root / "run.json").write_text('{"phase": ')
    result = invoke(tmp_path, "status", "refund_desk")
    assert result.exit_code == 2
    assert "run.json is corrupted" in result.output and "Traceback" not in result.output
    assert (root / "run.json").read_text() == '{"phase": '  # reading never repairs by overwriting
    overview = invoke(tmp_path, "status")
    assert overview.exit_code == 0 and "unreadable" in overview.output


def test_context_prints_layers_and_writes_a_png(finished: tuple[Path, SharedRun], tmp_path: Path) -> None:
    root = copy_of(finished[0], tmp_path)
    result = invoke(tmp_path, "context", "refund_desk", "--agent", "execute", "--profile", "demo")
    assert result.exit_code == 0, result.output
    for word in ("system_and_tools", "verbatim", "estimated input", "18,000 / 24,000"):
        assert word in result.output
    png = root / "state" / "execute" / "context.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    other = tmp_path / "init.png"
    assert invoke(tmp_path, "context", "refund_desk", "--png", str(other), "--profile", "demo").exit_code == 0
    assert other.read_bytes()[:4] == b"\x89PNG"


def test_context_of_a_request_that_no_longer_fits_says_so(finished: tuple[Path, SharedRun], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A window too small for what is on disk (settings changed since the run): the timeline is drawn and the
    command says the next step compacts first, rather than 'unexpected ContextOverflow'."""
    root = copy_of(finished[0], tmp_path)
    monkeypatch.setenv("BATON_EXECUTE_WINDOW", "9000")
    monkeypatch.setenv("BATON_EXECUTE_THRESHOLD", "6000")
    result = invoke(tmp_path, "context", "refund_desk", "--agent", "execute", "--profile", "demo")
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "does not fit" in flat and "9,000" in flat and "compact" in flat, flat
    assert (root / "state" / "execute" / "context.png").read_bytes()[:4] == b"\x89PNG"


# ---- errors ------------------------------------------------------------------------------------


def test_unknown_scenario(tmp_path: Path) -> None:
    result = invoke(tmp_path, "run", "nowhere")
    assert result.exit_code == 2 and "unknown scenario 'nowhere'" in result.output and "baton new" in result.output


def test_invalid_scenario_toml(tmp_path: Path) -> None:
    root = copy_of(EXAMPLE, tmp_path)
    (root / "scenario.toml").write_text('name = "refund_desk"\nmax_iterations = \n')
    result = invoke(tmp_path, "run", "refund_desk", "--profile", "demo")
    assert result.exit_code == 2
    assert "is not valid TOML" in result.output and "line 2" in result.output
    assert not (root / "run.json").exists()


@pytest.mark.parametrize("command", [("run", "refund_desk", "--auto-approve"), ("resume", "refund_desk")])
def test_a_bad_agent_setting_stops_before_anything_is_written(tmp_path: Path, command: tuple[str, ...]) -> None:
    root = copy_of(EXAMPLE, tmp_path)
    before = sorted(p.name for p in root.iterdir())
    with (root / "scenario.toml").open("a") as toml:
        toml.write('\n[agents.execute]\nthreshold = "lots"\n')
    result = invoke(tmp_path, *command, "--profile", "demo")
    assert result.exit_code == 2, result.output
    assert "execute.threshold = 'lots'" in result.output and "[agents.execute]" in result.output
    assert sorted(p.name for p in root.iterdir()) == before  # no run.json, no state/, no runs/


def test_target_above_one_is_refused(tmp_path: Path) -> None:
    root = copy_of(EXAMPLE, tmp_path)
    toml = root / "scenario.toml"
    toml.write_text(toml.read_text().replace("target_success_rate = 0.85", "target_success_rate = 1.01"))
    result = invoke(tmp_path, "run", "refund_desk", "--auto-approve")
    assert result.exit_code == 2
    assert "target_success_rate = 1.01" in result.output and "less than or equal to 1" in result.output


def test_unreachable_broker(tmp_path: Path) -> None:
    root = copy_of(EXAMPLE, tmp_path)
    result = invoke(tmp_path, "run", "refund_desk", BATON_BROKER_URL="redis://127.0.0.1:1/0")
    assert result.exit_code == 2
    assert "unreachable" in result.output and "redis-server" in result.output and "BATON_BROKER_URL" in result.output
    assert not (root / "run.json").exists()  # checked before anything was written


def test_worker_needs_a_broker(tmp_path: Path) -> None:
    result = invoke(tmp_path, "worker", "init")
    assert result.exit_code == 2 and "BATON_BROKER_URL" in result.output


def test_the_installed_entry_point(tmp_path: Path) -> None:
    baton = Path(sys.executable).parent / "baton"
    if not baton.exists():
        pytest.skip("the baton entry point is not installed (pip install -e .)")

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        # A minimal environment: no broker, no API key, whatever the developer's shell holds.
        return subprocess.run([str(baton), "--scenarios-dir", str(tmp_path), *args], check=False, capture_output=True,
                              text=True, timeout=60,
                              env={"PATH": str(baton.parent), "HOME": str(tmp_path), **suite_gates()})

    created = call("new", "smoke")  # one call: the interpreter's start-up takes seconds on a busy machine
    assert created.returncode == 0, created.stderr
    assert (tmp_path / "smoke" / "scenario.toml").is_file()


def test_a_failed_step_exits_2_and_resume_continues(tmp_path: Path) -> None:
    root = copy_of(EXAMPLE, tmp_path)
    result = invoke(tmp_path, "run", "refund_desk", "--profile", "demo", BATON_MAX_STEPS_PER_TURN="2")
    assert result.exit_code == 2
    assert "max_steps_per_turn (2)" in result.output and "baton resume refund_desk" in result.output
    assert run_json(root)["status"] == "error"
    resumed = invoke(tmp_path, "resume", "refund_desk", "--profile", "demo")
    assert resumed.exit_code == 3, resumed.output
    assert run_json(root)["phase"] == "awaiting_approval"


def test_an_unexpected_error_has_no_traceback(monkeypatch: pytest.MonkeyPatch, awaiting: Path, tmp_path: Path) -> None:
    copy_of(awaiting, tmp_path)

    def broken(_root: Path) -> list:
        raise RuntimeError("boom")

    monkeypatch.setattr("workers.loop.resume", broken)
    result = invoke(tmp_path, "resume", "refund_desk")
    assert result.exit_code == 2
    assert "unexpected RuntimeError: boom" in result.output and "BATON_DEBUG" in result.output
    assert "Traceback" not in result.output


# ---- command-line conventions ---------------------------------------------------------------


def test_version_and_python_dash_m(tmp_path: Path) -> None:
    shown = invoke(tmp_path, "--version")
    assert shown.exit_code == 0 and shown.output.startswith("baton ")
    module = subprocess.run([sys.executable, "-m", "baton", "--version"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert module.returncode == 0 and module.stdout == shown.output, module.stderr


def test_help_shows_names_exit_codes_and_choices(tmp_path: Path) -> None:
    top = invoke(tmp_path, "--help").output
    assert "Exit codes:" in top and "3 the run waits for your approval" in top and "130" in top
    assert "--install-completion" in top
    new_help = invoke(tmp_path, "new", "--help").output
    assert "Usage: root new [OPTIONS] NAME" in new_help and "{name}" not in new_help and "<str>" not in new_help
    assert "<init|execute>" in invoke(tmp_path, "context", "--help").output
    wrong = invoke(tmp_path, "context", "refund_desk", "--agent", "bob")
    assert wrong.exit_code == 2 and "'bob' is not one of 'init', 'execute'" in wrong.output
    assert invoke(tmp_path, "worker", "cook").exit_code == 2


def test_scenarios_dir_after_the_command(finished: tuple[Path, SharedRun]) -> None:
    root, _ = finished
    result = runner.invoke(cli, ["status", "--scenarios-dir", str(root.parent), "refund_desk", "--json"],
                           env={name: None for name in UNSET})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["scenario"] == "refund_desk"


@pytest.mark.slow  # a whole simulated run
def test_the_simulated_notice_is_said_once(awaiting: Path, tmp_path: Path) -> None:
    root = copy_of(awaiting, tmp_path)
    result = invoke(tmp_path, "context", "refund_desk", "--profile", "demo")
    assert result.exit_code == 0 and "SIMULATED" not in result.output, result.output
    approved = invoke(tmp_path, "approve", "refund_desk", "--profile", "demo")
    assert approved.output.count("SIMULATED model") == 1, approved.output  # the banner only, no log lines
    # `baton context` builds no model (it reads); a command that runs the agents logs the notice at -v.
    verbose = invoke(tmp_path, "-v", "resume", "refund_desk", "--profile", "demo")
    assert "using the SIMULATED model" in verbose.output
    assert root.exists()


def test_ctrl_c_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(folder: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("workers.cli.status_overview", interrupted)
    assert invoke(tmp_path, "status").exit_code == 130


def test_context_json_tells_estimated_from_measured(finished: tuple[Path, SharedRun], tmp_path: Path) -> None:
    root, _ = finished
    png = tmp_path / "init.png"
    result = invoke(root.parent, "context", "refund_desk", "--agent", "init", "--profile", "demo", "--json",
                    "--png", str(png))
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    status = json.loads(invoke(root.parent, "status", "refund_desk", "--json").output)
    # The last step's estimate is the number status shows; the timeline has every step, the compactions numbered.
    assert data["last_step"]["estimated_input"] == status["agents"]["init"]["estimated_input"]
    assert len(data["timeline"]) == status["agents"]["init"]["steps"] and data["last_step"]["measured_input"] > 0
    assert [c["number"] for c in data["compactions"]] == list(range(1, status["agents"]["init"]["compactions"] + 1))
    assert any(point["handoff"] for point in data["timeline"]) and png.stat().st_size > 10_000
    assert set(data["next_request"]["layers"]) >= {"system_and_tools", "verbatim"}


def test_piped_tables_do_not_wrap(finished: tuple[Path, SharedRun]) -> None:
    root, _ = finished
    shown = runner.invoke(cli, ["--scenarios-dir", str(root.parent), "status"], env={name: None for name in UNSET}
                          | {"COLUMNS": None})
    rows = [line for line in shown.output.splitlines() if "refund_desk" in line]
    assert len(rows) == 1 and "done" in rows[0] and "SIMULATED" in rows[0], shown.output


def test_status_tells_a_stalled_run_from_a_live_one(awaiting: Path, tmp_path: Path) -> None:
    from workers.scenario_lock import scenario_lock

    root = copy_of(awaiting, tmp_path)
    record = run_json(root) | {"phase": "designing", "status": "running"}  # as a run left by a Ctrl-C
    (root / "run.json").write_text(json.dumps(record))
    stalled = invoke(tmp_path, "status", "refund_desk")
    # The shared run may be minutes old by now: "12 s ago", "3 min ago", ... (workers/render.py's ages).
    assert re.search(r"activity: last step \d+ (s|min|h|days) ago \(init step", stalled.output), stalled.output
    assert "no broker is configured" in stalled.output and "baton resume refund_desk" in stalled.output
    overview = invoke(tmp_path, "status").output
    assert "last step" in overview and "nothing alive runs it" in overview
    with scenario_lock(root, "baton run refund_desk"):
        live = invoke(tmp_path, "status", "refund_desk", "--json")
    activity = json.loads(live.output)["activity"]
    assert activity["alive"] and activity["embedded_run"]["command"] == "baton run refund_desk"
    assert activity["workers"] is None and activity["seconds_since_last_step"] >= 0


def test_a_malformed_scenario_toml_is_that_scenarios_error_alone(tmp_path: Path) -> None:
    copy_of(EXAMPLE, tmp_path)
    broken = tmp_path / "deep"
    broken.mkdir()
    (broken / "scenario.toml").write_text('name = "deep"\nx = ' + "[" * 100_000 + "]" * 100_000 + "\n")
    (tmp_path / "bad_syntax").mkdir()
    (tmp_path / "bad_syntax" / "scenario.toml").write_text('name = "bad_syntax"\nmax_iterations = \n')
    overview = invoke(tmp_path, "status")
    assert overview.exit_code == 0, overview.output
    assert "refund_desk" in overview.output and "deep" in overview.output and "bad_syntax" in overview.output
    assert overview.output.count("invalid scenario.toml") == 2 and "nested too deeply" in overview.output
    one = invoke(tmp_path, "status", "deep")
    assert one.exit_code == 0 and "nested too deeply" in one.output and "Traceback" not in one.output
    listed = json.loads(invoke(tmp_path, "status", "--json").output)
    problems = {s["scenario"]: s["scenario_toml_problem"] for s in listed}
    assert problems["refund_desk"] is None and "nested too deeply" in problems["deep"]


@pytest.mark.parametrize("columns", [80, 120])
def test_status_fits_the_terminal_and_never_cuts_a_scenario_its_phase_or_iteration(
        finished: tuple[Path, SharedRun], awaiting: Path, tmp_path: Path, columns: int) -> None:
    copy_of(finished[0], tmp_path)
    waiting = tmp_path / "customer_support_refunds"
    shutil.copytree(awaiting, waiting)
    broken = tmp_path / "erred"
    shutil.copytree(finished[0], broken)
    error = "execute step 14: " + "the model API answered 529 overloaded after every retry; " * 6
    (broken / "run.json").write_text(json.dumps(run_json(broken) | {"status": "error", "last_error": error}))
    shown = invoke(tmp_path, "status", COLUMNS=str(columns))
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert max(len(line) for line in lines if "│" in line or "┃" in line) <= columns, shown.output
    for name in ("refund_desk", waiting.name, "erred"):
        record = run_json(tmp_path / name)
        (row,) = [line for line in lines if f" {name} " in line and "│" in line]
        cells = [cell.strip() for cell in row.split("│")]
        assert cells[1:5] == [name, record["phase"], str(record["iteration"]), record["status"]], (row, shown.output)
    # The paragraph of an error is shown whole, on its own line(s), not cut to fit a column.
    assert error.strip() in " ".join(line.strip() for line in lines if "│" not in line), shown.output


def test_status_lists_scenarios_line_by_line_when_even_the_essential_columns_do_not_fit(
        finished: tuple[Path, SharedRun], tmp_path: Path) -> None:
    name = "a_scenario_whose_name_alone_takes_most_of_an_eighty_column_window"
    shutil.copytree(finished[0], tmp_path / name)
    shown = invoke(tmp_path, "status", COLUMNS="80")
    assert shown.exit_code == 0 and f"{name}: done, iteration 2, succeeded" in shown.output, shown.output


@pytest.mark.parametrize("args, env, says, not_says", [
    (["--profile", "bogus"], {}, "fix the value given on the command line", "scenario.toml"),
    ([], {"BATON_PROFILE": "bogus"}, "fix the BATON_* environment variable named above", "scenario.toml"),
    ([], {"BATON_INIT_WINDOWS": "5"}, "fix the BATON_* environment variable named above", "scenario.toml"),
])
def test_a_config_error_says_where_the_value_came_from(tmp_path: Path, args: list[str], env: dict[str, str],
                                                       says: str, not_says: str) -> None:
    copy_of(EXAMPLE, tmp_path)
    result = invoke(tmp_path, "run", "refund_desk", *args, **env)
    assert result.exit_code == 2 and says in result.output and not_says not in result.output, result.output


def test_a_bad_value_in_scenario_toml_points_at_scenario_toml(tmp_path: Path) -> None:
    root = copy_of(EXAMPLE, tmp_path)
    (root / "scenario.toml").write_text((root / "scenario.toml").read_text() + "\n[agents.init]\nwindow = -1\n")
    result = invoke(tmp_path, "run", "refund_desk")
    assert result.exit_code == 2 and "fix scenario.toml named above" in result.output, result.output


def test_a_start_that_cannot_reach_the_api_records_the_error_and_status_says_nothing_runs_it(tmp_path: Path) -> None:
    import socket

    with socket.socket() as closed:  # a port nothing listens on once this block ends
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    copy_of(EXAMPLE, tmp_path)
    result = invoke(tmp_path, "run", "refund_desk", "--auto-approve", ANTHROPIC_API_KEY="sk-ant-test",
                    ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}")
    assert result.exit_code == 2 and "ANTHROPIC_BASE_URL" in result.output, result.output
    record = run_json(tmp_path / "refund_desk")
    assert record["status"] == "error" and "Models API catalogue" in record["last_error"], record
    overview = invoke(tmp_path, "status")
    (row,) = [line for line in overview.output.splitlines() if " refund_desk " in line]
    assert " error " in row and " running " not in row, overview.output
    assert "nothing runs it" in overview.output and "baton resume refund_desk" in overview.output


# ---- a corrupted run.json, rebuilt from the folder ------------------------------------------

SAME_RUN = ("phase", "iteration", "status", "auto_approve", "profile", "max_iterations", "target_success_rate",
            "results", "feedback", "models", "last_error")


@pytest.mark.parametrize("which", ["finished", "awaiting"])
def test_resume_rebuild_infers_the_run_json_the_run_had(request: pytest.FixtureRequest, tmp_path: Path,
                                                        which: str) -> None:
    source = request.getfixturevalue(which)
    root = copy_of(source[0] if which == "finished" else source, tmp_path)
    before = run_json(root)
    (root / "run.json").write_text('{"phase": "desig')
    rebuilt = invoke(tmp_path, "resume", "refund_desk", "--rebuild")
    assert rebuilt.exit_code == (0 if which == "finished" else 3), rebuilt.output
    after = run_json(root)
    assert {k: after[k] for k in SAME_RUN} == {k: before[k] for k in SAME_RUN}, rebuilt.output
    assert "rebuilt refund_desk/run.json from the folder" in rebuilt.output and "profile demo" in rebuilt.output
    (kept,) = root.glob("run.json.broken-*")
    assert kept.read_text() == '{"phase": "desig'  # the broken file is kept beside it


@pytest.mark.slow  # whole simulated runs
def test_a_run_whose_run_json_broke_goes_on_after_rebuild(tmp_path: Path) -> None:
    root = copy_of(EXAMPLE, tmp_path)
    stopped = invoke(tmp_path, "run", "refund_desk", "--profile", "demo", BATON_MAX_STEPS_PER_TURN="2")
    assert stopped.exit_code == 2 and run_json(root)["phase"] == "designing"
    (root / "run.json").write_bytes(b"\x00" * 40)  # what a disk fault leaves
    refused = invoke(tmp_path, "resume", "refund_desk")
    assert refused.exit_code == 2 and "baton resume refund_desk --rebuild" in refused.output, refused.output
    rebuilt = invoke(tmp_path, "resume", "refund_desk", "--rebuild")
    assert rebuilt.exit_code == 3 and run_json(root)["phase"] == "awaiting_approval", rebuilt.output
    done = invoke(tmp_path, "run", "refund_desk", "--auto-approve")
    assert done.exit_code == 0, done.output
    record = run_json(root)
    assert (record["phase"], record["status"], record["profile"]) == ("done", "succeeded", "demo")
    assert [r["success_rate"] for r in record["results"]] == [0.8, 1.0]


def test_resume_rebuild_refuses_a_readable_run_json(awaiting: Path, tmp_path: Path) -> None:
    root = copy_of(awaiting, tmp_path)
    before = (root / "run.json").read_text()
    refused = invoke(tmp_path, "resume", "refund_desk", "--rebuild")
    assert refused.exit_code == 2 and "nothing to rebuild" in refused.output
    assert (root / "run.json").read_text() == before and not list(root.glob("run.json.broken-*"))


def test_a_run_json_with_fields_missing_or_wrong_names_every_one(awaiting: Path, tmp_path: Path) -> None:
    root = copy_of(awaiting, tmp_path)
    record = run_json(root)
    del record["scenario"]
    record |= {"phase": "thinking", "iteration": 0}
    (root / "run.json").write_text(json.dumps(record))
    shown = invoke(tmp_path, "status", "refund_desk")
    assert shown.exit_code == 2, shown.output
    for field in ("scenario", "phase", "iteration"):
        assert f"{field}:" in shown.output, shown.output
    assert "--rebuild" in shown.output


# ---- settings that cannot work, refused up front; read-only commands on any scenario ----------


def test_a_threshold_below_the_system_prompt_and_tools_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    root = copy_of(EXAMPLE, tmp_path)
    with open(root / "scenario.toml", "a") as toml:
        toml.write("\n[agents.init]\nthreshold = 100\n")
    refused = invoke(tmp_path, "run", "refund_desk", "--auto-approve")
    assert refused.exit_code == 2, refused.output
    assert "init.threshold = 100 (from" in refused.output and "system prompt and tools alone take" in refused.output
    assert "fix scenario.toml named above" in refused.output
    assert sorted(p.name for p in root.iterdir()) == ["brief.md", "scenario.toml"]


def test_a_name_that_is_not_the_folder_s_is_refused(tmp_path: Path) -> None:
    root = copy_of(EXAMPLE, tmp_path)
    toml = root / "scenario.toml"
    toml.write_text(toml.read_text().replace('name = "refund_desk"', 'name = "gift_desk"'))
    refused = invoke(tmp_path, "run", "refund_desk", "--auto-approve")
    assert refused.exit_code == 2 and "name = 'gift_desk' is not the folder's name 'refund_desk'" in refused.output
    assert not (root / "run.json").exists()


def test_a_copy_is_named_after_its_folder(tmp_path: Path) -> None:
    copy_scenario(EXAMPLE, tmp_path / "desk2")
    assert 'name = "desk2"' in (tmp_path / "desk2" / "scenario.toml").read_text()


def test_read_only_commands_work_on_a_scenario_no_model_can_run_yet(tmp_path: Path) -> None:
    assert invoke(tmp_path, "new", "gift_desk").exit_code == 0  # a new brief: the simulated model cannot play it
    for agent in ("init", "execute"):
        shown = invoke(tmp_path, "context", "gift_desk", "--agent", agent)
        assert shown.exit_code == 0 and "system_and_tools" in shown.output and "has not run yet" in shown.output
    as_json = json.loads(invoke(tmp_path, "context", "gift_desk", "--json").output)
    assert as_json["next_request"]["layers"]["system_and_tools"] > 1000 and as_json["png"] is None
    assert invoke(tmp_path, "status", "gift_desk").exit_code == 0 and invoke(tmp_path, "status").exit_code == 0
    assert not (tmp_path / "gift_desk" / "state").exists()  # reading made nothing


def test_context_builds_no_model(finished: tuple[Path, SharedRun], tmp_path: Path) -> None:
    copy_of(finished[0], tmp_path)  # a key, and an API that does not answer: reading needs neither
    shown = invoke(tmp_path, "context", "refund_desk", ANTHROPIC_API_KEY="sk-ant-test",
                   ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    assert shown.exit_code == 0 and "system_and_tools" in shown.output, shown.output


def test_a_second_embedded_command_changes_nothing_before_it_exits_2(awaiting: Path, tmp_path: Path) -> None:
    from workers.scenario_lock import scenario_lock

    root = copy_of(awaiting, tmp_path)
    errored = run_json(root) | {"status": "error", "last_error": "init: boom"}
    (root / "run.json").write_text(json.dumps(errored))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with scenario_lock(root, "baton run refund_desk"):
        for command in (["run", "refund_desk", "--auto-approve", "--profile", "default"], ["resume", "refund_desk"],
                        ["approve", "refund_desk"]):
            busy = invoke(tmp_path, *command)
            assert busy.exit_code == 2 and "already running in pid" in busy.output, busy.output
        after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == {p: b for p, b in before.items() if p.name != ".lock"}  # run.json included: still errored

"""baton installed from its wheel (not a checkout) finds its prompts and the example scenario.

The fast tests check that every file the runtime reads from its packages is declared package
data and let into the Docker build; the slow one builds the wheel, installs it into a fresh venv
and runs the example from an empty folder."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents.config import ROLE_DEFAULTS
from agents.prompts import PROMPTS_DIR, prompt
from scenarios.run import EXAMPLES_DIR, add_shipped_example, shipped_example
from workers.cli import cli

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
# What a run reads from the packages besides Python modules: the role prompts and the example's definition.
PROMPT_FILES = [f"{role}/{kind}.md" for role in ("init", "execute") for kind in ("system", "compact")]
DATA_FILES = {
    "proving": [f"export/runtime/{name}" for name in ("task.py", "session.py", "offline_tokens.py", "README.md")],
    "baton.prompts": PROMPT_FILES,
    "scenarios": ["refund_desk/brief.md", "refund_desk/scenario.toml", "_simulations/refund_desk.py",
                  "_simulations/_refund_desk_files.py"],
}
# Offline, embedded, simulated: nothing from the caller's environment may make the run distributed or paid.
UNSET = ("BATON_BROKER_URL", "CELERY_BROKER_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "BATON_PROFILE",
         "BATON_SCENARIOS_DIR", "PYTHONPATH")


def test_every_data_file_a_run_reads_is_package_data():
    declared = PYPROJECT["tool"]["setuptools"]["package-data"]
    for package, paths in DATA_FILES.items():
        folder = REPO / "prompts" if package == "baton.prompts" else REPO / package
        for path in paths:
            assert (folder / path).is_file(), path
            assert any(fnmatch.fnmatch(path, glob) for glob in declared[package]), f"{package}/{path} not in the wheel"


def test_a_plain_install_brings_what_the_default_gates_need():
    """The quick start installs `.` with no extra and runs the example with its default gates, three of which run
    the exported task through Inspect (issue 38: the run ended below target, "Inspect AI is not installed")."""
    from proving.evaluation.gates import ProvingSettings

    core = {re.split(r"[<>=!\[; ]", dep, maxsplit=1)[0].lower() for dep in PYPROJECT["project"]["dependencies"]}
    assert {"floor", "mutation", "solver"} & set(ProvingSettings().gates)
    assert {"inspect-ai", "quicktok-v1"} <= core, core


def test_the_docker_build_context_lets_the_example_in():
    allowed = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    for path in DATA_FILES["scenarios"][:2]:
        assert f"!scenarios/{path}" in allowed, f".dockerignore drops scenarios/{path}"


def test_prompts_load_from_the_top_level_folder_of_a_checkout():
    # The project's layout: prompts/ beside workers/ agents/ context/ scenarios/ tests/.
    assert Path(str(PROMPTS_DIR)) == REPO / "prompts"
    shipped = sorted(str(p.relative_to(REPO / "prompts")) for p in (REPO / "prompts").glob("*/*.md"))
    assert shipped == sorted(PROMPT_FILES)
    assert not (REPO / "agents" / "role_prompts").exists()
    assert PROMPTS_DIR.joinpath("init", "system.md").is_file()
    assert prompt("execute", "compact").endswith("\n") and prompt("init", "system").strip()


def test_the_shipped_example_is_found_and_copied_without_run_outputs(tmp_path):
    assert shipped_example("refund_desk") == EXAMPLES_DIR / "refund_desk"
    assert shipped_example("_simulations") is None and shipped_example("no_such_example") is None
    copied = add_shipped_example(tmp_path / "scenarios", "refund_desk")
    assert copied == tmp_path / "scenarios" / "refund_desk"
    assert sorted(p.name for p in copied.iterdir()) == ["brief.md", "scenario.toml"]
    assert add_shipped_example(tmp_path / "scenarios", "refund_desk") is None  # never over the user's copy
    assert add_shipped_example(EXAMPLES_DIR, "refund_desk") is None  # in a checkout it is already there


def test_new_from_the_example_works_from_a_folder_without_it(tmp_path):
    environment: dict[str, str | None] = {name: None for name in UNSET} | {"COLUMNS": "200"}
    result = CliRunner().invoke(cli, ["--scenarios-dir", str(tmp_path), "new", "mine", "--from", "refund_desk"],
                                env=environment)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "mine" / "brief.md").read_text() == (EXAMPLES_DIR / "refund_desk" / "brief.md").read_text()


def _source_tree(target: Path) -> Path:
    """The files the wheel is built from, copied out of the checkout: building in place would write
    build/ and *.egg-info into a tree others are editing, and run outputs must not leak in."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "run.json", "design", "handoffs", "execution_outputs",
                                    "state", "runs")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, target / name)
    shutil.copy2(REPO / "setup.py", target / "setup.py")
    for package in ("context", "agents", "proving", "scenarios", "workers", "importers", "baton", "prompts"):
        shutil.copytree(REPO / package, target / package, ignore=ignore)
    return target


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.slow
def test_the_wheel_installed_in_a_fresh_venv_runs_the_example_from_an_empty_folder(tmp_path):
    # As on a user's machine, the venv's modules are compiled once, on first import, and the .pyc files kept:
    # with PYTHONDONTWRITEBYTECODE inherited, each of the processes below compiled every module it imports again.
    env = {key: value for key, value in os.environ.items() if key not in (*UNSET, "PYTHONDONTWRITEBYTECODE")}
    (tmp_path / "src").mkdir()
    source = _source_tree(tmp_path / "src")
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)], tmp_path, env)
    (wheel,) = wheels.glob("baton-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    # The dependencies come from pip's configured indexes and cache, as for any user. Not compiled ahead: the
    # runs below compile what they import, and precompiling every dependency was most of this test's CPU.
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", str(wheel)], tmp_path, env)
    baton = str(venv / "bin" / "baton")
    # The prompts ship as baton/prompts, never as a generic top-level `prompts` in site-packages.
    check = ("import agents.prompts as p, sysconfig, pathlib; site = pathlib.Path(sysconfig.get_paths()['purelib']); "
             "print(p.PROMPTS_DIR, (site / 'prompts').exists(), len(p.prompt('init', 'system')))")
    shown = _run([str(venv / "bin" / "python"), "-P", "-c", check], tmp_path, env).stdout.split()
    assert shown[0].endswith("site-packages/baton/prompts") and shown[1] == "False" and int(shown[2]) > 1000, shown

    empty = tmp_path / "elsewhere"
    empty.mkdir()
    # A new brief offline: the simulated model (whose scripts ship in the wheel) knows only the examples.
    _run([baton, "new", "x"], empty, env)
    refused = subprocess.run([baton, "run", "x", "--auto-approve", "--profile", "demo"], cwd=empty, env=env,
                             capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "--from refund_desk" in refused.stderr + refused.stdout, refused
    assert not (empty / "scenarios" / "x" / "run.json").exists()

    # The example itself, from a folder that lacks it: `new --from` and `run` find the shipped copy.
    _run([baton, "new", "y", "--from", "refund_desk"], empty, env)
    example_brief = (EXAMPLES_DIR / "refund_desk" / "brief.md").read_text()
    assert (empty / "scenarios" / "y" / "brief.md").read_text() == example_brief
    _run([baton, "run", "y", "--auto-approve", "--profile", "demo"], empty, env)
    record = json.loads((empty / "scenarios" / "y" / "run.json").read_text(encoding="utf-8"))
    assert (record["phase"], record["status"]) == ("done", "succeeded"), record
    # The quick start's own job: the example with every default gate (the suite's cheaper BATON_PROVING_GATES
    # aside). The wheel's dependencies must bring what they need: Inspect for floor, mutation and solver.
    quick = {key: value for key, value in env.items() if key != "BATON_PROVING_GATES"}
    done = _run([baton, "run", "refund_desk", "--auto-approve", "--profile", "demo"], empty, quick)
    assert "copied the example refund_desk" in done.stdout
    record = json.loads((empty / "scenarios" / "refund_desk" / "run.json").read_text(encoding="utf-8"))
    assert (record["phase"], record["status"]) == ("done", "succeeded"), record
    figures = record["results"][-1]["figures"]
    assert figures["ran"] == ["coverage", "duplicate", "gold", "policy", "floor", "mutation", "solver"] \
        and not figures["skipped"], \
        figures
    # The export copies runtime files that are package data, not modules.
    _run([baton, "export", "y", "--to", "inspect", "--out", "exported"], empty, env)
    runtime = {p.name for p in (empty / "exported" / "baton_runtime").iterdir()}
    assert {"session.py", "offline_tokens.py", "processes.py", "compare.py", "child_main.py"} <= runtime
    assert (empty / "exported" / "task.py").is_file() and (empty / "exported" / "tools" / "tools.py").is_file()


def test_the_examples_scenario_toml_documents_the_defaults_as_they_are():
    """The commented defaults of the example are what a run gets: the model lines, not an id."""
    text = (EXAMPLES_DIR / "refund_desk" / "scenario.toml").read_text(encoding="utf-8")
    for role, table in zip(("init", "execute"), text.split("# [agents.")[1:], strict=True):
        lines = table.split("\n\n", 1)[0].splitlines()[1:]  # the table's own lines: up to the blank line after it
        keys = [line.removeprefix("# ") for line in lines if line.startswith("# ") and "=" in line]
        shown = tomllib.loads("\n".join(keys))
        assert shown["model"] == ROLE_DEFAULTS[role]["model"], (role, shown)
        for key in ("window", "threshold", "keep_last_steps"):
            assert shown[key] == ROLE_DEFAULTS[role][key], (role, key)

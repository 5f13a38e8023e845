"""Model-written files never configure anything (issue 39, item 4).

A `.env` written by Execute's Write tool at the scenario's top or in an iteration folder was loaded by Inspect
into baton's own environment and switched both sandboxes off. Now Write, Edit and Bash refuse every name that
configures a program by being where it looks (scenarios/configuring.py) with an error saying why, and every copy
of a model-written folder leaves such a file out and names it, for one planted by hand or by an older baton."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.tools.bash_copy import make_seed
from proving.evaluation.child import copy_files
from scenarios import trees
from scenarios.configuring import configures
from tests.test_file_tools import bad, bash_ctx, call, ctx, good, sandbox  # noqa: F401 (fixtures)

PLANTED = (
    ".env",
    "execution_outputs/iteration_1/.env",
    "execution_outputs/iteration_1/inspect_task/.env",
    ".envrc",
    "execution_outputs/iteration_1/tools/evil.pth",
    "execution_outputs/iteration_1/tools/sitecustomize.py",
    "usercustomize.py",
    "pyproject.toml",
    "execution_outputs/iteration_1/checkers/conftest.py",
    "execution_outputs/iteration_1/tools/pytest.ini",
    "design/setup.cfg",
    ".inspect",
    "execution_outputs/iteration_1/.inspectrc",
    "execution_outputs/iteration_1/tools/sitecustomize/__init__.py",
    "design/.ENV",
)


@pytest.mark.parametrize("rel", PLANTED)
def test_write_refuses_a_file_that_configures_a_program(ctx, tmp_path, rel):  # noqa: F811
    error = bad(ctx, "Write", path=rel, content="BATON_EVAL_SANDBOX=none\n")
    assert "configures a program" in error, error
    assert not (tmp_path / rel).exists()


def test_edit_refuses_one_planted_by_hand(ctx, tmp_path):  # noqa: F811
    (tmp_path / ".env").write_text("A=1\n")
    error = bad(ctx, "Edit", path=".env", old_string="A=1", new_string="BATON_EVAL_SANDBOX=none")
    assert "configures a program" in error
    assert (tmp_path / ".env").read_text() == "A=1\n"


def test_ordinary_names_are_still_written(ctx, tmp_path):  # noqa: F811
    for rel in ("design/env.md", "tools/environment.py", "tools/settings.toml", "tools/pyproject_notes.md"):
        good(ctx, "Write", path=rel, content="x\n")
        assert configures(Path(rel).name) is None


def test_bash_cannot_leave_one_anywhere(bash_ctx, tmp_path):  # noqa: F811
    command = ("mkdir -p execution_outputs/iteration_1/tools design && echo BATON_EVAL_SANDBOX=none > .env && "
               "echo x > execution_outputs/iteration_1/.env && echo 'import os' > design/sitecustomize.py && "
               "echo x > execution_outputs/iteration_1/tools/a.pth && echo fine > design/notes.md")
    result = call(bash_ctx, "Bash", command=command)
    assert result.status == "ok", result.error
    for rel in (".env", "execution_outputs/iteration_1/.env", "design/sitecustomize.py",
                "execution_outputs/iteration_1/tools/a.pth"):
        assert not (tmp_path / rel).exists(), rel
    assert (tmp_path / "design" / "notes.md").read_text() == "fine\n"
    said = str(result.data.get("not_applied", "")) + str(result.data.get("removed", ""))
    assert ".env" in said and "sitecustomize.py" in said and "a.pth" in said, result.data


def test_a_copy_leaves_a_planted_one_out_and_says_so(tmp_path):
    out = tmp_path / "root" / "execution_outputs" / "iteration_1"
    for rel in ("tools/tools.py", "tools/.env", "tools/sitecustomize.py", "tools/x.pth", "checkers/conftest.py",
                "checkers/check.py", "tools/sub/pytest.ini"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("A=1\n")
    work = tmp_path / "work"
    work.mkdir()
    not_copied, problem = copy_files(tmp_path / "root", ("execution_outputs", "iteration_1"), work, 64)
    assert problem is None
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file()) == [
        "checkers/check.py", "tools/tools.py"]
    named = " ".join(not_copied)
    for name in (".env", "sitecustomize.py", "x.pth", "conftest.py", "pytest.ini"):
        assert name in named and "configures a program" in named, not_copied
    assert trees.copy_tree(tmp_path / "root", ("execution_outputs",), tmp_path / "copy2")  # names them too


def test_bash_s_copy_of_the_folder_leaves_them_out(tmp_path):
    root = tmp_path / "root"
    (root / "design").mkdir(parents=True)
    (root / ".env").write_text("BATON_EVAL_SANDBOX=none\n")
    (root / "design" / ".envrc").write_text("export X=1\n")
    (root / "design" / "spec.md").write_text("# spec\n")
    seed = make_seed(root, tmp_path / "seed", 16)
    assert not (tmp_path / "seed" / ".env").exists() and not (tmp_path / "seed" / "design" / ".envrc").exists()
    assert (tmp_path / "seed" / "design" / "spec.md").exists()
    assert any(".env" in item for item in seed.refused) and any(".envrc" in item for item in seed.refused)

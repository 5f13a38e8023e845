"""A checkout's scenarios/ is where a user's own scenarios go (`baton new mine --from refund_desk`), beside the
example baton ships. Nothing of baton, and nothing of its test suite, may take a user's scenario for the example
or for baton's own code (issue 38: copies named `fa` and `mine` in a clean clone made four tests fail)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import scenarios.run as run_module
from scenarios.run import copy_scenario, example_copied, shipped_example

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def checkout_scenarios(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scenarios/ folder as a user's checkout has it: the example, the simulated model's scripts, and the
    user's own copies of the example, one sorting before it and one after."""
    folder = tmp_path / "scenarios"
    folder.mkdir()
    shutil.copytree(REPO / "scenarios" / "refund_desk", folder / "refund_desk",
                    ignore=shutil.ignore_patterns("run.json", "design", "handoffs", "execution_outputs", "state",
                                                  "runs"))
    shutil.copytree(REPO / "scenarios" / "_simulations", folder / "_simulations",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(run_module, "EXAMPLES_DIR", folder)
    copy_scenario(folder / "refund_desk", folder / "mine")
    copy_scenario(folder / "refund_desk", folder / "fa")
    return folder


def test_a_copy_is_a_copy_of_the_example_not_of_another_users_copy(checkout_scenarios: Path) -> None:
    assert example_copied(checkout_scenarios / "fa") == "refund_desk"
    assert example_copied(checkout_scenarios / "mine") == "refund_desk"
    assert example_copied(checkout_scenarios / "refund_desk") is None


def test_a_users_scenario_is_no_shipped_example(checkout_scenarios: Path) -> None:
    assert shipped_example("refund_desk") == checkout_scenarios / "refund_desk"
    assert shipped_example("mine") is None  # the user's, though it has a scenario.toml
    assert shipped_example("_simulations") is None


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and a checkout")
@pytest.mark.parametrize("name", ["dist", "build", "export", "logs"])
def test_a_users_scenario_is_never_hidden_from_git_by_its_name(name: str) -> None:
    """.gitignore's build folders are the checkout's own (issue 38: `dist/` hid a scenario named dist)."""
    import subprocess

    for path in (f"scenarios/{name}/brief.md", f"scenarios/{name}/scenario.toml"):
        ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=REPO)
        assert ignored.returncode == 1, f"{path} is ignored by .gitignore"
    run_output = subprocess.run(["git", "check-ignore", "--no-index", "-q", f"scenarios/{name}/run.json"], cwd=REPO)
    assert run_output.returncode == 0  # a run's outputs stay out of git, whatever the scenario's name

"""A model a person named, with no API key to call it, is an error, not a simulated run (issue 38, item 4).

A real model named in scenario.toml (or BATON_<ROLE>_MODEL) without ANTHROPIC_API_KEY used to run SIMULATED
and exit 0, said only by the banner. Now the command stops with exit 2 before anything is written, saying
how to run the simulated model on purpose; the example, which names no model, runs offline as the README
prints it, and so does a named model beside backend = "simulated". A worker refuses such a scenario's task
the same way (its Team is built by model_for).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.models import ModelError
from scenarios.run import copy_scenario
from tests.export_support import EXAMPLE, baton
from workers.loop import Team, check_settings


def example_with(folder: Path, toml_extra: str = "") -> Path:
    root = copy_scenario(EXAMPLE, folder / "refund_desk")
    if toml_extra:
        (root / "scenario.toml").write_text((root / "scenario.toml").read_text() + toml_extra)
    return root


@pytest.mark.parametrize(("toml_extra", "env", "named"), [
    ('\n[agents.init]\nmodel = "claude-opus-4-1"\n', {}, "init.model = 'claude-opus-4-1'"),
    ('\n[agents]\nmodel = "opus"\n', {}, "init.model = 'opus'"),  # a line, set explicitly: the default's name
    ("", {"BATON_EXECUTE_MODEL": "claude-sonnet-5-5"}, "execute.model = 'claude-sonnet-5-5'"),
], ids=["toml-id", "toml-line", "environment"])
def test_a_named_model_without_a_key_stops_before_anything_is_written(tmp_path: Path, toml_extra: str,
                                                                      env: dict[str, str], named: str) -> None:
    root = example_with(tmp_path, toml_extra)
    before = sorted(p.name for p in root.iterdir())
    result = baton(tmp_path, "run", "refund_desk", "--profile", "demo", **env)
    text = " ".join(result.output.split())
    assert result.exit_code == 2, text
    assert named in text and "ANTHROPIC_API_KEY" in text, text
    assert 'backend = "simulated"' in text and "remove" in text, text  # how to run simulated on purpose
    assert "SIMULATED model:" not in text  # no banner: nothing ran
    assert sorted(p.name for p in root.iterdir()) == before  # no run.json, no state/


def test_the_example_and_a_chosen_simulation_still_run_offline(tmp_path: Path) -> None:
    check_settings(example_with(tmp_path / "plain"), "demo", env={})  # names no model: simulated, as the README says
    chosen = example_with(tmp_path / "chosen", '\n[agents.init]\nmodel = "claude-opus-4-1"\nbackend = "simulated"\n')
    check_settings(chosen, "demo", env={})
    check_settings(example_with(tmp_path / "variable"), "demo",
                   env={"BATON_INIT_MODEL": "opus", "BATON_BACKEND": "simulated"})
    # With a key the named model is the one called (the catalogue resolves it when the run starts).
    check_settings(example_with(tmp_path / "keyed", '\n[agents.init]\nmodel = "opus"\n'), "demo",
                   env={"ANTHROPIC_API_KEY": "sk-test"})


def test_a_worker_refuses_it_too(tmp_path: Path) -> None:
    root = example_with(tmp_path, '\n[agents.execute]\nmodel = "claude-sonnet-5-5"\n')
    with pytest.raises(ModelError, match=r"execute.model = 'claude-sonnet-5-5' \(from .*scenario.toml"):
        Team(root, profile="demo", env={})

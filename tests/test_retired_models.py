"""Retired models, found with the Models API's ``lifecycle`` filter, through the real SDK and ``baton fake-api``.

A setting naming a retired model, or a run pinned to a model that retired since, stops before the first step
with "<id> was retired on <date>" and what to set instead, never "unknown model".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.catalogue import CatalogueError
from agents.disk import AgentDisk
from scenarios.run import RunRecord, load_run, save_run
from tests.agent_run import started_example
from tests.fake_api_support import KEY, serving, stats
from tests.load import load_scaled
from workers.fake_api.catalogue import DEFAULT_MODELS, Catalogue
from workers.fake_api.server import FakeApi
from workers.loop import Team

UNSET = ("BATON_BROKER_URL", "CELERY_BROKER_URL", "BATON_PROFILE", "BATON_SCENARIOS_DIR", "ANTHROPIC_AUTH_TOKEN")


def _set_execute_model(root: Path, model: str) -> None:
    toml = root / "scenario.toml"
    text = toml.read_text()
    cut = text.index("\n[agents.execute]") if "\n[agents.execute]" in text else len(text)
    toml.write_text(text[:cut] + f'\n[agents.execute]\nmodel = "{model}"\n')


def _sonnet_4_5_retired() -> Catalogue:
    """The default catalogue a few days on: Sonnet 4.5 has reached its retirement date (2026-11-30)."""
    return Catalogue([m.model_copy(update={"lifecycle": "retired"}) if m.id == "claude-sonnet-4-5" else m
                      for m in DEFAULT_MODELS])


def test_a_setting_naming_a_retired_model_says_when_it_retired(tmp_path):
    root = started_example(tmp_path, '\n[agents.init]\nmodel = "claude-opus-4-1"\n')
    with serving(FakeApi()) as api:
        env = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": api.url}
        with pytest.raises(CatalogueError) as refused:
            Team(root, env=env)
        asked = stats(api.url)["requests"]
    message = str(refused.value)
    assert message.startswith("claude-opus-4-1 was retired on 2026-06-05 and can no longer be called")
    assert "set model = 'claude-opus-5-5' (the opus line's current model) or model = 'opus'" in message
    assert "unknown" not in message and KEY not in message
    assert asked.get("POST /v1/messages", 0) == 0 and load_run(root).models == {}


@pytest.mark.slow  # a real `baton run` process
def test_baton_run_refuses_a_retired_model_before_its_first_step(tmp_path):
    root = started_example(tmp_path, '\n[agents.init]\nmodel = "claude-opus-4-1"\n')
    (root / "run.json").unlink()  # a fresh scenario: `baton run` starts it
    with serving(FakeApi()) as api:
        env = {name: value for name, value in os.environ.items() if name not in UNSET}
        env.update(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=api.url, COLUMNS="200")
        baton = str(Path(sys.executable).parent / "baton")
        done = subprocess.run([baton, "--scenarios-dir", str(tmp_path), "run", root.name, "--auto-approve",
                               "--embedded"], env=env, capture_output=True, text=True, timeout=load_scaled(120))
        asked = stats(api.url)["requests"]
    output = " ".join((done.stdout + done.stderr).split())  # rich wraps long lines
    assert done.returncode == 2, output
    assert "claude-opus-4-1 was retired on 2026-06-05" in output and "model = 'claude-opus-5-5'" in output
    assert asked.get("POST /v1/messages", 0) == 0  # no step asked the model anything
    assert not [e for e in AgentDisk.load(root, "init").events if e.kind == "step"]


def test_a_pinned_model_that_retired_since_stops_the_run_until_another_is_named(tmp_path):
    root = started_example(tmp_path, '\n[agents.execute]\nmodel = "claude-sonnet-4-5"\n')
    with serving(FakeApi()) as api:  # November: Sonnet 4.5 is deprecated, still callable, and gets pinned
        Team(root, env={"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": api.url})
    assert load_run(root).models["execute"]["id"] == "claude-sonnet-4-5"
    with serving(FakeApi(catalogue=_sonnet_4_5_retired())) as api:  # December: it has retired
        env = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": api.url}
        with pytest.raises(CatalogueError) as refused:
            Team(root, env=env)
        message = str(refused.value)
        assert "the execute agent's model claude-sonnet-4-5 was retired on 2026-11-30" in message
        assert ("set model = 'claude-sonnet-5-5' (the sonnet line's current model) or model = 'sonnet' under "
                f"[agents.execute] in scenario.toml, then `baton resume {root.name}`") in message
        assert load_run(root).models["execute"]["id"] == "claude-sonnet-4-5"  # nothing changed

        _set_execute_model(root, "sonnet")  # what the message said to do
        team = Team(root, env=env)
        assert stats(api.url)["requests"].get("POST /v1/messages", 0) == 0
    assert team["execute"].config.model.name == "claude-sonnet-5-5"
    pins = load_run(root).models
    assert pins["execute"]["id"] == "claude-sonnet-5-5" and pins["init"]["id"] == "claude-opus-5-5"
    warnings = [e.reason for e in AgentDisk.load(root, "execute").events if e.kind == "warning"]
    assert any("claude-sonnet-4-5 was retired on 2026-11-30" in w and "goes on on claude-sonnet-5-5" in w
               for w in warnings), warnings


def test_a_line_pinned_to_a_model_that_retired_asks_for_an_id(tmp_path):
    root = started_example(tmp_path)
    pin = {"asked": "sonnet", "id": "claude-sonnet-4-5", "line": "sonnet", "max_input_tokens": 200_000}
    save_run(root, RunRecord(scenario=root.name, models={"execute": pin}))
    with serving(FakeApi(catalogue=_sonnet_4_5_retired())) as api:
        with pytest.raises(CatalogueError) as refused:
            Team(root, env={"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": api.url})
    # model = 'sonnet' is already the setting: naming it again would not change the pin, so only the id is offered.
    assert "set model = 'claude-sonnet-5-5' (the sonnet line's current model) under [agents.execute]" in str(
        refused.value)

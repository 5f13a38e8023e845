"""The simulated model drives only the shipped examples, recognised by their brief (docs/agents.md, "Models").

Offline (no ANTHROPIC_API_KEY) a scenario with any other brief stops before its first step and writes
nothing; a copy of an example under another name runs; the workers' Team and the fake API refuse the same way.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from agents.simulated import UnknownBrief, brief_fingerprint, known_scripts, load_script, script_for_brief
from agents.tools.base import ToolContext, run_tool
from agents.tools.registry import FILE_TOOLS
from tests.fake_api_support import KEY, http, init_body
from workers.cli import cli
from workers.fake_api.server import FakeApi, Running, start
from workers.loop import Team

EXAMPLES = Path(__file__).resolve().parents[1] / "scenarios"
EXAMPLE_BRIEF = (EXAMPLES / "refund_desk" / "brief.md").read_text(encoding="utf-8")
FLIGHT_BRIEF = """# Brief: flight desk

We want an evaluation scenario for an airline support agent that rebooks passengers whose flight was
cancelled or missed a connection. The agent looks up the booking, finds the next flights with free seats,
and rebooks, refunds or hands the case to a supervisor, following our rebooking policy exactly.
"""
# Unset for every test, as in tests/test_cli.py: a broker or an API key in the developer's shell must not
# turn these offline runs into distributed or paid ones.
UNSET = ("BATON_BROKER_URL", "CELERY_BROKER_URL", "ANTHROPIC_API_KEY", "BATON_PROFILE", "BATON_SCENARIOS_DIR")
runner = CliRunner()


def invoke(folder: Path, *args: str) -> Result:
    environment: dict[str, str | None] = {name: None for name in UNSET} | {"COLUMNS": "200"}
    return runner.invoke(cli, ["--scenarios-dir", str(folder), *args], env=environment)


@pytest.fixture(autouse=True)
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)


def listing(folder: Path) -> dict[str, int]:
    """Every file and folder under ``folder`` with its size: what a refused run must leave unchanged."""
    return {str(p.relative_to(folder)): p.stat().st_size if p.is_file() else -1 for p in sorted(folder.rglob("*"))}


def assert_refusal_says_what_to_do(text: str) -> None:
    flat = " ".join(text.split())  # the console wraps long lines
    assert "simulated model" in flat and "only drives the examples" in flat
    assert "refund_desk" in flat  # the examples it knows, by name
    assert "set ANTHROPIC_API_KEY" in flat and "baton new NAME --from refund_desk" in flat


# ---- recognising a brief ------------------------------------------------------------------


def test_every_shipped_script_recognises_its_examples_brief() -> None:
    for name in known_scripts():
        brief = (EXAMPLES / name / "brief.md").read_text(encoding="utf-8")
        assert load_script(name).BRIEF_SHA256 == brief_fingerprint(brief), (
            f"scenarios/{name}/brief.md changed: revisit scenarios/_simulations/{name}.py, then set its "
            f"BRIEF_SHA256 to {brief_fingerprint(brief)!r}")
        assert script_for_brief(brief) == name


def test_whitespace_does_not_matter_but_any_other_edit_does() -> None:
    rewrapped = EXAMPLE_BRIEF.replace("\n", "\r\n").replace("online shop. A customer", "online shop.\n  A customer")
    assert script_for_brief(rewrapped + "\n\n") == "refund_desk"
    edited = EXAMPLE_BRIEF.replace("within 30 days of delivery", "within 14 days of delivery")
    assert edited != EXAMPLE_BRIEF
    with pytest.raises(UnknownBrief, match="not the brief of an example"):
        script_for_brief(edited)


# ---- the CLI -------------------------------------------------------------------------------


def test_a_new_brief_stops_before_the_first_step_and_writes_nothing(tmp_path: Path) -> None:
    brief = tmp_path / "flight.md"
    brief.write_text(FLIGHT_BRIEF, encoding="utf-8")
    scenarios = tmp_path / "scenarios"
    assert invoke(scenarios, "new", "flightdesk", "--brief", str(brief)).exit_code == 0
    before = listing(scenarios)

    result = invoke(scenarios, "run", "flightdesk", "--auto-approve", "--profile", "demo")

    assert result.exit_code == 2, result.output
    assert_refusal_says_what_to_do(result.output)
    assert "flightdesk/brief.md" in result.output
    assert listing(scenarios) == before  # no run.json, no state/
    assert not (scenarios / "flightdesk" / "run.json").exists()


def test_an_edited_example_is_refused(tmp_path: Path) -> None:
    assert invoke(tmp_path, "new", "stricter", "--from", "refund_desk").exit_code == 0
    brief = tmp_path / "stricter" / "brief.md"
    brief.write_text(brief.read_text(encoding="utf-8").replace("30 days", "14 days"), encoding="utf-8")
    before = listing(tmp_path)

    result = invoke(tmp_path, "run", "stricter", "--auto-approve", "--profile", "demo")

    assert result.exit_code == 2, result.output
    assert_refusal_says_what_to_do(result.output)
    assert listing(tmp_path) == before


@pytest.mark.slow  # a whole simulated run
def test_a_copy_of_the_example_under_another_name_runs_offline(tmp_path: Path) -> None:
    assert invoke(tmp_path, "new", "mydesk", "--from", "refund_desk").exit_code == 0

    result = invoke(tmp_path, "run", "mydesk", "--auto-approve", "--profile", "demo")

    assert result.exit_code == 0, result.output
    assert '"status": "succeeded"' in (tmp_path / "mydesk" / "run.json").read_text(encoding="utf-8")


# ---- the workers ---------------------------------------------------------------------------


def test_the_workers_team_refuses_an_unknown_brief(tmp_path: Path) -> None:
    """A Celery task builds its Team the same way (workers.tasks._team): it fails with the same message."""
    root = tmp_path / "flightdesk"
    root.mkdir()
    (root / "scenario.toml").write_text('name = "flightdesk"\n', encoding="utf-8")
    (root / "brief.md").write_text(FLIGHT_BRIEF, encoding="utf-8")
    with pytest.raises(UnknownBrief) as refused:
        Team(root, profile="demo", env={})
    assert_refusal_says_what_to_do(str(refused.value))
    assert sorted(p.name for p in root.iterdir()) == ["brief.md", "scenario.toml"]


# ---- the fake API --------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[Running]:
    running = start(FakeApi())
    yield running
    running.stop()


def post(server: Running, body: dict) -> tuple[int, dict]:
    return http(f"{server.url}/v1/messages", "POST", body, {"x-api-key": KEY, "anthropic-version": "2023-06-01"})


def renamed(body: dict, scenario: str) -> dict:
    body = copy.deepcopy(body)
    text = body["messages"][0]["content"][0]["text"]
    body["messages"][0]["content"][0]["text"] = text.replace("Scenario: refund_desk", f"Scenario: {scenario}")
    return body


def with_brief_read(body: dict, brief: str, tmp_path: Path) -> dict:
    """Init's first step plus a Read of brief.md holding ``brief``, its result made by the real Read tool."""
    (tmp_path / "brief.md").write_text(brief, encoding="utf-8")
    tools = {tool.name: tool for tool in FILE_TOOLS}
    result = run_tool(tools, "Read", {"path": "brief.md"}, ToolContext(root=tmp_path, agent="init", iteration=1))
    body = copy.deepcopy(body)
    body["messages"] += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "Read",
                                           "input": {"path": "brief.md"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": result.text()}]},
    ]
    return body


def test_the_fake_api_answers_400_for_a_scenario_it_has_no_script_for(server: Running) -> None:
    assert post(server, init_body())[0] == 200  # the example itself, as its opening names it

    status, body = post(server, renamed(init_body(), "flightdesk"))

    assert status == 400, body
    assert body["error"]["type"] == "invalid_request_error"
    assert "'flightdesk'" in body["error"]["message"]
    assert_refusal_says_what_to_do(body["error"]["message"])


def test_the_fake_api_recognises_the_brief_a_request_quotes(server: Running, tmp_path: Path) -> None:
    assert post(server, with_brief_read(init_body(), EXAMPLE_BRIEF, tmp_path))[0] == 200

    status, body = post(server, with_brief_read(init_body(), FLIGHT_BRIEF, tmp_path))

    assert status == 400, body  # named refund_desk, but the brief it read is another one
    assert "the brief.md this request quotes" in body["error"]["message"]
    assert_refusal_says_what_to_do(body["error"]["message"])



def test_a_copy_s_opening_says_which_example_it_copies_and_the_double_plays_it(server: Running,
                                                                              tmp_path: Path) -> None:
    from scenarios.run import copy_scenario, example_copied

    copied = copy_scenario(EXAMPLES / "refund_desk", tmp_path / "fa")
    assert example_copied(copied) == "refund_desk"
    assert example_copied(EXAMPLES / "refund_desk") is None  # not the example itself
    status, _ = post(server, renamed(init_body(), "fa (a copy of the example refund_desk)"))
    assert status == 200  # played as the example, before any Read of brief.md
    # An edited copy is no copy: its opening names no example, and its brief is refused once read.
    (copied / "brief.md").write_text(FLIGHT_BRIEF, encoding="utf-8")
    assert example_copied(copied) is None
    assert post(server, with_brief_read(renamed(init_body(), "fa (a copy of the example refund_desk)"),
                                        FLIGHT_BRIEF, tmp_path))[0] == 400

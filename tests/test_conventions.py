"""CONVENTIONS.md (agents/conventions.py, issue 13.2): the team's house rules and a scenario's own go to
both agents after the system prompt, are read again only when the file changes (and then the step
says once that the prefix changed), and a file that cannot be used stops the run with its name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agents.conventions import MAX_CHARS, ConventionsError, conventions_for
from agents.disk import AgentDisk, open_turn
from agents.openings import init_opening
from agents.prompts import prompt
from agents.simulated import SimulatedModel
from agents.step import run_step
from context.prefix import without_cache_control
from tests.agent_run import agents, copy_example
from tests.export_support import baton


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_no_file_no_conventions(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    assert conventions_for(root).text == "" and conventions_for(root).fingerprint is None
    team = agents(root)
    assert team["init"].static(root).system == prompt("init", "system")


def test_both_files_follow_the_system_prompt_of_both_agents_outer_first(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    write(root.parent / "CONVENTIONS.md", "Ids are upper-case: C1, O1001.\n")
    write(root / "CONVENTIONS.md", "Amounts in dollars with two decimals.\n")
    team = agents(root)
    for role in ("init", "execute"):
        system = team[role].static(root).system
        assert system.startswith(prompt(role, "system").rstrip())
        outer, own = system.index("Ids are upper-case"), system.index("Amounts in dollars")
        assert outer < own
        assert f'<conventions source="{root.parent.name}/CONVENTIONS.md">' in system


def test_a_file_is_read_again_only_when_it_changes(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    path = write(root / "CONVENTIONS.md", "Rule A.\n")
    assert "Rule A." in conventions_for(root).text
    stat = path.stat()
    write(path, "Rule B.\n")  # same size; the modification time put back: not read again
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert "Rule A." in conventions_for(root).text
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert "Rule B." in conventions_for(root).text


@pytest.mark.parametrize("kind", ["folder", "not-utf8", "too-long"])
def test_a_file_that_cannot_be_used_is_an_error_that_names_it(tmp_path: Path, kind: str) -> None:
    root = copy_example(tmp_path)
    path = root / "CONVENTIONS.md"
    if kind == "folder":
        path.mkdir()
        expected = "is a folder"
    elif kind == "not-utf8":
        path.write_bytes(b"caf\xe9\n")
        expected = "is not UTF-8 text"
    else:
        write(path, "x" * (MAX_CHARS + 1))
        expected = f"over the {MAX_CHARS:,}"
    with pytest.raises(ConventionsError, match=expected) as caught:
        conventions_for(root)
    assert str(path) in str(caught.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file whatever its mode: run as a user to check this")
def test_an_unreadable_file_is_an_error_that_names_it(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    path = write(root / "CONVENTIONS.md", "secret rules\n")
    path.chmod(0)
    with pytest.raises(ConventionsError, match="permission denied"):
        conventions_for(root)


def test_baton_run_refuses_a_bad_file_before_writing_anything(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    (root / "CONVENTIONS.md").write_bytes(b"\xff\xfe broken")
    result = baton(root.parent, "run", root.name, "--auto-approve", "--profile", "demo")
    assert result.exit_code == 2 and "CONVENTIONS.md is not UTF-8 text" in result.output
    assert not (root / "run.json").exists() and not (root / "state").exists()


def warnings_of(root: Path) -> list[str]:
    lines = (root / "state" / "init" / "events.jsonl").read_text().splitlines()
    return [e["reason"] for e in map(json.loads, lines) if e["kind"] == "warning"]


class Recording(SimulatedModel):
    """The simulated model, keeping each request's system prompt."""

    def __init__(self) -> None:
        super().__init__()
        self.systems: list[str] = []

    def create(self, request):  # noqa: ANN001, ANN201
        # The prompt, not its cache marker (whose TTL a step may choose: context.cache_ttl).
        self.systems.append(request.system if isinstance(request.system, str) else
                            json.dumps(without_cache_control(request.system)))
        return super().create(request)


def test_a_change_mid_run_is_a_new_message_and_the_system_prompt_stays(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    model = Recording()
    team = agents(root, model)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    assert run_step(root, team["init"], step=1).status == "continue"
    assert warnings_of(root) == []
    write(root.parent / "CONVENTIONS.md", "Ids are upper-case.\n")
    assert run_step(root, team["init"], step=2).status == "continue"
    assert run_step(root, team["init"], step=3).status == "continue"
    changed = [w for w in warnings_of(root) if "conventions changed" in w]
    assert len(changed) == 1 and "told in a new message at the end of its log" in changed[0]
    # The system prompt is what it was at the first step (thinking is signed over it); the new rules
    # reach the agent once, as a message appended to its log, which every later request carries.
    assert model.systems[0] == model.systems[1] == model.systems[2]
    assert "Ids are upper-case." not in model.systems[-1]
    notes = [r for r in AgentDisk.load(root, "init").records if r.kind == "note"]
    told = [r for r in notes if "Ids are upper-case." in json.dumps(r.message)]
    assert len(told) == 1

"""@file mentions in the brief and in a rejection's feedback (agents/mentions.py, issue 13.3): the
message is written to Init's log with a note that lists the files to read first, and the mentions
that cannot be followed, as such."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agents.mentions import find_mentions, mention_note
from scenarios.run import RunRecord, claim_run, save_run
from workers import loop


def test_mentions_are_paths_quoted_or_not_and_never_mail_or_handles() -> None:
    text = ("Read @design/business_rules.md and @\"design/my rules.md\", also @'données/règles.md'. "
            "Mail ana@example.com or @alice. See @../secret.txt, @/etc/passwd and @design/business_rules.md again.")
    assert find_mentions(text) == ["design/business_rules.md", "design/my rules.md", "données/règles.md",
                                   "../secret.txt", "/etc/passwd"]
    assert find_mentions("no mentions here, only a@b.c and @team") == []


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    root = tmp_path / "scenarios" / "desk"
    (root / "design").mkdir(parents=True)
    (root / "design" / "business_rules.md").write_text("R1\n")
    (root / "design" / "my rules.md").write_text("R2\n")
    (root / "données").mkdir()
    (root / "données" / "règles.md").write_text("R3\n")
    (tmp_path / "scenarios" / "secret.txt").write_text("not yours\n")
    os.symlink(tmp_path / "scenarios" / "secret.txt", root / "design" / "link.md")
    (root / "scenario.toml").write_text('name = "desk"\n')
    return root


def test_the_note_lists_what_to_read_and_what_cannot_be_followed(scenario: Path) -> None:
    note = mention_note(scenario, "Use @design/business_rules.md, @\"design/my rules.md\", @données/, "
                                  "@design/gone.md, @../secret.txt, @/etc/passwd and @design/link.md.")
    assert note.splitlines() == [
        "[baton] This message mentions files of the scenario.",
        "Read them first (paths relative to the scenario folder):",
        "- design/business_rules.md",
        "- design/my rules.md",
        "- données/ (a folder: list it with LS)",
        "Mentioned but not found, so there is nothing to read: design/gone.md",
        "Not followed, outside the scenario folder: ../secret.txt, /etc/passwd, design/link.md",
    ]
    assert "not yours" not in note  # never read, only named
    assert mention_note(scenario, "nothing to see") is None and mention_note(scenario, None) is None


def first_opening(root: Path) -> str:
    record = json.loads((root / "state" / "init" / "log.jsonl").read_text().splitlines()[-1])
    return "".join(b.get("text", "") for b in record["message"]["content"]) if isinstance(
        record["message"]["content"], list) else record["message"]["content"]


def test_the_brief_s_mentions_are_noted_in_init_s_opening(scenario: Path) -> None:
    # A new run moves design/ aside with the old run's outputs: a brief mentions what the user put there.
    (scenario / "reference").mkdir()
    (scenario / "reference" / "policy.md").write_text("the shop's refund policy\n")
    (scenario / "brief.md").write_text("Follow @reference/policy.md; see also @reference/gone.md.\n")
    loop.start(scenario)
    opening = first_opening(scenario)
    assert opening.startswith("Iteration: 1") and "- reference/policy.md" in opening
    assert "Mentioned but not found, so there is nothing to read: reference/gone.md" in opening


def test_a_rejection_s_mentions_are_noted_in_the_opening_it_writes(scenario: Path) -> None:
    (scenario / "brief.md").write_text("A plain brief.\n")
    loop.start(scenario)
    assert "[baton] This message mentions" not in first_opening(scenario)
    (scenario / "design").mkdir()  # what Init wrote before the human looked
    (scenario / "design" / "my rules.md").write_text("R2\n")
    record = RunRecord(scenario="desk", phase="awaiting_approval", status="waiting")
    save_run(scenario, record, claim_run(scenario))
    loop.reject(scenario, "Fix R1 in @\"design/my rules.md\" and ignore @../secret.txt")
    opening = first_opening(scenario)
    assert "<human_feedback>" in opening and "- design/my rules.md" in opening
    assert "Not followed, outside the scenario folder: ../secret.txt" in opening

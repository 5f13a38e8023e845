"""``baton import tau2 CHECKOUT --domain NAME``: a tau2-bench domain as a scenario with one iteration
(importers/tau2/, docs/import.md), on a tiny synthetic domain in tau2-bench's layout (tests/fixtures/tau2_mini/,
written for these tests) and, when BATON_TAU2_CHECKOUT names a real checkout, on its retail domain."""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

import pytest

from importers.tau2 import policy
from importers.tau2.checkout import Tau2ImportError
from importers.tau2.scenario import import_domain
from proving.evaluation.communicate import unsaid
from proving.evaluation.models import Sample
from tests.export_support import baton
from tests.test_sandbox_escapes import NO_BWRAP

pytestmark = pytest.mark.skipif(bool(NO_BWRAP), reason=f"the replay runs the domain's code in bubblewrap: {NO_BWRAP}")

MINI = Path(__file__).resolve().parent / "fixtures" / "tau2_mini"
ITERATION = Path("execution_outputs/iteration_1")


def samples_of(root: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((root / ITERATION / "samples").glob("*.json"))}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("import") / "tau2_mini"
    return root, import_domain(MINI, "mini", root)


def test_each_task_becomes_a_sample_with_its_user_its_actions_and_the_state_they_reach(imported) -> None:
    root, report = imported
    samples = samples_of(root)
    assert sorted(samples) == ["task_0", "task_1", "task_2", "task_4"]
    for sample in samples.values():
        Sample.model_validate(sample)  # baton's schema, the user part's included
    lend = samples["task_0"]
    assert lend["instruction"] == "You want to borrow The Quiet River, book bk_101."  # the reason for calling
    assert lend["user"]["goal"] == "You are polite and brief."  # the task instructions
    assert lend["user"]["facts"] == {"known_info": "Your email is ada@example.com.",
                                     "unknown_info": "You do not know your member id."}
    assert lend["user"]["withheld"] == ["unknown_info"]
    assert [a["tool"] for a in lend["actions"]] == ["find_member_by_email", "get_book", "lend_book"]
    assert lend["expected_state"] == {"books.bk_101.status": "on_loan", "books.bk_101.holder": "mem_ada",
                                      "members.mem_ada.loans": ["bk_101"]}
    assert samples["task_1"]["communicate_info"] == ["on loan"] and samples["task_1"]["expected_state"] == {}
    refused = samples["task_2"]
    assert refused["nl_assertions"] == ["The agent explains that the book is on loan and does not lend it."]
    assert [a["tool"] for a in refused["actions"]] == ["find_member_by_email"]  # the lend that fails in tau2 too
    assert "Book is not available" in refused["notes"] and refused["expected_state"] == {}
    assert samples["task_4"]["lookups_omitted"] is True and "lookups_omitted" not in lend
    assert report.do_nothing_passes == ["task_2"]  # no state change and nothing to communicate
    assert (report.failing_gold, report.lookups_omitted) == (["task_2"], ["task_4"])
    assert [(s.task, "the user's own" in s.why) for s in report.skipped] == [("3", True)]
    written = (root / "design" / "import_report.md").read_text()
    assert "task 3: its expected actions include the user's own (refresh_app)" in written
    assert "task_4: its expected actions pass an id" in written and "not carried" in written.lower()


def test_the_domain_code_is_carried_verbatim_with_its_licence_and_the_bridge(imported) -> None:
    root, report = imported
    tools = root / ITERATION / "tools"
    for name in ("tools.py", "data_model.py", "utils.py"):
        carried = (tools / "tau2" / "domains" / "mini" / name).read_bytes()
        assert carried == (MINI / "src" / "tau2" / "domains" / "mini" / name).read_bytes()
    assert (tools / "tau2" / "LICENSE").read_text() == (MINI / "LICENSE").read_text()
    for bridged in ("environment/toolkit.py", "environment/db.py", "utils/utils.py"):
        assert (tools / "tau2" / bridged).is_file()
    defined = [n.name for n in ast.parse((tools / "tools.py").read_text()).body if isinstance(n, ast.FunctionDef)]
    assert defined == ["find_member_by_email", "get_book", "lend_book"]
    assert report.tools == {"find_member_by_email": "READ", "get_book": "READ", "lend_book": "WRITE"}
    data = json.loads((tools / "data.json").read_text())
    assert data["books"]["bk_101"] == {"title": "The Quiet River", "status": "available", "holder": None}
    assert (root / ITERATION / "checkers" / "tau2_database.py").is_file()


def test_the_policy_is_kept_word_for_word_with_its_rules_numbered(imported) -> None:
    root, report = imported
    original = (MINI / "data" / "tau2" / "domains" / "mini" / "policy.md").read_text()
    rules = (root / "design" / "business_rules.md").read_text()
    assert policy.words(rules) == policy.words(original)
    assert "- P1: At the start, you must identify the member" in rules
    assert "- P3: Never lend a book to someone who is not a member." in rules
    assert "- a title" in rules  # a line that only describes the data is no rule
    assert report.rules == 3


def test_communicate_info_is_said_as_tau2_reads_it() -> None:
    assert unsaid(["1093.34", "On Loan"], ["The total is $1,093.34.", "It is on loan."]) == []
    assert unsaid(["1093.34"], ["The total is 1093.3", ""]) == ["1093.34"]
    assert unsaid(["on loan"], []) == ["on loan"]


def test_what_cannot_be_carried_stops_the_import_and_leaves_nothing(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(MINI, checkout)
    tools_py = checkout / "src" / "tau2" / "domains" / "mini" / "tools.py"
    tools_py.write_text("from tau2.environment.environment import Environment\n" + tools_py.read_text())
    root = tmp_path / "scenarios" / "tau2_mini"
    with pytest.raises(Tau2ImportError, match="imports tau2.environment.environment, which baton's bridge"):
        import_domain(checkout, "mini", root)
    assert not root.exists()
    with pytest.raises(Tau2ImportError, match="has no tau2 domain 'telecom'") as caught:
        import_domain(MINI, "telecom", root)
    assert caught.value.hint == "domains there: mini"


def test_an_existing_scenario_is_not_overwritten(imported) -> None:
    root, _ = imported
    with pytest.raises(Tau2ImportError, match="already exists"):
        import_domain(MINI, "mini", root)


def test_the_command_says_what_is_wrong_and_what_to_do(tmp_path: Path) -> None:
    result = baton(tmp_path, "import", "tau2", str(tmp_path / "nowhere"), "--domain", "mini")
    assert result.exit_code == 2 and "is not a folder" in result.output and "tau2-bench checkout" in result.output
    result = baton(tmp_path, "import", "tau2", str(MINI), "--domain", "mini", "--name", "../x")
    assert result.exit_code == 2 and "invalid scenario name" in result.output
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_baton_import_then_evaluate_with_the_gates(tmp_path: Path) -> None:
    result = baton(tmp_path, "import", "tau2", str(MINI), "--domain", "mini")
    assert result.exit_code == 0, result.output
    assert "4 samples of 5 tasks" in result.output and "does nothing passes 1 of 4" in result.output
    again = baton(tmp_path, "import", "tau2", str(MINI), "--domain", "mini")
    assert again.exit_code == 2 and "already exists" in again.output
    result = baton(tmp_path, "evaluate", "tau2_mini", BATON_PROVING_GATES="coverage,duplicate,floor")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "tau2_mini" / ITERATION / "report.json").read_text())
    assert (report["total"], report["passed"]) == (4, 4), report["failures"]  # every gold replays to its state
    findings = report["quality"]["findings"]
    floors = {f["sample"] for f in findings if f["gate"] == "floor" and "do_nothing" in f["detail"]}
    # Exactly the samples tau2's own reward passes a run that does nothing on: task_1 changes nothing either, but
    # asks the agent to say the book is on loan, which mockllm's fixed answer does not.
    assert floors == {"task_2"}
    assert report["quality"]["figures"]["coverage"] is not None
    # Through Inspect (the exported task's own scorer), a model that says one fixed text and calls nothing:
    # tau2's reward, communicate_info included.
    result = baton(tmp_path, "try", "tau2_mini", "--model", "mockllm/model")
    assert result.exit_code == 0, result.output
    tryout = json.loads((tmp_path / "tau2_mini" / ITERATION / "tryout.json").read_text())
    passed = {s["id"]: s["passes"] for s in tryout["samples"]}
    assert passed == {"task_0": 0, "task_1": 0, "task_2": 1, "task_4": 0}, passed
    said = next(s for s in tryout["samples"] if s["id"] == "task_1")
    assert "did not tell the user 'on loan' (communicate_info)" in said["failures"][0]


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("BATON_TAU2_CHECKOUT"),
                    reason="BATON_TAU2_CHECKOUT does not name a tau2-bench checkout (retail at commit 37199f3)")
def test_retail_of_a_real_checkout_replays_every_task_to_its_recorded_state(tmp_path: Path) -> None:
    checkout = Path(os.environ["BATON_TAU2_CHECKOUT"])
    result = baton(tmp_path, "import", "tau2", str(checkout), "--domain", "retail")
    assert result.exit_code == 0, result.output
    assert len(samples_of(tmp_path / "tau2_retail")) == 114
    result = baton(tmp_path, "evaluate", "tau2_retail", "--no-gates")
    report = json.loads((tmp_path / "tau2_retail" / ITERATION / "report.json").read_text())
    assert (report["total"], report["passed"]) == (114, 114), report["failures"][:5]

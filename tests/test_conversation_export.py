"""A conversational sample run by Inspect AI in the exported task (docs/conversations.md), offline: the model under
test (Inspect's mock, scripted) talks with the scripted user and with a model playing the user; the transcript
shows both sides; a user that volunteers a withheld fact is reported as the simulator's fault and counted apart;
`baton try` runs a conversational sample. The scenario is the example's finished run with one hand-written
conversational sample beside one of its own. Needs Inspect AI (a core dependency: pip install -e .)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proving import startup
from proving.export.tryout import eval_export
from tests.export_support import baton
from tests.shared_runs import SharedRun

for needed, why in (("inspect_ai", "Inspect AI is not installed: pip install -e ."),
                    ("quicktok", "quicktok-v1 (the offline o200k vocabulary) is not installed: "
                                 "pip install -e .")):
    if importlib.util.find_spec(needed) is None:
        pytest.skip(why, allow_module_level=True)
# Kept on one worker, which pays Inspect's import once; each test is a run of the exported task by Inspect.
pytestmark = [pytest.mark.xdist_group("inspect_ai_conversation"), pytest.mark.slow]

KEPT = "s02_final_sale_refused"  # a single-instruction sample of the example, run as before beside the conversation
CONVERSATION = {
    "id": "c01_refund_needs_the_order",
    "rules": ["R1"],
    "instruction": "Hi, my blender arrived 30 days ago and it is not what I hoped. Can I get my money back?",
    "actions": [{"tool": "get_order", "args": {"order_id": "O1001"}},
                {"tool": "issue_refund", "args": {"order_id": "O1001", "amount": 89.0, "reason": "R1: day 30"}}],
    "expected_state": {"orders.O1001.status": "refunded"},
    "user": {"persona": "Ana Silva, customer C1: polite, answers in a few words.",
             "goal": "Get a refund for the blender of order O1001, delivered 30 days ago.",
             "facts": {"order_id": "O1001", "customer_id": "C1"}, "withheld": ["order_id"],
             "asked_by": {"order_id": ["order number"]}, "stop_when": ["refunded"], "max_turns": 4},
}
ASK = "I'm sorry to hear that. Could you tell me your order id?"
DONE = "Your blender's order is now refunded: 89.00 back to your card."


@pytest.fixture(scope="module", autouse=True)
def token_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Inspect's token counts read o200k from here; the export's task.py fills it offline."""
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(tmp_path_factory.mktemp("tiktoken"))
    yield
    if saved is None:
        del os.environ["TIKTOKEN_CACHE_DIR"]
    else:
        os.environ["TIKTOKEN_CACHE_DIR"] = saved


@pytest.fixture(scope="module")
def talking(finished_run: SharedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The finished example with two samples left in its passing iteration: one of its own and the conversation."""
    root = finished_run.copy_to(tmp_path_factory.mktemp("talking"))
    samples = root / "execution_outputs" / "iteration_2" / "samples"
    for path in samples.glob("*.json"):
        if path.stem != KEPT:
            path.unlink()
    (samples / f"{CONVERSATION['id']}.json").write_text(json.dumps(CONVERSATION, indent=2))
    return root


@pytest.fixture(scope="module")
def exported(talking: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agents.scenario_facts import scenario_facts
    from proving.export.build import export_inspect

    out = tmp_path_factory.mktemp("export") / "refund_desk"
    export_inspect(talking, out, scenario_facts(talking))
    return out


def agent_under_test(first: str = ASK) -> Any:
    """The model under test: until the user has said O1001 it says ``first``; then it looks the order up, refunds
    it and says so (tests/inspect_models.py ``asking``: it runs in Inspect's own process)."""
    from tests.inspect_models import spec

    return spec("asking/model", first=first, done=DONE)


PROVIDERS = "tests.inspect_models"  # BATON_INSPECT_PROVIDERS: Inspect's process registers the users' providers


def leaky_user_provider() -> str:
    """A user model that volunteers the order id it must hold back (tests/inspect_models.py); its model string."""
    return "leaky_user/ana"


def stubborn_user_provider() -> str:
    """A user model that will not give its order id, asked or not, and gives up; its model string."""
    return "stubborn_user/ana"


def whole(log: Any) -> Any:
    """Inspect's own log of an eval_export (which returns what baton reads of it), from where baton moved it."""
    from inspect_ai.log import read_eval_log

    return read_eval_log(log.location)


def by_id(log: Any) -> dict[str, Any]:
    return {str(s.id): s for s in whole(log).samples}


def metrics(log: Any) -> dict[str, float]:
    """Every metric of the log by name: Inspect keeps the per-trial ("unreduced") ones in an entry of their own."""
    return {name: m.value for entry in whole(log).results.scores for name, m in entry.metrics.items()}


def said(sample: Any) -> list[tuple[str, str]]:
    """The conversation as the transcript shows it: (role, text) of every user message and every reply in text."""
    return [(m.role, m.text) for m in sample.messages
            if m.role == "user" or (m.role == "assistant" and not m.tool_calls)]


def test_the_scripted_user_and_the_agent_talk_until_the_goal_is_met(exported: Path, tmp_path: Path) -> None:
    log = eval_export(exported, agent_under_test(), 1, tmp_path / "logs")
    samples = by_id(log)
    talk = samples[CONVERSATION["id"]]
    assert said(talk) == [("user", CONVERSATION["instruction"]), ("assistant", ASK), ("user", "Order id: O1001."),
                          ("assistant", DONE), ("user", "Thank you, that is all. ###STOP###")]
    score = talk.scores["baton_scorer"]
    assert score.value == 1.0, score.explanation  # judged as any sample: the final data, the state, the checkers
    assert score.metadata["simulator_fault"] is None and score.metadata["tool_calls"] == 2
    assert score.metadata["conversation"] == {"user_simulator": "scripted", "ended": "user", "user_turns": 3,
                                              "agent_turns": 2}
    assert talk.metadata["user_simulator"] == "scripted"
    # The single-instruction sample is as before: one user message, one answer, no conversation.
    single = samples[KEPT]
    assert [m.role for m in single.messages] == ["system", "user", "assistant"]
    assert "conversation" not in single.scores["baton_scorer"].metadata
    figures = metrics(log)
    assert figures["simulator_faults"] == 0 and figures["agent_accuracy"] == figures["accuracy"] == 0.5
    readme = (exported / "README.md").read_text()  # whoever is handed the export learns how to pick the user
    assert "## Conversations" in readme and "1 sample(s) are conversations" in readme and "-T user=" in readme


def test_the_user_model_s_prompt_holds_the_user_part_and_the_rules() -> None:
    from proving.export.runtime.conversation import prompt
    from proving.export.runtime.users import UserSpec

    part = CONVERSATION["user"] | {"persona": "Ana {braces} $goal stays as written", "never_say": ["my PIN"]}
    text = prompt(UserSpec.from_dict(part), CONVERSATION["instruction"])
    assert "Ana {braces} $goal stays as written" in text  # substituted once: a persona is text, not a template
    assert "- order_id: O1001\n- customer_id: C1" in text and CONVERSATION["instruction"] in text
    assert "before the agent has asked for them, not even in passing: order_id" in text
    assert "asked or not: my PIN" in text and '"refunded"' in text and "###STOP###" in text
    assert not [name for name in ("persona", "facts", "withheld", "never_say", "opening", "stop") if f"${name}" in text]


def test_a_user_that_never_hears_its_fact_asked_for_talks_until_the_turn_limit(exported: Path, tmp_path: Path) -> None:
    log = eval_export(exported, agent_under_test(first="Let me see what I can do."), 1, tmp_path / "logs")
    talk = by_id(log)[CONVERSATION["id"]]
    users = [text for role, text in said(talk) if role == "user"]
    assert users[1:] == ["I do not know that."] * 3  # the opening and three replies: max_turns 4
    score = talk.scores["baton_scorer"]
    assert score.value == 0.0 and score.metadata["conversation"]["ended"] == "max_turns"
    assert score.metadata["simulator_fault"] is None  # never asked: the agent's failure, not the user's


def test_a_user_model_that_volunteers_a_withheld_fact_is_the_simulator_s_fault(exported: Path,
                                                                               tmp_path: Path) -> None:
    user = leaky_user_provider()
    log = eval_export(exported, agent_under_test(first="I'm sorry to hear that. Let me see what I can do."), 1,
                      tmp_path / "logs", {"user": user})
    from inspect_ai.log import resolve_sample_attachments

    talk = resolve_sample_attachments(by_id(log)[CONVERSATION["id"]])  # the log keeps long texts apart
    assert [text for role, text in said(talk) if role == "user"][1:] == [
        "Oh, and my order is O1001.", "Lovely, thank you! ###STOP###"]
    score = talk.scores["baton_scorer"]
    assert score.value == 1.0  # the agent did right; the run still says nothing about asking for the order
    assert score.metadata["simulator_fault"] == ("leaked order_id ('O1001') in the user's turn 2, before the agent "
                                                 "asked for it")
    assert "the user simulator's fault, not the agent's: leaked order_id" in score.explanation
    assert score.metadata["conversation"]["user_simulator"] == user
    # The user model's own calls are in the transcript, in spans of their own.
    calls = [e for e in talk.events if e.event == "model" and e.model == user]
    assert len(calls) == 2
    # It hears the conversation from the user's side: its prompt, then the agent's words as the other party's.
    first = calls[0].input
    assert [m.role for m in first] == ["system", "user"] and first[1].text.startswith("I'm sorry to hear that.")
    assert "Ana Silva, customer C1" in first[0].text and "- order_id: O1001" in first[0].text
    assert [m.role for m in calls[1].input] == ["system", "user", "assistant", "user"]
    assert sum(e.event == "span_begin" and e.name == "user simulator" for e in talk.events) == 2
    # Counted apart: the agent's accuracy leaves the spoiled trial out.
    figures = metrics(log)
    assert figures["simulator_faults"] == 1 and figures["accuracy"] == 0.5
    assert figures["agent_accuracy"] == by_id(log)[KEPT].scores["baton_scorer"].value == 0.0


def test_a_user_model_that_will_not_give_a_needed_fact_it_was_asked_for_is_the_simulator_s_fault(
        exported: Path, tmp_path: Path) -> None:
    log = eval_export(exported, agent_under_test(), 1, tmp_path / "logs", {"user": stubborn_user_provider()})
    score = by_id(log)[CONVERSATION["id"]].scores["baton_scorer"]
    assert score.value == 0.0 and score.metadata["conversation"]["ended"] == "user"
    # It refuses the order id and ends the conversation on the ask.
    assert score.metadata["simulator_fault"] == ("stopped in the user's turn 2 while the agent was asking for "
                                                 "order_id, which the user holds")
    assert metrics(log)["simulator_faults"] == 1


def test_baton_try_runs_a_conversational_sample_and_keeps_the_simulator_s_faults_apart(talking: Path) -> None:
    result = baton(talking.parent, "try", "refund_desk", "--epochs", "2")
    assert result.exit_code == 0, result.output
    tryout = json.loads((talking / "execution_outputs" / "iteration_2" / "tryout.json").read_text())
    assert tryout["user"] == "scripted" and tryout["simulator_faults"] == 0
    talk = next(s for s in tryout["samples"] if s["id"] == CONVERSATION["id"])
    # Inspect's mock answers every turn with the same text: it never asks, the user never tells, nothing happens.
    assert talk["trials"] == 2 and talk["passes"] == 0 and set(talk["pass_hat"]) == {"1", "2"}
    from inspect_ai.log import read_eval_log

    log = read_eval_log(tryout["log"])
    talks = [s for s in log.samples if s.id == CONVERSATION["id"]]
    assert len(talks) == 2 and all(sum(m.role == "user" for m in s.messages) == 4 for s in talks)


def test_baton_try_takes_the_user_simulator_by_its_option(talking: Path) -> None:
    result = baton(talking.parent, "try", "refund_desk", "--epochs", "1", "--user", leaky_user_provider(),
                   BATON_INSPECT_PROVIDERS=PROVIDERS)
    assert result.exit_code == 0, result.output
    tryout = json.loads((talking / "execution_outputs" / "iteration_2" / "tryout.json").read_text())
    assert tryout["user"] != "scripted" and tryout["simulator_faults"] == 1


def test_a_tryout_with_a_user_model_counts_its_faults_apart_from_the_agent_s_trials(talking: Path) -> None:
    from agents.scenario_facts import scenario_facts
    from proving.export.tryout import run_tryout

    # Inspect's mock never asks for anything, and the leaky user volunteers the order id at its first reply.
    with startup.started_with({"BATON_INSPECT_PROVIDERS": PROVIDERS}):
        tryout = run_tryout(talking, scenario_facts(talking), "mockllm/model", 2, user=leaky_user_provider())
    talk = next(s for s in tryout.samples if s.id == CONVERSATION["id"])
    assert talk.trials == 0 and talk.pass_hat == {} and len(talk.simulator_faults) == 2
    assert all(f.startswith("leaked order_id ('O1001') in the user's turn 2") for f in talk.simulator_faults)
    assert tryout.user == "leaky_user/ana" and tryout.simulator_faults == 2
    assert "2 trial(s) spoiled by the user simulator (leaky_user/ana), not counted" in tryout.summary()
    kept = next(s for s in tryout.samples if s.id == KEPT)
    assert kept.trials == 2 and tryout.pass_rate == kept.pass_rate  # the agent's figure: its judged samples only
    on_disk = json.loads((talking / "execution_outputs" / "iteration_2" / "tryout.json").read_text())
    assert on_disk["simulator_faults"] == 2 and on_disk["user"] == "leaky_user/ana"


def test_a_user_model_inspect_cannot_make_stops_the_tryout_saying_it_is_the_user_s(
        talking: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.scenario_facts import scenario_facts
    from proving.export.tryout import TryoutError, run_tryout

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(TryoutError) as caught, startup.started_with({"ANTHROPIC_API_KEY": None}):
        run_tryout(talking, scenario_facts(talking), "mockllm/model", 1, user="anthropic/claude-sonnet-4-5")
    said = str(caught.value)
    assert said.startswith("Inspect cannot use the user simulator anthropic/claude-sonnet-4-5 (-T user=): ")
    assert "No ANTHROPIC_API_KEY defined in the environment" in said and "the scripted user" in said
    assert "mockllm" not in said and "ERROR" not in said


def test_inspect_eval_runs_the_conversation_from_the_command_line(exported: Path, tmp_path: Path) -> None:
    """`inspect eval task.py --model mockllm/model -T user=scripted`, as a user types it, offline."""
    logs = tmp_path / "logs"
    env = {**os.environ, "INSPECT_LOG_DIR": str(logs)}
    done = subprocess.run([str(Path(sys.executable).with_name("inspect")), "eval", f"{exported.name}/task.py",
                           "--model", "mockllm/model", "-T", "user=scripted"],
                          cwd=exported.parent, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    from inspect_ai.log import read_eval_log

    (path,) = logs.glob("*.eval")
    log = read_eval_log(str(path))
    talk = by_id(log)[CONVERSATION["id"]]
    assert log.status == "success" and log.eval.task_args.get("user") == "scripted"
    assert [role for role, _ in said(talk)] == ["user", "assistant"] * 4
    assert talk.scores["baton_scorer"].metadata["conversation"]["ended"] == "max_turns"

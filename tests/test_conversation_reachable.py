"""A conversational sample whose goal needs an identifier the user never gives is unsolvable (an L4 with the reason
the report carries back), however the replay went; one the user holds, or an earlier call gives, is reachable."""

from typing import Any

from proving.evaluation.child import ChildRun
from proving.evaluation.classify import classify
from proving.evaluation.models import CheckerVerdict, ChildProgress, ChildResult, Sample
from proving.evaluation.reachable import unreachable

USER = {"persona": "a hurried customer", "goal": "a refund for the broken kettle",
        "facts": {"email": "ann@example.com"},
        "withheld": [], "stop_when": ["refunded"]}


def sample(user: dict[str, Any] | None = USER, instruction: str = "My kettle arrived broken; refund it please.",
           order: str = "O1001") -> Sample:
    return Sample.model_validate({
        "id": "s90", "instruction": instruction,
        "actions": [{"tool": "list_orders", "args": {"email": "ann@example.com"}},
                    {"tool": "issue_refund", "args": {"order_id": order, "reason": "arrived broken"}}],
        **({"user": user} if user else {}),
    })


def replayed(outputs: list[Any]) -> ChildRun:
    checked = [CheckerVerdict(checker="check_policy.check_refund", passed=True)]  # every checker accepts it
    return ChildRun(result=ChildResult(completed=True, phase="done", outputs=outputs, final_data={}, checkers=checked),
                    progress=ChildProgress(), returncode=0, timed_out=False)


LISTED = [{"orders": [{"order_id": "O1001", "item": "kettle"}]}, {"refunded": True}]


def test_an_identifier_an_earlier_call_or_the_user_gives_is_reachable():
    assert unreachable(sample(), LISTED) is None  # the email is the user's fact; the order id, list_orders' output
    verdict = classify(sample(), replayed(LISTED), timeout_s=10, memory_mb=512)
    assert verdict.layer is None, verdict.reason


def test_an_identifier_nothing_gives_makes_the_sample_unsolvable():
    # The user holds no email and says none in the opening: no agent can list the orders, so none can refund.
    user = {**USER, "facts": {"name": "Ann Lee"}}
    verdict = classify(sample(user), replayed(LISTED), timeout_s=10, memory_mb=512)
    assert verdict.layer == "L4" and verdict.reason.startswith("unsolvable: action 0 (list_orders) needs email")
    assert "the user never gives it" in verdict.reason


def test_an_order_no_output_shows_is_unsolvable_even_when_the_replay_passes():
    verdict = classify(sample(order="O2002"), replayed(LISTED), timeout_s=10, memory_mb=512)
    assert verdict.layer == "L4" and "order_id = 'O2002'" in verdict.reason


def test_a_single_instruction_sample_is_not_checked_for_it():
    assert unreachable(sample(user=None, order="O2002"), LISTED) is None


def test_free_text_and_the_opening_are_not_required_of_the_user():
    said = sample(instruction="Refund order O2002, it arrived broken.", order="O2002")
    assert unreachable(said, LISTED) is None  # the opening names it; the reason is the agent's own words

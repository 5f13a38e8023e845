"""What the simulated Init writes as design/policy.py for the refund desk (a part of refund_desk.py): each business
rule also as a predicate over the data and one call (docs/proving.md, "Executable policy")."""

from __future__ import annotations


def policy_py() -> str:
    """design/policy.py: each rule also as a predicate over the data and one call (docs/proving.md, "Executable
    policy"). R3 is read before R2, as the design's samples read it (R8 says so in words from iteration 2)."""
    return '''"""Refund desk: the business rules as predicates. decide(data, tool, args) is None when the policy allows
the call on that data, else the id of the rule that denies it."""

from datetime import date

ESCALATION_LIMIT = 500.0
# What the tools themselves refuse: a second refund of an order (issue_refund answers already_refunded).
TOOLS_ENFORCE = {"R6"}


def _total(order):
    return round(sum(item["price"] for item in order["items"]), 2)


def _days(data, order):
    return (date.fromisoformat(data["today"]) - date.fromisoformat(order["delivered_on"])).days


def _window(data, order):
    return 60 if data["customers"][order["customer_id"]]["tier"] == "vip" else 30


def refund_rule(data, order, amount):
    """The rule that denies refunding ``amount`` for ``order``, or None."""
    if order["status"] == "refunded":
        return "R6"
    if order["delivered_on"] is None:
        return "R1"
    damaged = bool(order.get("damage_report"))
    if not damaged and any(item["final_sale"] for item in order["items"]):
        return "R2"
    if not damaged and _days(data, order) > _window(data, order):
        return "R5" if _window(data, order) == 60 else "R1"
    if amount > ESCALATION_LIMIT:
        return "R4"
    return None


def credit_rule(data, customer_id, amount):
    """R7: store credit only for an order past its window by at most 14 days, for what was paid."""
    for order in data["orders"].values():
        if order["customer_id"] != customer_id or order["status"] != "delivered" or order["delivered_on"] is None:
            continue
        over = _days(data, order) - _window(data, order)
        if 0 < over <= 14 and abs(_total(order) - float(amount)) < 0.005:
            return None
    return "R7"


def decide(data, tool, args):
    order = data["orders"].get(args.get("order_id"))
    if tool == "issue_refund" and order is not None:
        return refund_rule(data, order, float(args.get("amount", 0)))
    if tool == "issue_store_credit" and args.get("customer_id") in data["customers"]:
        return credit_rule(data, args["customer_id"], args.get("amount", 0))
    if tool == "escalate" and order is not None:
        return None if refund_rule(data, order, _total(order)) == "R4" else "R4"
    if tool == "record_refusal" and order is not None:
        # a refusal is allowed only where the rule it names refuses the refund; else the rule that decides denies it
        deciding = refund_rule(data, order, _total(order)) or grant_rule(data, order)
        return None if deciding == args.get("rule") else deciding
    return None


def grant_rule(data, order):
    """The rule that grants a refund the policy allows."""
    if order.get("damage_report"):
        return "R3"
    return "R5" if _window(data, order) == 60 else "R1"
'''

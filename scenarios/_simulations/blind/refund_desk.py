"""The simulated model's BLIND solver script for the refund-desk example (proving/evaluation/blind.py plays it).

Where ``scenarios/_simulations/refund_desk.py`` plays Init and Execute (and so knows the samples), this file
plays the model under test of the exported task, and knows only what that model is shown: the policy (the
system message), the tools, the sample's instruction and the results of its own calls. It never sees a
sample's expected actions, the checkers or the design notes. What it knows is how to read the refund desk's
policy and apply it to one order, the way a careful agent would:

- the order id must be in what the user said (``O1234``); without one it asks which order (the order number)
  and does nothing, and in a conversation the user's answer gives it;
- it looks the order up (and the customer, when the refund window depends on the tier), then decides by the
  rules it finds in the policy (the windows, the grace period for store credit, the escalation limit and, when
  a damaged item is also final sale, only a precedence the policy states; with none it does not guess);
- it stops once it has acted; a refusal is recorded with the tool the policy names for it (``- refuse:
  record_refusal(order_id, rule, note)``), or made by not acting when the policy names none.

So it solves the samples whose instruction names their order and whose expected outcome the policy implies,
and fails the rest: an instruction that lacks its order, an expected outcome the policy contradicts, a policy
that leaves the sample ambiguous. The numbers come from the policy's text; a policy it cannot read them from
is one it does not know, and it answers without acting.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

TOOLS = frozenset({"get_order", "get_customer", "issue_refund", "issue_store_credit", "escalate"})
LOOKING = re.compile(r"^(get|list)_")
ORDER = re.compile(r"\bO\d{3,}\b")
TODAY = re.compile(r"^- today: (\d{4}-\d{2}-\d{2})\s*$", re.MULTILINE)
WINDOW = re.compile(r"refund is allowed within (\d+) days", re.IGNORECASE)
VIP_WINDOW = re.compile(r"VIP customers have a (\d+)-day refund window", re.IGNORECASE)
GRACE = re.compile(r"store credit .*? for up to (\d+) more days", re.IGNORECASE)
LIMIT = re.compile(r"refund above \$(\d+(?:\.\d+)?) is escalated", re.IGNORECASE)
DAMAGED_WINS = re.compile(r"R2 and R3 both apply[^.]*?R3 wins", re.IGNORECASE)
RECORD_REFUSAL = re.compile(r"^- refuse: (\w+)\(order_id, rule, note\)", re.MULTILINE)  # else: refuse by not acting

# What the solver says once it has acted, in the words a person would use (a simulated user listens for them).
DONE = {"issue_refund": "order {} refunded", "issue_store_credit": "store credit issued to {}",
        "escalate": "order {} escalated to a supervisor", "record_refusal": "refusal for order {} recorded"}

Seen = list[tuple[str, dict[str, Any], Any]]  # (tool, arguments, parsed output or {"error": text})
Reply = tuple[str, list[tuple[str, dict[str, Any]]]]  # (text, tool calls); no calls: the final answer


def matches(policy: str, tools: set[str]) -> bool:
    """Whether this script plays the task: the refund desk's tools and a policy it can read its numbers from."""
    return TOOLS - {"get_customer"} <= tools and _rules(policy) is not None


def decide(policy: str, instruction: str, seen: Seen) -> Reply:
    rules = _rules(policy)
    if rules is None:
        return "I cannot read the rules I would need from this policy, so I take no action.", []
    acted = [(tool, args) for tool, args, _ in seen if not LOOKING.match(tool)]
    if acted:
        return "Done: " + "; ".join(DONE.get(tool, f"{tool} for {{}}").format(args.get("order_id") or
                                                                           args.get("customer_id"))
                                    for tool, args in acted) + ".", []
    orders = ORDER.findall(instruction)
    if not orders:
        return "Which order is this about? I need the order number before I can do anything.", []
    order_id = orders[0]
    order = _output(seen, "get_order", order_id=order_id)
    if order is None:
        return f"Let me look up order {order_id}.", [("get_order", {"order_id": order_id})]
    if not isinstance(order, dict) or "error" in order or "customer_id" not in order:
        return f"I could not find order {order_id}, so I cannot act on it.", []
    return _apply(rules, order, seen)


def _apply(rules: dict[str, Any], order: dict[str, Any], seen: Seen) -> Reply:
    order_id, total = order["order_id"], float(order.get("total", 0.0))
    if order.get("status") == "refunded":
        return _refuse(rules, order_id, "R6", f"Order {order_id} was already refunded (R6): no second refund.")
    if order.get("damaged") and order.get("final_sale") and not rules["damaged_wins"]:
        return (f"Order {order_id} is both damaged and final sale, and the policy does not say which rule wins; "
                "I will not guess.", [])
    if order.get("damaged"):
        return _refund(rules, order_id, total, "R3: damaged on arrival")
    if order.get("final_sale"):
        return _refuse(rules, order_id, "R2", f"Order {order_id} is final sale (R2): it cannot be refunded.")
    if not order.get("delivered_on"):
        return f"Order {order_id} has not been delivered yet, so there is nothing to refund.", []
    customer = _output(seen, "get_customer", customer_id=order["customer_id"])
    if customer is None:
        return "Let me check the customer's tier.", [("get_customer", {"customer_id": order["customer_id"]})]
    vip = isinstance(customer, dict) and customer.get("tier") == "vip"
    window = rules["vip_window"] if vip else rules["window"]
    days = (rules["today"] - date.fromisoformat(order["delivered_on"])).days
    if days <= window:
        return _refund(rules, order_id, total, f"within the {window}-day window")
    if days <= window + rules["grace"]:
        return (f"The {window}-day window has passed; store credit instead (R7).",
                [("issue_store_credit", {"customer_id": order["customer_id"], "amount": total,
                                         "reason": f"R7: {days - window} day(s) after the window"})])
    return _refuse(rules, order_id, "R7", f"Order {order_id} was delivered {days} days ago, past the window and the "
                                          "store-credit period (R1, R7).")


def _refuse(rules: dict[str, Any], order_id: str, rule: str, why: str) -> Reply:
    """A refusal as the policy says to make one: with the tool it names, else by not acting."""
    if rules["refusal_tool"] is None:
        return why, []
    return why, [(rules["refusal_tool"], {"order_id": order_id, "rule": rule, "note": why})]


def _refund(rules: dict[str, Any], order_id: str, total: float, why: str) -> Reply:
    if total > rules["limit"]:
        return (f"A refund of {total:.2f} is above ${rules['limit']:.0f}: escalating (R4).",
                [("escalate", {"order_id": order_id, "note": f"refund of {total:.2f} ({why}) above the limit"})])
    return f"Refunding {total:.2f} ({why}).", [("issue_refund", {"order_id": order_id, "amount": total,
                                                                  "reason": why})]


def _output(seen: Seen, tool: str, **args: Any) -> Any:
    """The output of the last call of ``tool`` with ``args``, None when it was not called."""
    found = None
    for name, called, output in seen:
        if name == tool and all(called.get(k) == v for k, v in args.items()):
            found = output
    return found


def _rules(policy: str) -> dict[str, Any] | None:
    found = {name: pattern.search(policy) for name, pattern in
             (("today", TODAY), ("window", WINDOW), ("vip_window", VIP_WINDOW), ("grace", GRACE), ("limit", LIMIT))}
    if not all(found.values()):
        return None
    return {"today": date.fromisoformat(found["today"].group(1)), "window": int(found["window"].group(1)),  # type: ignore[union-attr]
            "vip_window": int(found["vip_window"].group(1)), "grace": int(found["grace"].group(1)),  # type: ignore[union-attr]
            "limit": float(found["limit"].group(1)), "damaged_wins": bool(DAMAGED_WINS.search(policy)),  # type: ignore[union-attr]
            "refusal_tool": (m.group(1) if (m := RECORD_REFUSAL.search(policy)) else None)}

"""What the agents write in the refund-desk example: its data, Init's documents, Execute's tools, checker and
samples. A part of the simulated model's script ``refund_desk.py`` (loaded with ``agents.simulated.load_part``),
which decides when each is written; this module only says what each holds, for a design with or without rule R8
(precedence) and with or without recorded refusals (a refusal recorded by ``record_refusal``, with its rule).

Iteration 1's versions hold the deliberate mistakes the script's docstring lists; they, and iteration 1's
refusals that change nothing (a do-nothing agent passes them), are what the evaluation and the gates find.
"""

from __future__ import annotations

import json
from typing import Any

# ---- the data -----------------------------------------------------------------------
TODAY = "2026-03-15"

RULES_V1 = [
    "R1: A refund is allowed within 30 days of delivery (day 30 included).",
    "R2: Final-sale items are never refunded.",
    "R3: Items reported damaged on arrival are always refunded in full.",
    "R4: A refund above $500 is escalated to a supervisor instead of issued.",
    "R5: VIP customers have a 60-day refund window instead of 30.",
    "R6: An order that was already refunded cannot be refunded again.",
    "R7: After the refund window, store credit for the amount paid may be issued for up to 14 more days.",
]
RULE_IDS = [f"R{n}" for n in range(1, 9)]
RULE_R8 = (
    "R8: Precedence. R6 is checked first. When R2 and R3 both apply (a damaged final-sale item), "
    "R3 wins: the item is refunded in full. R4 applies to every refund, including R3 refunds."
)

_CUSTOMERS = {
    "C1": {"name": "Ana Silva", "tier": "standard", "email": "ana@example.com"},
    "C2": {"name": "Ben Okafor", "tier": "vip", "email": "ben@example.com"},
    "C3": {"name": "Chloe Martin", "tier": "standard", "email": "chloe@example.com"},
    "C4": {"name": "Dev Patel", "tier": "standard", "email": "dev@example.com"},
    "C5": {"name": "Eli Novak", "tier": "standard", "email": "eli@example.com"},
}


def _item(name: str, price: float, category: str, final_sale: bool = False) -> dict[str, Any]:
    return {"name": name, "price": price, "category": category, "final_sale": final_sale}


def _order(customer: str, status: str, delivered: str | None, items: list[dict[str, Any]],
           damage: str | None = None) -> dict[str, Any]:
    return {"customer_id": customer, "status": status, "delivered_on": delivered, "items": items,
            "damage_report": damage}


_ORDERS = {
    "O1001": _order("C1", "delivered", "2026-02-13", [_item("Blender", 89.0, "kitchen")]),
    "O1002": _order("C1", "delivered", "2026-03-10", [_item("Silk dress", 59.0, "clothing", True)]),
    "O1003": _order("C3", "delivered", "2026-01-20", [_item("Kettle", 45.0, "kitchen")],
                    "Kettle arrived with a cracked lid"),
    "O1004": _order("C4", "delivered", "2026-03-05",
                    [_item("Laptop", 1299.0, "electronics"), _item("Laptop sleeve", 49.0, "electronics")]),
    "O1005": _order("C2", "delivered", "2026-01-29", [_item("Headphones", 79.0, "electronics")]),
    "O1006": _order("C5", "refunded", "2026-02-25", [_item("Rain jacket", 120.0, "clothing")]),
    "O1007": _order("C3", "delivered", "2026-02-05", [_item("Desk lamp", 64.0, "home")]),
    "O1008": _order("C4", "delivered", "2026-03-01", [_item("Espresso machine", 500.0, "kitchen")]),
    "O1009": _order("C1", "delivered", "2026-03-08", [_item("Glass vase", 150.0, "home", True)],
                    "Vase arrived shattered"),
    "O1010": _order("C2", "delivered", "2026-02-20", [_item("Watch", 240.0, "accessories", True)],
                    "Watch face scratched on arrival"),
    "O1011": _order("C5", "delivered", "2026-01-01", [_item("Yoga mat", 35.0, "sports")]),
    "O1012": _order("C3", "shipped", None, [_item("Bookshelf", 180.0, "home")]),
}


def data_json(rules: list[str] | None = None) -> str:
    """The initial data; with ``rules`` (the design's rule ids) also the refusals list record_refusal fills."""
    data: dict[str, Any] = {"today": TODAY, "customers": _CUSTOMERS, "orders": _ORDERS, "refunds": [], "credits": [],
                            "escalations": []}
    if rules is not None:  # the rule ids are data, so a refusal's rule is checked, not taken for free text
        data.update(refusals=[], rules=rules)
    return json.dumps(data, indent=2) + "\n"


# ---- Init's documents ---------------------------------------------------------------


def scenario_design() -> str:
    rows = "\n".join(
        f"| {oid} | {o['customer_id']} | {o['status']} | {o['delivered_on'] or '-'} | "
        f"{', '.join(i['name'] for i in o['items'])} | {sum(i['price'] for i in o['items']):.2f} | "
        f"{'yes' if any(i['final_sale'] for i in o['items']) else 'no'} | {'yes' if o['damage_report'] else 'no'} |"
        for oid, o in _ORDERS.items()
    )
    customers = "\n".join(f"| {cid} | {c['name']} | {c['tier']} |" for cid, c in _CUSTOMERS.items())
    return f"""# Refund desk: scenario design

## Purpose
Evaluate a customer-support agent that handles refund requests for an online shop.
The agent looks up the customer and the order, decides what the refund policy
(design/business_rules.md) allows, and then issues a refund, issues store credit,
escalates to a supervisor, or refuses with an explanation. The evaluation checks
that the agent follows the policy exactly: no refund that should not be given, no
customer turned away who is entitled to one.

## Tools of the agent under test
- get_customer(customer_id): profile with name, tier (standard or vip).
- get_order(order_id): items, status, delivery date, damage report, total, final_sale, damaged.
- list_orders(customer_id): the ids of the customer's orders.
- issue_refund(order_id, amount, reason): refund to the original payment method; marks the order refunded.
- issue_store_credit(customer_id, amount, reason): adds credit to the customer's balance.
- escalate(order_id, note): hands the case to a supervisor.

Refusals are returned as data ({{"error": "..."}}), never raised.

## Data
"Today" is fixed at {TODAY} (data key `today`). Days since delivery are counted
as calendar days between `delivered_on` and `today`.

| customer | name | tier |
|---|---|---|
{customers}

| order | customer | status | delivered | items | total | final sale | damaged |
|---|---|---|---|---|---|---|---|
{rows}

## Samples
Ten samples, one file each, covering every rule, with allowed and refused cases:
a day-30 boundary refund (R1), a final-sale refusal (R2), a damaged item outside
the window (R3), an order over $500 (R4), a VIP at day 45 (R5), an order already
refunded (R6), store credit at day 38 (R7), exactly $500 (R4 boundary), and two
damaged final-sale items (R2 and R3 together).

Three of them are conversations (s03, s04, s07): the customer's first message
does not give the order number, the customer gives it when the agent asks for
it, and the agent must ask, since nothing else says which order it is.

## Changelog
- iteration 1: first design.
"""


REFUSE_UNRECORDED = "- refuse: no state-changing call; explain which rule applies."
# Iteration 2's answer to "a do-nothing agent passes the refusals": every refusal leaves a record naming its rule.
REFUSE_RECORDED = ("- refuse: record_refusal(order_id, rule, note), naming the rule that refuses; every refusal is "
                   "recorded, and nothing else changes.")
RECORD_TOOL_LINE = "- record_refusal(order_id, rule, note): records a refusal and the rule (id) that decides it.\n"
ESCALATE_TOOL_LINE = "- escalate(order_id, note): hands the case to a supervisor.\n"


def business_rules(with_precedence: bool, recorded: bool = False) -> str:
    rules = RULES_V1 + ([RULE_R8] if with_precedence else [])
    body = "\n".join(f"- {r}" for r in rules)
    return f"""# Refund desk: business rules

The agent under test must apply these rules. Amounts are what the customer paid
for the items returned (the order total when the whole order is returned).

{body}

## Decisions
- refund: issue_refund(order_id, total, reason).
- store credit: issue_store_credit(customer_id, total, reason).
- escalate: escalate(order_id, note) and no refund.
{REFUSE_RECORDED if recorded else REFUSE_UNRECORDED}
"""


def format_spec(recorded: bool = False) -> str:
    if recorded:
        return _format_spec().replace(_FORMAT_V1_DATA, _FORMAT_V2_DATA).replace(_FORMAT_V1_RESULTS, _FORMAT_V2_RESULTS)
    return _format_spec()


_FORMAT_V1_DATA = "`refunds`, `credits`, `escalations` that the state-changing tools append to."
_FORMAT_V2_DATA = ("`refunds`, `credits`, `escalations`, `refusals` that the state-changing tools append to, and\n"
                   "`rules`, the rule ids of design/business_rules.md.")
_FORMAT_V1_RESULTS = 'escalate -> {"status": "escalated", "escalation_id", "order_id"}.'
_FORMAT_V2_RESULTS = (_FORMAT_V1_RESULTS + '\nrecord_refusal -> {"status": "refused", "refusal_id", "order_id", '
                      '"rule", "note"}; a rule not in `rules` is refused with unknown_rule.')


def _format_spec() -> str:
    return """# Refund desk: format specification

## tools/tools.py
Public functions `name(data, **args) -> dict`, one per tool of the design.
`data` holds `today`, `customers` (by id), `orders` (by id), and the lists
`refunds`, `credits`, `escalations` that the state-changing tools append to.
Successful results: issue_refund -> {"status": "refunded", "refund_id", "order_id", "amount"};
issue_store_credit -> {"status": "credited", "credit_id", "customer_id", "amount", "balance"};
escalate -> {"status": "escalated", "escalation_id", "order_id"}.
Refusals: {"error": "<code>", ...} with codes order_not_found, customer_not_found,
already_refunded, invalid_amount.

## checkers/
`check_policy(sample, outcome)` decides from the rules (by id) which decision the
order called for and compares it with what the outcome did (new refunds, credits,
escalations) and the amount.

## samples/<id>.json
{"id", "instruction", "actions": [{"tool", "args"}], "expected_outputs": [...],
 "expected_state": {"orders.<id>.status": ...}, "rules": ["R1", ...]}

## Conversational samples (s03, s04, s07)
These add a "user" part; "instruction" is the customer's first message and
never holds the order number. "user": {"persona", "goal", "facts":
{"order_id": ..., "customer_id": ...}, "withheld": ["order_id"], "asked_by":
{"order_id": ["order number"]}, "stop_when": [what the agent says once it
has acted], "max_turns": 6}. The customer gives the order number
only when asked; the expected actions are unchanged.
"""


# ---- Execute's code -----------------------------------------------------------------
# In the templates below, a backslash at a line's end joins it with the next: the source stays
# within 120 columns and the code written keeps its long lines.

_CREDIT_BUG = 'customer["store_credit"] + amount'
_CREDIT_FIX = 'customer.get("store_credit", 0.0) + amount'


_RECORD_REFUSAL = '''

def record_refusal(data, order_id, rule, note):
    if order_id not in data["orders"]:
        return {"error": "order_not_found", "order_id": order_id}
    if rule not in data["rules"]:
        return {"error": "unknown_rule", "rule": rule, "rules": data["rules"]}
    refusal = {"refusal_id": f"RX-{len(data['refusals']) + 1:03d}", "order_id": order_id, "rule": rule, "note": note}
    data["refusals"].append(refusal)
    return {"status": "refused", **refusal}
'''


def tools_py(buggy: bool, recorded: bool = False) -> str:
    credit = _CREDIT_BUG if buggy else _CREDIT_FIX
    return _tools_py(credit) + (_RECORD_REFUSAL if recorded else "")


def _tools_py(credit: str) -> str:
    return f'''"""Refund desk tools. Each takes the scenario data first; refusals are data, not exceptions."""


def _total(order):
    return round(sum(item["price"] for item in order["items"]), 2)


def get_customer(data, customer_id):
    customer = data["customers"].get(customer_id)
    if customer is None:
        return {{"error": "customer_not_found", "customer_id": customer_id}}
    return {{"customer_id": customer_id, **customer}}


def get_order(data, order_id):
    order = data["orders"].get(order_id)
    if order is None:
        return {{"error": "order_not_found", "order_id": order_id}}
    return {{
        "order_id": order_id,
        **order,
        "total": _total(order),
        "final_sale": any(item["final_sale"] for item in order["items"]),
        "damaged": bool(order.get("damage_report")),
    }}


def list_orders(data, customer_id):
    if customer_id not in data["customers"]:
        return {{"error": "customer_not_found", "customer_id": customer_id}}
    orders = sorted(oid for oid, o in data["orders"].items() if o["customer_id"] == customer_id)
    return {{"customer_id": customer_id, "orders": orders}}


def issue_refund(data, order_id, amount, reason):
    order = data["orders"].get(order_id)
    if order is None:
        return {{"error": "order_not_found", "order_id": order_id}}
    if order["status"] == "refunded":
        return {{"error": "already_refunded", "order_id": order_id}}
    amount = round(float(amount), 2)
    if amount <= 0 or amount > _total(order):
        return {{"error": "invalid_amount", "order_id": order_id, "amount": amount}}
    order["status"] = "refunded"
    refund = {{"refund_id": f"RF-{{len(data['refunds']) + 1:03d}}", "order_id": order_id, \
"amount": amount, "reason": reason}}
    data["refunds"].append(refund)
    return {{"status": "refunded", **refund}}


def issue_store_credit(data, customer_id, amount, reason):
    customer = data["customers"].get(customer_id)
    if customer is None:
        return {{"error": "customer_not_found", "customer_id": customer_id}}
    amount = round(float(amount), 2)
    customer["store_credit"] = round({credit}, 2)
    credit = {{"credit_id": f"SC-{{len(data['credits']) + 1:03d}}", "customer_id": customer_id, \
"amount": amount, "reason": reason}}
    data["credits"].append(credit)
    return {{"status": "credited", **credit, "balance": customer["store_credit"]}}


def escalate(data, order_id, note):
    if order_id not in data["orders"]:
        return {{"error": "order_not_found", "order_id": order_id}}
    escalation = {{"escalation_id": f"ES-{{len(data['escalations']) + 1:03d}}", "order_id": order_id, "note": note}}
    data["escalations"].append(escalation)
    return {{"status": "escalated", **escalation}}
'''


_LIMIT_BUG = "if amount >= ESCALATION_LIMIT:"
_LIMIT_FIX = "if amount > ESCALATION_LIMIT:"


def checker_py(buggy: bool, precedence: bool, recorded: bool = False) -> str:
    limit = _LIMIT_BUG if buggy else _LIMIT_FIX
    code = _checker_py(limit, precedence)
    if not recorded:
        return code
    for old, new in _RECORDED_CHECKER:
        assert old in code, old
        code = code.replace(old, new)
    return code


# How the checker changes when refusals are recorded: a refusal is a record citing the rule, and "nothing
# happened" is an outcome of its own that no decision calls for.
_RECORDED_CHECKER = [
    ('return "refuse", 0.0, "R1/R7"', 'return "refuse", 0.0, "R7"'),
    ('    escalations = [e for e in new("escalations") if e["order_id"] == order_id]\n',
     '    escalations = [e for e in new("escalations") if e["order_id"] == order_id]\n'
     '    refusals = [r for r in new("refusals") if r["order_id"] == order_id]\n'
     '    if refusals and not (refunds or credits or escalations):\n'
     '        return "refuse", 0.0\n'),
    ('    return ("refuse", 0.0) if not (refunds or credits or escalations) else ("mixed", 0.0)\n',
     '    if not (refunds or credits or escalations or refusals):\n'
     '        return "nothing recorded", 0.0\n'
     '    return "mixed", 0.0\n'),
    ('    return {"passed": True, "reason": f"{rule}: {decision} as the rules require"}',
     '    refusals = outcome["final_data"]["refusals"][len(data["refusals"]):]\n'
     '    cited = sorted({r["rule"] for r in refusals if r["order_id"] == order_id})\n'
     '    if decision == "refuse" and cited != [rule]:\n'
     '        reason = f"{rule}: order {order_id} was refused citing {cited}, the rules say {rule}"\n'
     '        return {"passed": False, "reason": reason}\n'
     '    return {"passed": True, "reason": f"{rule}: {decision} as the rules require"}'),
]


def _checker_py(limit: str, precedence: bool) -> str:
    return f'''"""Refund desk policy checker: which decision did the rules call for, and was it taken?"""

from datetime import date

from baton_eval import DesignIssue

ESCALATION_LIMIT = 500.0
# R8 (precedence of R3 over R2) exists in the design: {precedence}
DAMAGE_OVERRIDES_FINAL_SALE = {precedence}


def _order_id(sample):
    for action in sample.get("actions", []):
        if "order_id" in action.get("args", {{}}):
            return action["args"]["order_id"]
    return None


def _decision(data, order_id):
    """(decision, amount, rule) the business rules call for."""
    order = data["orders"][order_id]
    customer = data["customers"][order["customer_id"]]
    total = round(sum(item["price"] for item in order["items"]), 2)
    if order["status"] == "refunded":
        return "refuse", 0.0, "R6"
    if order["delivered_on"] is None:
        return "refuse", 0.0, "not delivered"
    damaged = bool(order.get("damage_report"))
    final_sale = any(item["final_sale"] for item in order["items"])
    if damaged and final_sale and not DAMAGE_OVERRIDES_FINAL_SALE:
        raise DesignIssue(
            f"R2 (final-sale items are never refunded) and R3 (damaged items are always refunded in full) "
            f"both apply to order {{order_id}}, and the design gives no precedence between them"
        )
    if damaged:
        decision, rule = "refund", "R3"
    elif final_sale:
        return "refuse", 0.0, "R2"
    else:
        days = (date.fromisoformat(data["today"]) - date.fromisoformat(order["delivered_on"])).days
        window = 60 if customer["tier"] == "vip" else 30
        if days <= window:
            decision, rule = "refund", "R5" if window == 60 else "R1"
        elif days <= window + 14:
            return "store_credit", total, "R7"
        else:
            return "refuse", 0.0, "R1/R7"
    amount = total
    {limit}
        return "escalate", amount, "R4"
    return decision, amount, rule


def _taken(outcome, order_id, customer_id):
    before, after = outcome["initial_data"], outcome["final_data"]
    new = lambda key: after[key][len(before[key]):]  # noqa: E731
    refunds = [r for r in new("refunds") if r["order_id"] == order_id]
    credits = [c for c in new("credits") if c["customer_id"] == customer_id]
    escalations = [e for e in new("escalations") if e["order_id"] == order_id]
    if escalations and not refunds:
        return "escalate", 0.0
    if refunds and not credits:
        return "refund", round(sum(r["amount"] for r in refunds), 2)
    if credits and not refunds:
        return "store_credit", round(sum(c["amount"] for c in credits), 2)
    return ("refuse", 0.0) if not (refunds or credits or escalations) else ("mixed", 0.0)


def check_policy(sample, outcome):
    order_id = _order_id(sample)
    data = outcome["initial_data"]
    if order_id is None or order_id not in data["orders"]:
        return {{"passed": True, "reason": "not applicable: no known order in the sample"}}
    decision, amount, rule = _decision(data, order_id)
    taken, paid = _taken(outcome, order_id, data["orders"][order_id]["customer_id"])
    if taken != decision:
        return {{"passed": False, "reason": f"{{rule}}: order {{order_id}} called for {{decision}}, \
the outcome was {{taken}}"}}
    if decision in ("refund", "store_credit") and abs(paid - amount) > 0.005:
        return {{"passed": False, "reason": f"{{rule}}: {{decision}} of {{paid}} for order {{order_id}}, \
the rules give {{amount}}"}}
    return {{"passed": True, "reason": f"{{rule}}: {{decision}} as the rules require"}}
'''


# ---- samples ------------------------------------------------------------------------

_WRONG_AMOUNT, _RIGHT_AMOUNT = 89.0, 79.0


def _act(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


def _refusal(order_id: str, rule: str, note: str, looked_up: dict[str, Any], status: str) -> dict[str, Any]:
    """A refusal sample's expectation when refusals are recorded: the record, with its rule, is the outcome."""
    return {"actions": [_act("get_order", order_id=order_id), _act("record_refusal", order_id=order_id, rule=rule,
                                                                     note=note)],
            "expected_outputs": [looked_up, {"status": "refused", "order_id": order_id, "rule": rule}],
            "expected_state": {f"orders.{order_id}.status": status, "refusals.0.order_id": order_id,
                               "refusals.0.rule": rule}}


def samples(buggy: bool, recorded: bool = False, precedence: bool = False) -> list[dict[str, Any]]:
    """Execute's ten samples. ``recorded``: the design records refusals (record_refusal), so the two refusals
    expect the record and R6 is also cited where it lets a refund through; ``precedence``: R8 is cited where it
    decides (a damaged final-sale item)."""
    found = [_conversation(s) if s["id"] in _CONVERSATIONS else s for s in _samples(buggy)]
    if recorded:
        found[0]["rules"] = ["R1", "R6"]  # R6 considered and passed: O1001 was never refunded
        found[1].update(_refusal("O1002", "R2", "Final-sale items are never refunded (R2).", {"final_sale": True},
                                 "delivered"))
        found[5].update(_refusal("O1006", "R6", "This order was already refunded (R6).", {"status": "refunded"},
                                 "refunded"))
    if precedence:
        found[8]["rules"] = ["R2", "R3", "R8"]
        found[9]["rules"] = ["R2", "R3", "R5", "R8"]
    return found


def _samples(buggy: bool) -> list[dict[str, Any]]:
    vip_amount = _WRONG_AMOUNT if buggy else _RIGHT_AMOUNT
    refunded = {"status": "refunded"}
    return [
        {"id": "s01_day30_refund", "rules": ["R1"],
         "instruction": "Hi, I'm customer C1. My blender from order O1001 arrived 30 days ago "
                        "and I'd like my money back.",
         "actions": [_act("get_order", order_id="O1001"),
                     _act("issue_refund", order_id="O1001", amount=89.0, reason="R1: within 30 days")],
         "expected_outputs": [{"status": "delivered"}, {**refunded, "amount": 89.0}],
         "expected_state": {"orders.O1001.status": "refunded"}},
        {"id": "s02_final_sale_refused", "rules": ["R2"],
         "instruction": "Customer C1 here. I want to return the silk dress from order O1002.",
         "actions": [_act("get_order", order_id="O1002")],
         "expected_outputs": [{"final_sale": True}],
         "expected_state": {"orders.O1002.status": "delivered"}},
        {"id": "s03_damaged_outside_window", "rules": ["R3"],
         "instruction": "I'm C3. The kettle from order O1003 came with a cracked lid; I reported it when it arrived. "
                        "Refund please.",
         "actions": [_act("get_order", order_id="O1003"),
                     _act("issue_refund", order_id="O1003", amount=45.0, reason="R3: damaged on arrival")],
         "expected_outputs": [{"damaged": True}, {**refunded, "amount": 45.0}],
         "expected_state": {"orders.O1003.status": "refunded"}},
        {"id": "s04_over_500_escalated", "rules": ["R1", "R4"],
         "instruction": "This is C4. I'd like to return my laptop order O1004, it's not what I expected.",
         "actions": [_act("get_order", order_id="O1004"),
                     _act("escalate", order_id="O1004",
                          note="Refund of 1348.00 requested within 30 days; above $500 (R4)")],
         "expected_outputs": [{"total": 1348.0}, {"status": "escalated"}],
         "expected_state": {"orders.O1004.status": "delivered", "escalations.0.order_id": "O1004"}},
        {"id": "s05_vip_day45", "rules": ["R5"],
         "instruction": "Hello, Ben (C2) here. Can I still get a refund for the headphones in order O1005? "
                        "They arrived 45 days ago.",
         "actions": [_act("get_customer", customer_id="C2"), _act("get_order", order_id="O1005"),
                     _act("issue_refund", order_id="O1005", amount=79.0, reason="R5: VIP 60-day window")],
         "expected_outputs": [{"tier": "vip"}, {"total": 79.0}, {**refunded, "amount": vip_amount}],
         "expected_state": {"orders.O1005.status": "refunded"}},
        {"id": "s06_already_refunded", "rules": ["R6"],
         "instruction": "Eli, customer C5. Please refund my rain jacket, order O1006.",
         "actions": [_act("get_order", order_id="O1006")],
         "expected_outputs": [{"status": "refunded"}],
         "expected_state": {"orders.O1006.status": "refunded"}},
        {"id": "s07_store_credit_day38", "rules": ["R1", "R7"],
         "instruction": "I'm C3 and I'd like to return the desk lamp from order O1007. It came about five weeks ago.",
         "actions": [_act("get_order", order_id="O1007"),
                     _act("issue_store_credit", customer_id="C3", amount=64.0, reason="R7: window passed 8 days ago")],
         "expected_outputs": [{"status": "delivered"}, {"status": "credited", "amount": 64.0}],
         "expected_state": {"customers.C3.store_credit": 64.0}},
        {"id": "s08_exactly_500", "rules": ["R1", "R4"],
         "instruction": "C4 again: the espresso machine from order O1008 leaks. I want a refund.",
         "actions": [_act("get_order", order_id="O1008"),
                     _act("issue_refund", order_id="O1008", amount=500.0, reason="R1: within 30 days; not above $500")],
         "expected_outputs": [{"total": 500.0}, {**refunded, "amount": 500.0}],
         "expected_state": {"orders.O1008.status": "refunded"}},
        {"id": "s09_damaged_final_sale", "rules": ["R2", "R3"],
         "instruction": "C1 here. The glass vase in order O1009 arrived shattered, I reported it straight away. "
                        "It was a final-sale item. Refund?",
         "actions": [_act("get_order", order_id="O1009"),
                     _act("issue_refund", order_id="O1009", amount=150.0, reason="R3: damaged on arrival")],
         "expected_outputs": [{"damaged": True, "final_sale": True}, {**refunded, "amount": 150.0}],
         "expected_state": {"orders.O1009.status": "refunded"}},
        {"id": "s10_vip_damaged_final_sale", "rules": ["R2", "R3", "R5"],
         "instruction": "Ben (C2): the watch from order O1010 had a scratched face when it arrived. "
                        "It was on final sale. What can you do?",
         "actions": [_act("get_customer", customer_id="C2"), _act("get_order", order_id="O1010"),
                     _act("issue_refund", order_id="O1010", amount=240.0, reason="R3: damaged on arrival")],
         "expected_outputs": [{"tier": "vip"}, {"damaged": True}, {**refunded, "amount": 240.0}],
         "expected_state": {"orders.O1010.status": "refunded"}},
    ]


# The three conversations: the customer's opening without the order number, who the customer is, and what the
# agent says once it has acted (what ends the conversation).
_CONVERSATIONS = {
    "s03_damaged_outside_window": (
        "Hi, I'm C3. The kettle I ordered came with a cracked lid; I reported it when it arrived. Refund please.",
        "Chloe (C3), polite and brief.", "A full refund for the cracked kettle.", ["refunded"]),
    "s04_over_500_escalated": (
        "This is C4. I'd like to return my laptop order, it's not what I expected.",
        "Dev (C4), direct and in a hurry.", "Return the laptop order.", ["escalated"]),
    "s07_store_credit_day38": (
        "I'm C3 and I'd like to return the desk lamp I bought. It came about five weeks ago.",
        "Chloe (C3), polite; takes store credit if no refund.", "Money back for the desk lamp.",
        ["store credit"]),
}


def _conversation(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample as a conversation: the customer opens without the order number and gives it when asked."""
    opening, persona, goal, stop_when = _CONVERSATIONS[sample["id"]]
    order_id = sample["actions"][0]["args"]["order_id"]
    customer_id = _ORDERS[order_id]["customer_id"]
    return {**sample, "instruction": opening,
            "user": {"persona": persona, "goal": goal, "facts": {"order_id": order_id, "customer_id": customer_id},
                     "withheld": ["order_id"], "asked_by": {"order_id": ["order number"]}, "stop_when": stop_when,
                     "max_turns": 6}}


def sample_json(sample: dict[str, Any]) -> str:
    return json.dumps(sample, indent=2) + "\n"


# ---- what Execute knows how to fix ----------------------------------------------------
# (layer, evidence in the failure reason, file under the iteration folder, old, new, note)
FIXES: list[tuple[str, str, str, str, str, str]] = [
    ("L2", "store_credit", "tools/tools.py", _CREDIT_BUG, _CREDIT_FIX,
     "issue_store_credit: start from a zero balance when the customer has no store_credit yet"),
    ("L3", "escalate", "checkers/check_policy.py", _LIMIT_BUG, _LIMIT_FIX,
     "check_policy: R4 escalates refunds above $500, not at exactly $500"),
]

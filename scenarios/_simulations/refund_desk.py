"""The simulated model's script for the refund-desk example scenario.

The simulated model (``agents.simulated``) is a script player, not a language
model; it plays this file for a scenario whose brief.md is the refund-desk
example's (``BRIEF_SHA256``, matched by ``agents.simulated.script_for_brief``).
Here are the plans of each turn, the moves they are made of, the handoffs, the
compaction summaries, and the documents and code the agents write for
``scenarios/refund_desk``. Iteration 1 contains deliberate mistakes so the
evaluation finds real failures in every layer:

- L1 design: business rules R2 (final sale) and R3 (damaged) overlap with no
  precedence; the checker raises DesignIssue for the two samples that hit both.
- L2 tool: ``issue_store_credit`` reads a balance key the data does not have.
- L3 checker: escalation at ``>=`` $500 where the rule says "above $500".
- L4 sample: one sample expects the wrong refund amount.

Execute fixes L2-L4 with Edit after reading the report; Init's redesign adds
rule R8 (precedence), which fixes L1, so iteration 2 passes.

This file is baton's, not the scenario's: it sits outside the scenario folder
(``scenarios/_simulations/``), so no agent lists or reads it. A brief it was
not written for never reaches it: the simulated model refuses that brief
before the first step.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents.simulated import COMMON_MOVES, Move, ToolCall, ToolResult, handoff_payload

# brief_fingerprint(scenarios/refund_desk/brief.md): editing that brief means revisiting this script (the design,
# data and samples below answer its rules), then updating this line; tests/test_simulated_briefs.py checks it.
BRIEF_SHA256 = "eef57de473c6fc7006a75661299b9fc4cfefb6f1f8733e90d3a7476fdc8e3cef"
DESIGN_FILES = ["design/scenario_design.md", "design/business_rules.md", "design/format_spec.md"]
SAMPLES_PER_WRITE = 2

# ---- the plans --------------------------------------------------------------------------


def new_plan(role: str, iteration: int, opening: str) -> dict[str, Any]:
    if role == "execute":
        payload = handoff_payload(opening, "init_to_execute") or {}
        queue = ["todo", "read:design/format_spec.md", "read:design/business_rules.md",
                 "read:design/scenario_design.md", "write_tools", "write_data", "write_checker"]
        queue += [f"samples:{k}" for k in range(0, 10, SAMPLES_PER_WRITE)] + ["evaluate"]
        return {"role": role, "iteration": iteration, "queue": queue, "runs": 0, "fixed": [],
                "target": (payload.get("acceptance_criteria") or {}).get("target_success_rate", 0.85)}
    if "<human_feedback>" in opening:
        feedback = opening.split("<human_feedback>", 1)[1].split("</human_feedback>", 1)[0].strip()
        return {"role": role, "iteration": iteration, "kind": "feedback", "feedback": feedback[:500],
                "queue": ["read:scenario.toml", "read:design/scenario_design.md", "note_feedback", "handoff"]}
    report = handoff_payload(opening, "execute_to_init")
    if report is not None:
        return {"role": role, "iteration": iteration, "kind": "report",
                "problems": report.get("layer1_problems_summary", []),
                "queue": ["todo", "read:scenario.toml", f"read:{report.get('execution_output_dir', '')}/report.json",
                          "read:design/business_rules.md", "add_precedence", "changelog",
                          "read:design/business_rules.md", "handoff"]}
    return {"role": role, "iteration": iteration, "kind": "brief",
            "queue": ["todo", "ls", "read:brief.md", "read:scenario.toml", "write_design", "write_rules",
                      "write_format", "read:design/scenario_design.md", "read:design/business_rules.md",
                      "read:design/format_spec.md", "handoff"]}


def absorb(state: dict[str, Any], results: list[ToolResult]) -> None:
    for name, tool_input, env in results:
        data = env.get("data") if isinstance(env.get("data"), dict) else {}
        if name == "Read" and tool_input.get("path") == "scenario.toml":
            found = re.search(r"target_success_rate\s*=\s*([0-9.]+)", data.get("content", ""))
            if found:
                state["target"] = float(found.group(1))
        if name == "Read" and tool_input.get("path") == "design/business_rules.md":
            state["precedence"] = "R8:" in data.get("content", "")
        if name == "RunEvaluation" and env.get("status") == "ok":
            _after_evaluation(state, data)


def _after_evaluation(state: dict[str, Any], data: dict[str, Any]) -> None:
    state["runs"] = state.get("runs", 0) + 1
    state["eval"] = {k: data.get(k) for k in ("total", "passed", "failed", "success_rate", "failures_per_layer")}
    failures = data.get("failures") or []
    state["layer1"] = sorted({f"{f.get('sample')}: {f.get('reason')}" for f in failures if f.get("layer") == "L1"})
    fixes = [] if state["runs"] >= 3 else _fixes_for(failures)
    state["queue"] = [f"fix:{json.dumps(f, sort_keys=True)}" for f in fixes]
    state["queue"] += ["evaluate"] if fixes else ["read_report", "handoff"]


def _fixes_for(failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Edits that fix the failures the script understands (L2-L4); L1 goes to Init."""
    fixes: list[dict[str, Any]] = []
    for f in failures:
        layer, reason = f.get("layer"), str(f.get("reason", ""))
        for fix_layer, evidence, path, old, new, note in FIXES:
            if layer == fix_layer and evidence in reason and all(x["path"] != path for x in fixes):
                fixes.append({"path": path, "old": old, "new": new, "note": note})
        amounts = re.search(r"expected\D*?([0-9]+\.[0-9]+)\D+?(?:got|actual)\D*?([0-9]+\.[0-9]+)", reason)
        if layer == "L4" and amounts:
            path = f"samples/{f.get('sample')}.json"
            fixes.append({"path": path, "old": f'"amount": {amounts.group(1)}', "new": f'"amount": {amounts.group(2)}',
                          "note": f"{f.get('sample')}: expected amount corrected to what the rules give "
                                  f"({amounts.group(2)})"})
    return fixes


# ---- moves: each returns (narration, [(tool, input), ...]) ---------------------------------


def _out(state: dict[str, Any], rel: str) -> str:
    return f"execution_outputs/iteration_{state['iteration']}/{rel}"


def _write_design(_state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    return "Writing the scenario design.", [("Write", {"path": DESIGN_FILES[0], "content": scenario_design()})]


def _write_rules(_state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    return "Writing the business rules R1-R7.", [("Write", {"path": DESIGN_FILES[1], "content": business_rules(False)})]


def _write_format(_state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    return "Writing the format specification.", [("Write", {"path": DESIGN_FILES[2], "content": format_spec()})]


def _add_precedence(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    problems = " ".join(state.get("problems", []))
    if "R2" in problems and "R3" in problems:
        return ("Execute found that R2 and R3 overlap with no precedence; adding R8.",
                [("Edit", {"path": DESIGN_FILES[1], "old_string": f"- {RULES_V1[-1]}\n",
                           "new_string": f"- {RULES_V1[-1]}\n- {RULE_R8}\n"})])
    return "No design problem I know how to fix; recording the report.", [("Read", {"path": DESIGN_FILES[1]})]


def _changelog(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    entry = (f"- iteration {state['iteration']}: added R8 (precedence: R3 over R2; R4 for every refund) "
             "after Execute's layer-1 report.")
    return "Recording the change in the design's changelog.", [
        ("Edit", {"path": DESIGN_FILES[0], "old_string": "## Changelog\n", "new_string": f"## Changelog\n{entry}\n"})]


def _note_feedback(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    note = f"## Reviewer feedback (iteration {state['iteration']})\n{state['feedback']}\n\n## Changelog\n"
    return "Recording the reviewer's feedback in the design.", [
        ("Edit", {"path": DESIGN_FILES[0], "old_string": "## Changelog\n", "new_string": note})]


def _init_handoff(state: dict[str, Any]) -> dict[str, Any]:
    changes = {"report": ["R8: precedence of R3 (damaged) over R2 (final sale); R4 applies to every refund"],
               "feedback": [f"addressed reviewer feedback: {state.get('feedback', '')[:200]}"]}.get(state["kind"], [])
    rules = RULES_V1 + ([RULE_R8] if state["kind"] == "report" else [])
    return {
        "scenario": "refund_desk", "iteration": state["iteration"], "design_files": DESIGN_FILES,
        "design_summary": "A support agent handles refund requests: it looks up customers and orders with six tools "
                          "and must refund, issue store credit, escalate or refuse exactly as rules R1-R7 say. "
                          "Ten samples cover every rule, with boundaries at day 30 and $500.",
        "business_rules": rules,
        "format_spec": "tools/tools.py functions name(data, **args) -> dict; checkers/check_policy.py; "
                       "samples/<id>.json with actions, expected_outputs, expected_state, rules. "
                       "See design/format_spec.md.",
        "acceptance_criteria": {"target_success_rate": state.get("target", 0.85)},
        "changes_since_last_iteration": changes,
    }


def _execute_handoff(state: dict[str, Any]) -> dict[str, Any]:
    ev = state.get("eval") or {}
    rate = ev.get("success_rate") or 0.0
    met = rate >= state.get("target", 0.85)
    return {
        "iteration": state["iteration"], "execution_output_dir": f"execution_outputs/iteration_{state['iteration']}",
        "success_rate": rate,
        "totals": {"samples": ev.get("total", 0), "passed": ev.get("passed", 0), "failed": ev.get("failed", 0)},
        "failures_per_layer": ev.get("failures_per_layer") or {},
        "layer1_problems_summary": state.get("layer1", []),
        "fixed_by_execute": state.get("fixed", []),
        "recommendation": "The target is met; the scenario is ready." if met else
                          "Layer-1 design problems remain: the design must state which rule wins "
                          "for the samples listed.",
    }


def _handoff(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    payload = _init_handoff(state) if state["role"] == "init" else _execute_handoff(state)
    return "Handing off.", [("SubmitHandoff", {"payload": payload})]


def _write_tools(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    buggy = state["iteration"] == 1
    return "Writing the tools module.", [("Write", {"path": _out(state, "tools/tools.py"), "content": tools_py(buggy)})]


def _write_data(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    return "Writing the initial data.", [("Write", {"path": _out(state, "tools/data.json"), "content": data_json()})]


def _write_checker(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    buggy, precedence = state["iteration"] == 1, bool(state.get("precedence"))
    narration = "Writing the policy checker" + (
        " with R8 precedence." if precedence else "; the rules give no precedence for R2/R3.")
    return narration, [("Write", {"path": _out(state, "checkers/check_policy.py"),
                                  "content": checker_py(buggy, precedence)})]


def _samples(state: dict[str, Any], move: str) -> tuple[str, list[ToolCall]]:
    start = int(move.split(":")[1])
    chosen = samples(state["iteration"] == 1)[start : start + SAMPLES_PER_WRITE]
    calls = [("Write", {"path": _out(state, f"samples/{s['id']}.json"), "content": sample_json(s)}) for s in chosen]
    return f"Writing samples {start + 1}-{start + len(chosen)}.", calls


def _fix(state: dict[str, Any], move: str) -> tuple[str, list[ToolCall]]:
    fix = json.loads(move.split(":", 1)[1])
    state.setdefault("fixed", []).append(fix["note"])
    return f"Fixing: {fix['note']}.", [
        ("Edit", {"path": _out(state, fix["path"]), "old_string": fix["old"], "new_string": fix["new"]})]


def _read_report(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    return "Reading the evaluation report before handing off.", [("Read", {"path": _out(state, "report.json")})]


MOVES: dict[str, Move] = {
    **COMMON_MOVES, "write_design": _write_design, "write_rules": _write_rules, "write_format": _write_format,
    "add_precedence": _add_precedence, "changelog": _changelog, "note_feedback": _note_feedback, "handoff": _handoff,
    "write_tools": _write_tools, "write_data": _write_data, "write_checker": _write_checker, "samples": _samples,
    "fix": _fix, "read_report": _read_report,
}


# ---- compaction summaries ------------------------------------------------------------------


def summary(role: str, state: dict[str, Any], written: list[str], previous: dict[str, Any]) -> dict[str, Any]:
    return _init_summary(state, written, previous) if role == "init" else _execute_summary(state, written, previous)


def _init_summary(state: dict[str, Any], written: list[str], previous: dict[str, Any]) -> dict[str, Any]:
    old_paths = previous.get("key_paths", {}) if isinstance(previous.get("key_paths"), dict) else {}
    problems = state.get("problems", [])
    rules = RULES_V1 + ([RULE_R8] if state.get("kind") == "report" else [])
    return {
        "current_design_summary": {
            "unified_scenario_design": "Refund desk: a support agent with six tools (get_customer, get_order, "
                                       "list_orders, issue_refund, issue_store_credit, escalate) applies refund rules "
                                       "to 12 orders of 5 customers.",
            "business_rules_key_points": [r.split(":")[0] + ": " + r.split(": ", 1)[1][:60] for r in rules],
            "format_specifications": "tools/tools.py, checkers/check_policy.py, samples/<id>.json; "
                                     "see design/format_spec.md",
        },
        "execute_feedback_summary": {
            "execution_output_dir": f"execution_outputs/iteration_{state['iteration'] - 1}" if problems else None,
            "total_failure_samples": len(problems), "layer1_problems_summary": problems,
        },
        "analysis_conclusions": ["R2 and R3 need an explicit precedence"] if problems else ["design follows the brief"],
        "pending_actions": [m.split(":")[0] for m in state.get("queue", [])],
        "key_paths": {**old_paths, "brief": "brief.md",
                      "design_files": [p for p in written if p.startswith("design/")] or DESIGN_FILES,
                      "iteration": state.get("iteration")},
    }


def _execute_summary(state: dict[str, Any], written: list[str], previous: dict[str, Any]) -> dict[str, Any]:
    old = previous.get("generated_components", {}) if isinstance(previous.get("generated_components"), dict) else {}
    old_samples = old.get("samples", []) if isinstance(old.get("samples"), list) else []
    files = sorted(set(written) | set(old.get("tools", [])) | set(old.get("checkers", [])) | set(old_samples))
    ev = state.get("eval") or {}
    out_dir = f"execution_outputs/iteration_{state.get('iteration', 1)}"
    return {
        "generated_components": {
            "tools": [f for f in files if "/tools/" in f], "checkers": [f for f in files if "/checkers/" in f],
            "samples": [f for f in files if "/samples/" in f],
        },
        "evaluation_progress": {"current_iteration": state.get("iteration", 1), "success_rate": ev.get("success_rate"),
                                "layer_status": ev.get("failures_per_layer") or "not evaluated yet"},
        "identified_issues": {"layer2_problems": [], "layer3_problems": [], "fix_attempts": state.get("fixed", []),
                              "layer1_problems": state.get("layer1", [])},
        "pending_work": [m.split(":")[0] for m in state.get("queue", [])],
        "key_paths": {"execution_output_dir": out_dir, "report": f"{out_dir}/report.json",
                      "design_files": DESIGN_FILES},
    }


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


def data_json() -> str:
    data = {"today": TODAY, "customers": _CUSTOMERS, "orders": _ORDERS, "refunds": [], "credits": [], "escalations": []}
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

## Changelog
- iteration 1: first design.
"""


def business_rules(with_precedence: bool) -> str:
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
- refuse: no state-changing call; explain which rule applies.
"""


def format_spec() -> str:
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
"""


# ---- Execute's code -----------------------------------------------------------------
# In the templates below, a backslash at a line's end joins it with the next: the source stays
# within 120 columns and the code written keeps its long lines.

_CREDIT_BUG = 'customer["store_credit"] + amount'
_CREDIT_FIX = 'customer.get("store_credit", 0.0) + amount'


def tools_py(buggy: bool) -> str:
    credit = _CREDIT_BUG if buggy else _CREDIT_FIX
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


def checker_py(buggy: bool, precedence: bool) -> str:
    limit = _LIMIT_BUG if buggy else _LIMIT_FIX
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


def samples(buggy: bool) -> list[dict[str, Any]]:
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

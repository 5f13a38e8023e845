"""The simulated model's script for the refund-desk example scenario.

The simulated model (``agents.simulated``) is a script player, not a language
model; it plays this file for a scenario whose brief.md is the refund-desk
example's (``BRIEF_SHA256``, matched by ``agents.simulated.script_for_brief``).
Here are the plans of each turn, the moves they are made of, the handoffs and the
compaction summaries; the documents and code the agents write for
``scenarios/refund_desk`` are in its part ``_refund_desk_files.py``. Iteration 1
contains deliberate mistakes so the evaluation finds real failures in every layer:

- L1 design: business rules R2 (final sale) and R3 (damaged) overlap with no
  precedence; the checker raises DesignIssue for the two samples that hit both.
- L2 tool: ``issue_store_credit`` reads a balance key the data does not have.
- L3 checker: escalation at ``>=`` $500 where the rule says "above $500".
- L4 sample: one sample expects the wrong refund amount.

Iteration 1's design also says a refusal is "no state-changing call", so an agent
that does nothing passes the two refusal samples (s02, s06): the floors gate finds
them, and rule R6 is only ever seen refusing (the coverage gate).

Execute fixes L2-L4 with Edit after reading the report; Init's redesign adds
rule R8 (precedence), which fixes L1, and makes every refusal recorded
(``record_refusal(order_id, rule, note)``, answering the floor findings when the
report carries them, and its own reading of the design when it does not). In
iteration 2 Execute's tools gain record_refusal, the refusal samples expect its
record with the rule, R6 and R8 are cited where they let a refund through, so
iteration 2 passes with floor 0, coverage 100% and no duplicate.

This file is baton's, not the scenario's: it sits outside the scenario folder
(``scenarios/_simulations/``), so no agent lists or reads it. A brief it was
not written for never reaches it: the simulated model refuses that brief
before the first step.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents.simulated import COMMON_MOVES, Move, ToolCall, ToolResult, handoff_payload, load_part

files = load_part("refund_desk_files")  # what the agents write: data, documents, code, samples
policy = load_part("refund_desk_policy")  # design/policy.py: the rules as predicates

# brief_fingerprint(scenarios/refund_desk/brief.md): editing that brief means revisiting this script (the design,
# data and samples below answer its rules), then updating this line; tests/test_simulated_briefs.py checks it.
BRIEF_SHA256 = "eef57de473c6fc7006a75661299b9fc4cfefb6f1f8733e90d3a7476fdc8e3cef"
DESIGN_FILES = ["design/scenario_design.md", "design/business_rules.md", "design/format_spec.md", "design/policy.py"]
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
                "problems": report.get("layer1_problems_summary", []), **_findings(report.get("findings")),
                "queue": ["todo", "read:scenario.toml", f"read:{report.get('execution_output_dir', '')}/report.json",
                          "read:design/business_rules.md", "add_precedence", "record_refusals", "changelog",
                          "read:design/business_rules.md", "handoff"]}
    return {"role": role, "iteration": iteration, "kind": "brief",
            "queue": ["todo", "ls", "read:brief.md", "read:scenario.toml", "write_design", "write_rules",
                      "write_format", "read:design/scenario_design.md", "read:design/business_rules.md",
                      "read:design/format_spec.md", "handoff"]}


def _findings(findings: Any) -> dict[str, Any]:
    """What Init keeps of the gates' findings (the report's quality.findings, in the execute_to_init context when
    the loop passes them): the samples a floor agent passes and the rules coverage names. None: no findings came."""
    if not isinstance(findings, list):
        return {"findings": None}
    found = [f for f in findings if isinstance(f, dict)]
    return {"findings": len(found),
            "floor": sorted({str(f.get("sample")) for f in found if f.get("gate") == "floor" and f.get("sample")}),
            "uncovered": sorted({str(f.get("rule")) for f in found if f.get("gate") == "coverage" and f.get("rule")})}


def absorb(state: dict[str, Any], results: list[ToolResult]) -> None:
    for name, tool_input, env in results:
        data = env.get("data") if isinstance(env.get("data"), dict) else {}
        if name == "Read" and tool_input.get("path") == "scenario.toml":
            found = re.search(r"target_success_rate\s*=\s*([0-9.]+)", data.get("content", ""))
            if found:
                state["target"] = float(found.group(1))
        if name == "Read" and tool_input.get("path") == "design/business_rules.md":
            state["precedence"] = "R8:" in data.get("content", "")
            state["recorded"] = "record_refusal(" in data.get("content", "")
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
        for fix_layer, evidence, path, old, new, note in files.FIXES:
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
    return "Writing the scenario design.", [("Write", {"path": DESIGN_FILES[0], "content": files.scenario_design()})]


def _write_rules(_state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    return "Writing the business rules R1-R7, and each as a predicate (design/policy.py).", [
        ("Write", {"path": DESIGN_FILES[1], "content": files.business_rules(False)}),
        ("Write", {"path": DESIGN_FILES[3], "content": policy.policy_py()})]


def _write_format(_state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    return "Writing the format specification.", [("Write", {"path": DESIGN_FILES[2], "content": files.format_spec()})]


def _add_precedence(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    problems = " ".join(state.get("problems", []))
    if "R2" in problems and "R3" in problems:
        return ("Execute found that R2 and R3 overlap with no precedence; adding R8.",
                [("Edit", {"path": DESIGN_FILES[1], "old_string": f"- {files.RULES_V1[-1]}\n",
                           "new_string": f"- {files.RULES_V1[-1]}\n- {files.RULE_R8}\n"})])
    return "No design problem I know how to fix; recording the report.", [("Read", {"path": DESIGN_FILES[1]})]


def _record_refusals(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    """A refusal that changes nothing cannot be told from an agent that did nothing: record every refusal, with
    its rule. The gates' floor findings say so when the report carries them; without them Init sees it itself."""
    if state.get("recorded"):
        return "Refusals are already recorded in the design.", [("Read", {"path": DESIGN_FILES[1]})]
    floor = state.get("floor") or []
    why = (f"The gates found samples a floor agent passes ({', '.join(floor)}): doing nothing or refusing "
           "everything leaves the state they expect" if floor else
           "A refusal is 'no state-changing call' in the design, so an agent that does nothing would pass every "
           "refusal sample")
    state["recorded"] = True
    return f"{why}: every refusal is now recorded by record_refusal(order_id, rule, note), with its rule.", [
        ("Edit", {"path": DESIGN_FILES[1], "old_string": files.REFUSE_UNRECORDED, "new_string": files.REFUSE_RECORDED}),
        ("Edit", {"path": DESIGN_FILES[0], "old_string": files.ESCALATE_TOOL_LINE,
                  "new_string": files.ESCALATE_TOOL_LINE + files.RECORD_TOOL_LINE}),
        ("Write", {"path": DESIGN_FILES[2], "content": files.format_spec(recorded=True)})]


def _changelog(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    entry = (f"- iteration {state['iteration']}: added R8 (precedence: R3 over R2; R4 for every refund) "
             "after Execute's layer-1 report; every refusal is recorded (record_refusal, with its rule) so an "
             "agent that does nothing passes no sample.")
    return "Recording the change in the design's changelog.", [
        ("Edit", {"path": DESIGN_FILES[0], "old_string": "## Changelog\n", "new_string": f"## Changelog\n{entry}\n"})]


def _note_feedback(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    note = f"## Reviewer feedback (iteration {state['iteration']})\n{state['feedback']}\n\n## Changelog\n"
    return "Recording the reviewer's feedback in the design.", [
        ("Edit", {"path": DESIGN_FILES[0], "old_string": "## Changelog\n", "new_string": note})]


def _init_handoff(state: dict[str, Any]) -> dict[str, Any]:
    changes = {"report": ["R8: precedence of R3 (damaged) over R2 (final sale); R4 applies to every refund"],
               "feedback": [f"addressed reviewer feedback: {state.get('feedback', '')[:200]}"]}.get(state["kind"], [])
    if state["kind"] == "report" and state.get("recorded"):
        changes.append("refusals are recorded: record_refusal(order_id, rule, note) appends to data.refusals with the "
                       "rule id (data.rules); a refusal sample expects that record, so doing nothing fails it")
    if state.get("uncovered"):
        changes.append(f"coverage: cite {', '.join(state['uncovered'])} in samples where the rule is considered, on "
                       "the side the gates found missing")
    rules = files.RULES_V1 + ([files.RULE_R8] if state["kind"] == "report" else [])
    return {
        "scenario": "refund_desk", "iteration": state["iteration"], "design_files": DESIGN_FILES,
        "design_summary": "A support agent handles refund requests: it looks up customers and orders with six tools "
                          "and must refund, issue store credit, escalate or refuse exactly as the rules say"
                          + (" (record_refusal records every refusal)" if state.get("recorded") else "")
                          + ". Ten samples cover every rule, with boundaries at day 30 and $500.",
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
    buggy, recorded = state["iteration"] == 1, bool(state.get("recorded"))
    return "Writing the tools module" + (", with record_refusal." if recorded else "."), [
        ("Write", {"path": _out(state, "tools/tools.py"), "content": files.tools_py(buggy, recorded)})]


def _write_data(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    rules = files.RULE_IDS[: 8 if state.get("precedence") else 7] if state.get("recorded") else None
    return "Writing the initial data.", [
        ("Write", {"path": _out(state, "tools/data.json"), "content": files.data_json(rules)})]


def _write_checker(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    buggy, precedence = state["iteration"] == 1, bool(state.get("precedence"))
    narration = "Writing the policy checker" + (
        " with R8 precedence." if precedence else "; the rules give no precedence for R2/R3.")
    return narration, [("Write", {"path": _out(state, "checkers/check_policy.py"),
                                  "content": files.checker_py(buggy, precedence, bool(state.get("recorded")))})]


def _samples(state: dict[str, Any], move: str) -> tuple[str, list[ToolCall]]:
    start = int(move.split(":")[1])
    written = files.samples(state["iteration"] == 1, bool(state.get("recorded")), bool(state.get("precedence")))
    chosen = written[start : start + SAMPLES_PER_WRITE]
    calls = [("Write", {"path": _out(state, f"samples/{s['id']}.json"), "content": files.sample_json(s)})
             for s in chosen]
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
    "add_precedence": _add_precedence, "record_refusals": _record_refusals, "changelog": _changelog,
    "note_feedback": _note_feedback, "handoff": _handoff,
    "write_tools": _write_tools, "write_data": _write_data, "write_checker": _write_checker, "samples": _samples,
    "fix": _fix, "read_report": _read_report,
}


# ---- compaction summaries ------------------------------------------------------------------


def summary(role: str, state: dict[str, Any], written: list[str], previous: dict[str, Any]) -> dict[str, Any]:
    return _init_summary(state, written, previous) if role == "init" else _execute_summary(state, written, previous)


def _init_summary(state: dict[str, Any], written: list[str], previous: dict[str, Any]) -> dict[str, Any]:
    old_paths = previous.get("key_paths", {}) if isinstance(previous.get("key_paths"), dict) else {}
    problems = state.get("problems", [])
    rules = files.RULES_V1 + ([files.RULE_R8] if state.get("kind") == "report" else [])
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



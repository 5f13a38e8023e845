"""The simulated model: baton's offline default. It is labelled "simulated" everywhere.

It is a deterministic script that answers Messages API requests the way an
agent would: it reads the conversation it is sent, works out where it is, and
answers with text plus real tool calls that the real tools then run on real
files. The same request always gets the same response.

Where am I? Every reply carries a small state marker
``<sim_state>{...}</sim_state>`` in its text. The last assistant message is
always in the context (the last N steps are verbatim, even after compaction),
so the marker survives compaction; a turn's opening message (``Iteration: n``)
after the last marker starts a new plan. The plan is a queue of named moves;
what a move learns from its tool results (the precedence rule in the design,
the evaluation report) is absorbed into the state on the next call.

Compaction prompts are answered with a valid summary built from the
conversation. Usage is the token estimator's count of the request.

It knows one domain, the refund-desk example (``agents.sim_refund_desk``); for
any other brief it says so instead of pretending.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from agents import sim_refund_desk as desk
from agents.models import ModelError, ModelRequest, ModelResponse
from agents.tooling import parse_envelope
from context.messages import Message, TextBlock, ToolUseBlock, Usage, parse_message
from context.tokens import TokenEstimator, count_text

LABEL = "simulated"
STATE_TAG = re.compile(r"<sim_state>(.*?)</sim_state>", re.DOTALL)
ITERATION = re.compile(r"^Iteration: (\d+)", re.MULTILINE)
SUMMARY_ASK = "<compact_summary>"
DESIGN_FILES = ["design/scenario_design.md", "design/business_rules.md", "design/format_spec.md"]
SAMPLES_PER_WRITE = 2


class SimulationError(ModelError):
    """The script cannot go on (an unknown scenario, a tool it cannot recover from)."""


# ---- reading the request ----------------------------------------------------------------


@dataclass
class Conversation:
    role: str
    messages: list[Message]

    @classmethod
    def of(cls, request: ModelRequest) -> Conversation:
        system = request.system if isinstance(request.system, str) else " ".join(
            b.get("text", "") for b in request.system or [])
        role = "execute" if system.startswith("You are the Execute agent") else "init"
        messages = [parse_message({"role": m["role"], "content": _strip_cache(m["content"])}) for m in request.messages]
        return cls(role, messages)

    def wants_summary(self) -> bool:
        last = self.messages[-1] if self.messages else None
        return bool(last and last.role == "user" and SUMMARY_ASK in last.text)

    def last_state(self) -> tuple[int, dict[str, Any]] | None:
        for i in range(len(self.messages) - 1, -1, -1):
            msg = self.messages[i]
            if msg.role == "assistant":
                found = STATE_TAG.search(msg.text)
                if found:
                    return i, json.loads(found.group(1))
        return None

    def last_opening(self) -> tuple[int, str] | None:
        for i in range(len(self.messages) - 1, -1, -1):
            msg = self.messages[i]
            if msg.role == "user" and ITERATION.search(msg.text):
                return i, msg.text
        return None

    def last_results(self) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """(tool name, input, parsed envelope) for the results in the last user message."""
        if len(self.messages) < 2 or self.messages[-1].role != "user":
            return []
        uses = {u.id: u for u in self.messages[-2].tool_uses} if self.messages[-2].role == "assistant" else {}
        out = []
        for block in self.messages[-1].tool_results:
            use = uses.get(block.tool_use_id)
            if use is not None:
                out.append((use.name, dict(use.input), parse_envelope(block.text) or {"status": "error", "error": block.text[:300]}))
        return out

    def written_paths(self) -> list[str]:
        paths: dict[str, None] = {}
        for msg in self.messages:
            for use in msg.tool_uses:
                if use.name in ("Write", "Edit") and isinstance(use.input.get("path"), str):
                    paths[use.input["path"]] = None
        return list(paths)

    def previous_summary(self) -> dict[str, Any]:
        for msg in self.messages:
            found = re.search(r"<compact_summary>(.*?)</compact_summary>", msg.text, re.DOTALL) if msg.role == "assistant" else None
            if found:
                try:
                    return json.loads(found.group(1))
                except ValueError:
                    return {}
        return {}


def _strip_cache(content: Any) -> Any:
    if isinstance(content, list):
        return [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
    return content


def _payload(text: str, kind: str) -> dict[str, Any] | None:
    found = re.search(rf"<{kind}_context>(.*?)</{kind}_context>", text, re.DOTALL)
    if not found:
        return None
    try:
        return json.loads(found.group(1).replace("<\\/", "</"))
    except ValueError:
        return None


# ---- the model --------------------------------------------------------------------------


class SimulatedModel:
    """Deterministic stand-in for Claude; see the module docstring."""

    label = LABEL

    def __init__(self) -> None:
        self.requests: list[str] = []  # fingerprints of every request, for tests

    def create(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request.fingerprint())
        convo = Conversation.of(request)
        if request.purpose == "summary" or convo.wants_summary():
            blocks: list[Any] = [TextBlock(text=_summary(convo))]
            stop = "end_turn"
        else:
            blocks = Planner(convo).reply()
            stop = "tool_use" if any(isinstance(b, ToolUseBlock) for b in blocks) else "end_turn"
        return ModelResponse(id=f"msg_sim_{request.fingerprint()}", model=f"{request.model} ({LABEL})",
                             content=blocks, stop_reason=stop, usage=_usage(request, convo.messages, blocks), simulated=True)


def _usage(request: ModelRequest, messages: list[Message], blocks: list[Any]) -> Usage:
    system = request.system if isinstance(request.system, str) else json.dumps(request.system or [])
    extra = count_text(system) + count_text(json.dumps(request.tools, sort_keys=True))
    input_tokens = TokenEstimator().estimate_input(messages, extra)
    return Usage(input_tokens=input_tokens, output_tokens=sum(b.tokens for b in blocks))


# ---- the plans ------------------------------------------------------------------------------


class Planner:
    """Picks the next move of the current turn and turns it into content blocks."""

    def __init__(self, convo: Conversation):
        self.convo = convo
        opening = convo.last_opening()
        marker = convo.last_state()
        if marker is None or (opening is not None and opening[0] > marker[0]):
            if opening is None:
                raise SimulationError("the simulated model found no opening message ('Iteration: n') to start from")
            self.state = _new_plan(convo.role, opening[1])
            self.state["round"] = hashlib.sha256(opening[1].encode()).hexdigest()[:12]
        else:
            self.state = marker[1]
            self._absorb(convo.last_results())

    def reply(self) -> list[Any]:
        failed = [(name, env) for name, _, env in self.convo.last_results() if env.get("status") == "error"]
        if failed:
            name, env = failed[0]
            # The script has no recovery: say so plainly; baton reminds it, then fails the turn.
            return [TextBlock(text=f"[simulated] {name} failed: {env.get('error')}. The simulated model cannot recover "
                                   f"from this on its own.\n<sim_state>{json.dumps(self.state, sort_keys=True)}</sim_state>")]
        if not self.state["queue"]:
            return [TextBlock(text=f"[simulated] Nothing left in the plan.\n<sim_state>{json.dumps(self.state, sort_keys=True)}</sim_state>")]
        move = self.state["queue"].pop(0)
        self.state["done"] = move
        narration, calls = MOVES[move.split(":")[0]](self, move)
        text = f"[simulated] {narration}\n<sim_state>{json.dumps(self.state, sort_keys=True)}</sim_state>"
        return [TextBlock(text=text), *(self._use(j, name, args) for j, (name, args) in enumerate(calls))]

    def _use(self, j: int, name: str, args: dict[str, Any]) -> ToolUseBlock:
        # From the plan state only (round, remaining moves), never from tool results that
        # carry mtimes: the same plan position gives the same ids in every run.
        digest = hashlib.sha256(f"{json.dumps(self.state, sort_keys=True)}|{j}".encode()).hexdigest()[:24]
        return ToolUseBlock(id=f"toolu_sim_{digest}", name=name, input=args)

    # -- learning from the last results

    def _absorb(self, results: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
        for name, tool_input, env in results:
            data = env.get("data") if isinstance(env.get("data"), dict) else {}
            if name == "Read" and tool_input.get("path") == "scenario.toml":
                found = re.search(r"target_success_rate\s*=\s*([0-9.]+)", data.get("content", ""))
                if found:
                    self.state["target"] = float(found.group(1))
            if name == "Read" and tool_input.get("path") == "design/business_rules.md":
                self.state["precedence"] = "R8:" in data.get("content", "")
            if name == "RunEvaluation" and env.get("status") == "ok":
                self._after_evaluation(data)

    def _after_evaluation(self, data: dict[str, Any]) -> None:
        s = self.state
        s["runs"] = s.get("runs", 0) + 1
        s["eval"] = {k: data.get(k) for k in ("total", "passed", "failed", "success_rate", "failures_per_layer")}
        failures = data.get("failures") or []
        s["layer1"] = sorted({f"{f.get('sample')}: {f.get('reason')}" for f in failures if f.get("layer") == "L1"})
        fixes = [] if s["runs"] >= 3 else _fixes_for(failures)
        s["queue"] = [f"fix:{json.dumps(f, sort_keys=True)}" for f in fixes]
        s["queue"] += ["evaluate"] if fixes else ["read_report", "handoff"]


def _new_plan(role: str, opening: str) -> dict[str, Any]:
    iteration = int(ITERATION.search(opening).group(1))
    if role == "execute":
        payload = _payload(opening, "init_to_execute") or {}
        if "refund" not in json.dumps(payload).lower():
            raise SimulationError(
                "the simulated model only knows the refund-desk example scenario; "
                "set ANTHROPIC_API_KEY to run this scenario with Claude")
        queue = ["todo", "read:design/format_spec.md", "read:design/business_rules.md", "read:design/scenario_design.md",
                 "write_tools", "write_data", "write_checker"]
        queue += [f"samples:{k}" for k in range(0, 10, SAMPLES_PER_WRITE)] + ["evaluate"]
        return {"role": role, "iteration": iteration, "queue": queue, "runs": 0, "fixed": [],
                "target": (payload.get("acceptance_criteria") or {}).get("target_success_rate", 0.85)}
    if "<human_feedback>" in opening:
        feedback = opening.split("<human_feedback>", 1)[1].split("</human_feedback>", 1)[0].strip()
        return {"role": role, "iteration": iteration, "kind": "feedback", "feedback": feedback[:500],
                "queue": ["read:scenario.toml", "read:design/scenario_design.md", "note_feedback", "handoff"]}
    report = _payload(opening, "execute_to_init")
    if report is not None:
        return {"role": role, "iteration": iteration, "kind": "report", "problems": report.get("layer1_problems_summary", []),
                "queue": ["todo", "read:scenario.toml", f"read:{report.get('execution_output_dir', '')}/report.json",
                          "read:design/business_rules.md", "add_precedence", "changelog", "read:design/business_rules.md", "handoff"]}
    return {"role": role, "iteration": iteration, "kind": "brief",
            "queue": ["todo", "ls", "read:brief.md", "read:scenario.toml", "write_design", "write_rules", "write_format",
                      "read:design/scenario_design.md", "read:design/business_rules.md", "read:design/format_spec.md", "handoff"]}


def _fixes_for(failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Edits that fix the failures the script understands (L2-L4); L1 goes to Init."""
    fixes: list[dict[str, Any]] = []
    for f in failures:
        layer, reason = f.get("layer"), str(f.get("reason", ""))
        for fix_layer, evidence, path, old, new, note in desk.FIXES:
            if layer == fix_layer and evidence in reason and all(x["path"] != path for x in fixes):
                fixes.append({"path": path, "old": old, "new": new, "note": note})
        amounts = re.search(r"expected\D*?([0-9]+\.[0-9]+)\D+?(?:got|actual)\D*?([0-9]+\.[0-9]+)", reason)
        if layer == "L4" and amounts:
            path = f"samples/{f.get('sample')}.json"
            fixes.append({"path": path, "old": f'"amount": {amounts.group(1)}', "new": f'"amount": {amounts.group(2)}',
                          "note": f"{f.get('sample')}: expected amount corrected to what the rules give ({amounts.group(2)})"})
    return fixes


# ---- moves: each returns (narration, [(tool, input), ...]) ---------------------------------


def _out(planner: Planner, rel: str) -> str:
    return f"execution_outputs/iteration_{planner.state['iteration']}/{rel}"


def _todo(p: Planner, _move: str) -> tuple[str, list]:
    items = [m.split(":")[0] for m in p.state["queue"]]
    todos = [{"content": step, "status": "pending"} for step in dict.fromkeys(items)]
    return "Planning the turn.", [("TodoWrite", {"todos": todos})]


def _ls(_p: Planner, _move: str) -> tuple[str, list]:
    return "Looking at the scenario folder.", [("LS", {"path": "."})]


def _read(_p: Planner, move: str) -> tuple[str, list]:
    path = move.split(":", 1)[1]
    return f"Reading {path}.", [("Read", {"path": path})]


def _write_design(_p: Planner, _move: str) -> tuple[str, list]:
    return "Writing the scenario design.", [("Write", {"path": DESIGN_FILES[0], "content": desk.scenario_design()})]


def _write_rules(_p: Planner, _move: str) -> tuple[str, list]:
    return "Writing the business rules R1-R7.", [("Write", {"path": DESIGN_FILES[1], "content": desk.business_rules(False)})]


def _write_format(_p: Planner, _move: str) -> tuple[str, list]:
    return "Writing the format specification.", [("Write", {"path": DESIGN_FILES[2], "content": desk.format_spec()})]


def _add_precedence(p: Planner, _move: str) -> tuple[str, list]:
    problems = " ".join(p.state.get("problems", []))
    if "R2" in problems and "R3" in problems:
        return ("Execute found that R2 and R3 overlap with no precedence; adding R8.",
                [("Edit", {"path": DESIGN_FILES[1], "old_string": f"- {desk.RULES_V1[-1]}\n",
                           "new_string": f"- {desk.RULES_V1[-1]}\n- {desk.RULE_R8}\n"})])
    return "No design problem I know how to fix; recording the report.", [("Read", {"path": DESIGN_FILES[1]})]


def _changelog(p: Planner, _move: str) -> tuple[str, list]:
    entry = f"- iteration {p.state['iteration']}: added R8 (precedence: R3 over R2; R4 for every refund) after Execute's layer-1 report."
    return "Recording the change in the design's changelog.", [
        ("Edit", {"path": DESIGN_FILES[0], "old_string": "## Changelog\n", "new_string": f"## Changelog\n{entry}\n"})]


def _note_feedback(p: Planner, _move: str) -> tuple[str, list]:
    note = f"## Reviewer feedback (iteration {p.state['iteration']})\n{p.state['feedback']}\n\n## Changelog\n"
    return "Recording the reviewer's feedback in the design.", [
        ("Edit", {"path": DESIGN_FILES[0], "old_string": "## Changelog\n", "new_string": note})]


def _init_handoff(p: Planner) -> dict[str, Any]:
    s = p.state
    changes = {"report": ["R8: precedence of R3 (damaged) over R2 (final sale); R4 applies to every refund"],
               "feedback": [f"addressed reviewer feedback: {s.get('feedback', '')[:200]}"]}.get(s["kind"], [])
    rules = desk.RULES_V1 + ([desk.RULE_R8] if s["kind"] == "report" else [])
    return {
        "scenario": "refund_desk", "iteration": s["iteration"], "design_files": DESIGN_FILES,
        "design_summary": "A support agent handles refund requests: it looks up customers and orders with six tools "
                          "and must refund, issue store credit, escalate or refuse exactly as rules R1-R7 say. "
                          "Ten samples cover every rule, with boundaries at day 30 and $500.",
        "business_rules": rules,
        "format_spec": "tools/tools.py functions name(data, **args) -> dict; checkers/check_policy.py; "
                       "samples/<id>.json with actions, expected_outputs, expected_state, rules. See design/format_spec.md.",
        "acceptance_criteria": {"target_success_rate": s.get("target", 0.85)},
        "changes_since_last_iteration": changes,
    }


def _execute_handoff(p: Planner) -> dict[str, Any]:
    s, ev = p.state, p.state.get("eval") or {}
    rate = ev.get("success_rate") or 0.0
    met = rate >= s.get("target", 0.85)
    return {
        "iteration": s["iteration"], "execution_output_dir": f"execution_outputs/iteration_{s['iteration']}",
        "success_rate": rate,
        "totals": {"samples": ev.get("total", 0), "passed": ev.get("passed", 0), "failed": ev.get("failed", 0)},
        "failures_per_layer": ev.get("failures_per_layer") or {},
        "layer1_problems_summary": s.get("layer1", []),
        "fixed_by_execute": s.get("fixed", []),
        "recommendation": "The target is met; the scenario is ready." if met else
                          "Layer-1 design problems remain: the design must state which rule wins for the samples listed.",
    }


def _handoff(p: Planner, _move: str) -> tuple[str, list]:
    payload = _init_handoff(p) if p.state["role"] == "init" else _execute_handoff(p)
    return "Handing off.", [("SubmitHandoff", {"payload": payload})]


def _write_tools(p: Planner, _move: str) -> tuple[str, list]:
    buggy = p.state["iteration"] == 1
    return "Writing the tools module.", [("Write", {"path": _out(p, "tools/tools.py"), "content": desk.tools_py(buggy)})]


def _write_data(p: Planner, _move: str) -> tuple[str, list]:
    return "Writing the initial data.", [("Write", {"path": _out(p, "tools/data.json"), "content": desk.data_json()})]


def _write_checker(p: Planner, _move: str) -> tuple[str, list]:
    buggy, precedence = p.state["iteration"] == 1, bool(p.state.get("precedence"))
    return ("Writing the policy checker" + (" with R8 precedence." if precedence else "; the rules give no precedence for R2/R3.")), [
        ("Write", {"path": _out(p, "checkers/check_policy.py"), "content": desk.checker_py(buggy, precedence)})]


def _samples(p: Planner, move: str) -> tuple[str, list]:
    start = int(move.split(":")[1])
    chosen = desk.samples(p.state["iteration"] == 1)[start : start + SAMPLES_PER_WRITE]
    calls = [("Write", {"path": _out(p, f"samples/{s['id']}.json"), "content": desk.sample_json(s)}) for s in chosen]
    return f"Writing samples {start + 1}-{start + len(chosen)}.", calls


def _evaluate(p: Planner, _move: str) -> tuple[str, list]:
    return "Running the evaluation.", [("RunEvaluation", {})]


def _fix(p: Planner, move: str) -> tuple[str, list]:
    fix = json.loads(move.split(":", 1)[1])
    p.state.setdefault("fixed", []).append(fix["note"])
    return f"Fixing: {fix['note']}.", [("Edit", {"path": _out(p, fix["path"]), "old_string": fix["old"], "new_string": fix["new"]})]


def _read_report(p: Planner, _move: str) -> tuple[str, list]:
    return "Reading the evaluation report before handing off.", [("Read", {"path": _out(p, "report.json")})]


MOVES = {
    "todo": _todo, "ls": _ls, "read": _read, "write_design": _write_design, "write_rules": _write_rules,
    "write_format": _write_format, "add_precedence": _add_precedence, "changelog": _changelog,
    "note_feedback": _note_feedback, "handoff": _handoff, "write_tools": _write_tools, "write_data": _write_data,
    "write_checker": _write_checker, "samples": _samples, "evaluate": _evaluate, "fix": _fix, "read_report": _read_report,
}


# ---- compaction summaries ------------------------------------------------------------------


def _summary(convo: Conversation) -> str:
    previous = convo.previous_summary()
    marker = convo.last_state()
    state = marker[1] if marker else {}
    written = convo.written_paths()
    body = _init_summary(state, written, previous) if convo.role == "init" else _execute_summary(state, written, previous)
    return f"[simulated] Summary of the work so far.\n<compact_summary>{json.dumps(body, sort_keys=True)}</compact_summary>"


def _init_summary(state: dict[str, Any], written: list[str], previous: dict[str, Any]) -> dict[str, Any]:
    old_paths = previous.get("key_paths", {}) if isinstance(previous.get("key_paths"), dict) else {}
    problems = state.get("problems", [])
    return {
        "current_design_summary": {
            "unified_scenario_design": "Refund desk: a support agent with six tools (get_customer, get_order, list_orders, "
                                       "issue_refund, issue_store_credit, escalate) applies refund rules to 12 orders of 5 customers.",
            "business_rules_key_points": [r.split(":")[0] + ": " + r.split(": ", 1)[1][:60] for r in
                                          desk.RULES_V1 + ([desk.RULE_R8] if state.get("kind") == "report" else [])],
            "format_specifications": "tools/tools.py, checkers/check_policy.py, samples/<id>.json; see design/format_spec.md",
        },
        "execute_feedback_summary": {
            "execution_output_dir": f"execution_outputs/iteration_{state['iteration'] - 1}" if problems else None,
            "total_failure_samples": len(problems), "layer1_problems_summary": problems,
        },
        "analysis_conclusions": ["R2 and R3 need an explicit precedence"] if problems else ["design follows the brief"],
        "pending_actions": [m.split(":")[0] for m in state.get("queue", [])],
        "key_paths": {**old_paths, "brief": "brief.md", "design_files": [p for p in written if p.startswith("design/")] or DESIGN_FILES,
                      "iteration": state.get("iteration")},
    }


def _execute_summary(state: dict[str, Any], written: list[str], previous: dict[str, Any]) -> dict[str, Any]:
    old = previous.get("generated_components", {}) if isinstance(previous.get("generated_components"), dict) else {}
    files = sorted(set(written) | set(old.get("tools", [])) | set(old.get("checkers", [])) | set(old.get("samples", []) if isinstance(old.get("samples"), list) else []))
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
        "key_paths": {"execution_output_dir": out_dir, "report": f"{out_dir}/report.json", "design_files": DESIGN_FILES},
    }

"""The policy gate (issue 41, item 3): the scenarios baton builds state each rule also as a predicate over the data
and one action, in ``design/policy.py`` (docs/proving.md, "Executable policy"), so the gold and the tools are
checked against the policy itself rather than against each other.

- ``policy_violation``: an expected action the predicates deny, on the data as the sample's earlier actions left
  it (the gold breaks a rule, however faithfully the scorer then enforces it);
- ``loophole``: a call the predicates deny by a rule the tools must enforce (``TOOLS_ENFORCE``), which the tool
  makes anyway on the sample's data. The calls tried are the other samples' state-changing calls put on this
  sample's ids (``candidates``): what an agent that skips the rule would do here.

The predicates are model-written code: they run only in the sample's confined process (``child_policy.py``, mode
"policy" of ``child_main.py``), one per sample, as the evaluation's samples run; this side reads what it reported.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from proving.evaluation.child import run_child
from proving.evaluation.coverage import IDENTIFIER
from proving.evaluation.errors import error_of
from proving.evaluation.gate_harness import limits
from proving.evaluation.gates import FunctionGate, GateContext, GateResult, Unavailable, register
from proving.evaluation.gold import call_text, changes_state
from proving.evaluation.purity import pure_tools
from proving.evaluation.quality import Finding
from proving.evaluation.run import check_sandbox
from proving.sandbox.nest import DISK_MB
from scenarios import confined as folder_access
from scenarios.folder import Folder
from scenarios.store import Layout

POLICY = "policy.py"  # in design/
MAX_CANDIDATES = 12  # calls tried per sample for loopholes
POLICY_BYTES = 256 * 1024


class Denied(BaseModel):
    candidate: int
    rule: str
    output: Any = None
    raised: str | None = None
    changed: bool = False


class Violation(BaseModel):
    action: int
    rule: str


class PolicyResult(BaseModel):
    """What the sample's process reported (read as untrusted: it lies beside generated code)."""

    completed: bool = False
    violations: list[Violation] = Field(default_factory=list)
    denied: list[Denied] = Field(default_factory=list)
    problem: str | None = None


def candidates(sample: dict[str, Any], samples: list[dict[str, Any]], pure: frozenset[str]) -> list[dict[str, Any]]:
    """Other samples' state-changing calls with this sample's ids put in (by argument name), each once, not one of
    its own expected actions: what an agent that ignores the rule this sample turns on would call."""
    own = [a for a in sample.get("actions") or [] if isinstance(a, dict)]
    ids: dict[str, Any] = {}
    for action in own:
        for key, value in (action.get("args") or {}).items():
            if isinstance(value, str) and IDENTIFIER.match(value):
                ids.setdefault(key, value)
    found: list[dict[str, Any]] = []
    for other in samples:
        for action in other.get("actions") or []:
            if not isinstance(action, dict) or not changes_state(action, pure):
                continue
            args = {k: ids.get(k, v) if isinstance(v, str) and IDENTIFIER.match(v) else v
                    for k, v in (action.get("args") or {}).items()}
            call = {"tool": str(action.get("tool")), "args": args}
            if call not in found and call not in own:
                found.append(call)
    return found[:MAX_CANDIDATES]


def refused(denied: Denied) -> bool:
    return denied.raised is not None or error_of(denied.output) is not None


def policy(ctx: GateContext) -> GateResult:
    folder, layout = Folder(ctx.root), Layout(ctx.root)
    path = layout.design / POLICY
    if not folder.is_file(path):
        raise Unavailable("design/policy.py is missing: the design states no rule as a predicate (docs/proving.md, "
                          "'Executable policy')")
    source = folder.read_text(path, POLICY_BYTES)
    check_sandbox()
    bounds = limits(ctx)
    parts = folder_access.parts_under(ctx.root, ctx.out_dir)
    pure = pure_tools(ctx.root, ctx.out_dir / "tools")
    findings: list[Finding] = []
    for sample in ctx.samples:
        tried = candidates(sample, ctx.samples, pure)
        units = len(sample.get("actions") or []) + len(tried) + 2
        done = run_child(ctx.root, parts, sample, timeout_s=bounds.timeout_s * units, memory_mb=bounds.memory_mb,
                         disk_mb=bounds.disk_mb or DISK_MB, result_model=PolicyResult,
                         job={"mode": "policy", "policy_source": source, "candidates": tried})
        result = done.result
        if not isinstance(result, PolicyResult) or result.problem or not result.completed:
            why = (result.problem if isinstance(result, PolicyResult) and result.problem else
                   done.problem or ("timed out" if done.timed_out else f"exit {done.returncode}"))
            raise RuntimeError(f"sample {sample.get('id')}: the policy could not be checked: {why}")
        findings += _findings(sample, result, tried)
        ctx.sample_done()
    return GateResult({}, findings)


def _findings(sample: dict[str, Any], result: PolicyResult, tried: list[dict[str, Any]]) -> list[Finding]:
    sid = str(sample.get("id"))
    actions = [a for a in sample.get("actions") or [] if isinstance(a, dict)]
    found = []
    for v in result.violations:
        if 0 <= v.action < len(actions):
            call = call_text(v.action, actions[v.action])
            found.append(Finding.of(
                "policy", "L4", f"expected action {call} is one design/policy.py denies by rule {v.rule}: the gold "
                "breaks the policy (or the predicate misstates the rule); correct the sample, or the rule",
                sample=sid, rule=v.rule, defect="policy_violation", action=call,
                evidence=f"decide(data, {actions[v.action].get('tool')!r}, ...) -> {v.rule!r}"))
    for d in result.denied:
        if refused(d) or not 0 <= d.candidate < len(tried):
            continue
        call = call_text(-1, tried[d.candidate])[3:]  # "tool(args)", no number: it is no expected action
        found.append(Finding.of(
            "policy", "L4", f"{call} on this sample's data is denied by rule {d.rule}, which the tools must enforce "
            f"(design/policy.py's TOOLS_ENFORCE), yet the tool made it"
            + (" and changed the data" if d.changed else "") + ": an agent that skips the rule is not stopped; the "
            "tool must refuse it", sample=sid, rule=d.rule, defect="loophole", action=call,
            evidence=f"output {str(d.output)[:200]}"))
    return found


register(FunctionGate("policy", policy))

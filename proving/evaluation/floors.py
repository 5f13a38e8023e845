"""The floor gate (issue 31, item 1): agents that should score 0 on every sample, as the exported task runs and
scores them (in baton's harness: gate_harness.py).

- ``do_nothing``: Inspect's ``mockllm/model``, which answers with a fixed text and calls no tool;
- ``refuse_all``: records a refusal (or an escalation) for every request, with the tool the scenario has for it,
  or only says it refuses when there is none;
- ``reckless``: calls every state-changing tool with the arguments of other requests.

The two last are deterministic solvers of the export's runtime (``-T agent=refuse_all``, runtime/agents.py), whose
calls the harness makes as the export would; ``do_nothing`` makes none. None
of them converses: on a conversational sample they act at once, refuse_all and reckless knowing every fact the
user would give when asked, so a shortcut the scorer lets through is found there too.
A sample any of them passes is a finding: its right outcome is not observable in the final state (L1 when the
scenario has no tool that records a refusal, an escalation tool included, so the design must add one), or the
scorer accepts a shortcut (L4).
"""

from __future__ import annotations

from typing import Any

from proving.evaluation.coverage import LOOKING, REFUSAL, REFUSING
from proving.evaluation.exported import RunOutcome
from proving.evaluation.gate_harness import run_agents, tool_schemas
from proving.evaluation.gates import GateContext, GateResult, Keyed, Part, SplitGate, ordered, register
from proving.evaluation.quality import Finding

AGENTS = ("do_nothing", "refuse_all", "reckless")


def floor_runs(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every sample once per floor agent, as runs of the export (ids ``<sample>~<agent>``)."""
    return [{"id": f"{s['id']}~{agent}", "sample": s["id"], "agent": agent} for agent in AGENTS for s in samples]


def changes_nothing(sample: dict[str, Any]) -> bool:
    """The sample's right outcome is that nothing changes: its expected actions only look."""
    return all(LOOKING.match(str(a.get("tool", ""))) for a in sample.get("actions", []))


def _calls(outcome: RunOutcome) -> str:
    made = [f"{c.get('tool')}({', '.join(f'{k}={v!r}' for k, v in (c.get('args') or {}).items())})"
            + (" -> error" if c.get("error") or _failed(c.get("output")) else "") for c in outcome.calls]
    return "; ".join(made) or "no call"


def _failed(output: Any) -> bool:
    return isinstance(output, dict) and "error" in output


def why(agent: str, sample: dict[str, Any], outcome: RunOutcome, recorder: str | None,
        refusal_recorder: str | None = None) -> str:
    nothing = changes_nothing(sample)
    if agent == "do_nothing" or (agent == "refuse_all" and recorder is None):
        if nothing:
            if refusal_recorder:
                fix = f"record the refusal with a tool in its expected actions (this scenario has {refusal_recorder})"
            elif recorder:
                fix = (f"this scenario can only escalate ({recorder}), not record a refusal: the design needs a "
                       "tool that records one, and the sample must use it")
            else:
                fix = "the design needs a tool that records a refusal or an escalation, and the sample must use it"
            return (f"{agent} passed it ({_calls(outcome)}): its right outcome is that nothing changes, so nothing "
                    f"in the final state tells a refusal from doing nothing; {fix}")
        return (f"{agent} passed it ({_calls(outcome)}) although its expected actions change the data: the scorer "
                "does not check their effects")
    if agent == "refuse_all":
        return (f"refuse_all passed it ({_calls(outcome)}): refusing or escalating every request with {recorder} "
                "gives this sample's expected outcome, so nothing tells its decision from a blanket one; the scorer "
                "should check what only a right decision records (the rule applied, say)")
    return (f"reckless passed it ({_calls(outcome)}): acting on other requests' ids and amounts left the final "
            "state as expected" + (" (its calls failed, and the right outcome is that nothing changes)" if nothing
                                   else "; the scorer does not check these calls' effects"))


def floor_part(ctx: GateContext, samples: list[dict[str, Any]]) -> Part:
    """The floor agents on ``samples``: how many each passed, and a finding for each pass."""
    recorders = sorted(t["name"] for t in tool_schemas(ctx) if REFUSING.search(t["name"]))
    recorder = recorders[0] if recorders else None
    # Only a tool that records a refusal lets a sample whose right answer is "no" show it: an escalation
    # hands the request on, which is another answer.
    refusal_recorder = next((name for name in recorders if REFUSAL.search(name)), None)
    outcomes = run_agents(ctx, "floor", floor_runs(samples))
    place = {str(s["id"]): i for i, s in enumerate(ctx.samples)}
    part = Part(counts={"samples": len(samples)})
    for number, agent in enumerate(AGENTS):
        passed = [s for s in samples if outcomes[f"{s['id']}~{agent}"].passed]
        part.counts[agent] = len(passed)
        for sample in passed:
            layer = "L1" if refusal_recorder is None and changes_nothing(sample) else "L4"
            outcome = outcomes[f"{sample['id']}~{agent}"]
            detail = why(agent, sample, outcome, recorder, refusal_recorder)
            finding = Finding.of("floor", layer, detail, sample=str(sample["id"]), defect="shortcut",
                                 evidence=f"{agent}: {_calls(outcome)}")
            part.findings.append(Keyed(key=[number, place.get(str(sample["id"]), -1)], finding=finding))
    return part


def floor_merge(ctx: GateContext, parts: list[Part]) -> GateResult:
    """Each agent's share of every sample it passed, from the parts' counts."""
    total = sum(p.counts.get("samples", 0) for p in parts)
    figures = {agent: round(sum(p.counts.get(agent, 0) for p in parts) / total, 4) if total else 0.0
               for agent in AGENTS}
    return GateResult({"floor": figures}, ordered(parts))


register(SplitGate("floor", floor_part, floor_merge))

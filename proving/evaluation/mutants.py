"""The mutation gate (issue 31, item 2): trajectories one mistake away from each sample's expected one must
score 0 on the exported task.

For each sample, its mutants (``mutants_of``, at most ``ProvingSettings.max_mutants_per_sample``, chosen the
same way every time): each state-changing action dropped; one extra state-changing call (another sample's);
each argument of a state-changing action changed to a plausible wrong value (another id the samples give
that parameter, a number off by a tenth; free text is left alone, as the scorer accepts any words). The
export's ``script`` agent's calls are made in baton's harness (gate_harness.py, one process per sample), and the
task's own scoring judges them against the ORIGINAL sample.

A mutant that passes survives, and is a finding naming what the scorer does not check, unless the tool
itself refused the mistake (an error, or an output with an ``error`` key): then nothing wrong happened, and
the mutant counts as killed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proving.evaluation.coverage import IDENTIFIER, LOOKING
from proving.evaluation.errors import refused
from proving.evaluation.exported import RunOutcome
from proving.evaluation.gate_harness import run_agents
from proving.evaluation.gates import GateContext, GateResult, Keyed, Part, SplitGate, ordered, register
from proving.evaluation.purity import pure_tools
from proving.evaluation.quality import Finding

FRACTION = 0.9  # a changed number: 10% less (a partial refund for a full one, say)


@dataclass(frozen=True)
class Mutant:
    id: str  # <sample>~drop-2, <sample>~arg-2-amount, <sample>~extra
    sample: str
    actions: list[dict[str, Any]]
    mistake: str  # what was changed, in words
    call: dict[str, Any] | None = None  # the changed or added call (None for a drop)
    action: str | None = None  # the expected action the mistake is made on, "<n>: tool(...)" (None: an extra call)

    def run(self) -> dict[str, Any]:
        return {"id": self.id, "sample": self.sample, "agent": "script", "actions": self.actions}


def changing(action: dict[str, Any], pure: frozenset[str] = frozenset()) -> bool:
    """Whether the action may change the state: not a lookup, nor a pure tool's (purity.py)."""
    tool = str(action.get("tool", ""))
    return not LOOKING.match(tool) and tool not in pure


def _call(action: dict[str, Any]) -> str:
    return f"{action['tool']}({', '.join(f'{k}={v!r}' for k, v in (action.get('args') or {}).items())})"


def wrong_value(name: str, value: Any, others: dict[str, list[Any]]) -> Any:
    """A plausible wrong value for argument ``name``, None when there is none to try."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        changed = round(value * FRACTION, 2) if value else 1
        return int(changed) if isinstance(value, int) and int(changed) != value else changed
    if isinstance(value, str) and IDENTIFIER.match(value):
        return next((v for v in others.get(name, []) if v != value and isinstance(v, str)), None)
    return None  # free text: the scorer rightly accepts other words


def mutants_of(sample: dict[str, Any], samples: list[dict[str, Any]], limit: int,
               pure: frozenset[str] = frozenset()) -> list[Mutant]:
    sid = str(sample["id"])
    actions = [dict(a) for a in sample.get("actions", []) if isinstance(a, dict) and "tool" in a]
    index = next((i for i, s in enumerate(samples) if s.get("id") == sample.get("id")), 0)
    others = samples[index + 1:] + samples[:index]
    values: dict[str, list[Any]] = {}
    for other in others:
        for action in other.get("actions", []):
            for key, value in (action.get("args") or {}).items():
                values.setdefault(key, []).append(value)
    found: list[Mutant] = []
    for i, action in enumerate(actions):
        if changing(action, pure):
            found.append(Mutant(f"{sid}~drop-{i + 1}", sid, actions[:i] + actions[i + 1:],
                                f"dropping action {i + 1} ({action['tool']})", action=f"{i + 1}: {_call(action)}"))
    extra = next((dict(a) for s in others for a in s.get("actions", []) if changing(a, pure) and a not in actions),
                 None)
    if extra is not None:
        found.append(Mutant(f"{sid}~extra", sid, [*actions, extra], f"an extra call {_call(extra)} at the end",
                            extra))
    for i, action in enumerate(actions):
        if not changing(action, pure):
            continue
        for key, value in (action.get("args") or {}).items():
            wrong = wrong_value(key, value, values)
            if wrong is None:
                continue
            changed = {**action, "args": {**action["args"], key: wrong}}
            found.append(Mutant(f"{sid}~arg-{i + 1}-{key}", sid, actions[:i] + [changed] + actions[i + 1:],
                                f"changing {key} of action {i + 1} ({action['tool']}) from {value!r} to {wrong!r}",
                                changed, action=f"{i + 1}: {_call(action)}"))
    return found[:limit]


def refused_by_the_tool(mutant: Mutant, outcome: RunOutcome) -> bool:
    """The mistaken call never did anything: Inspect or the tool rejected it."""
    if mutant.call is None:
        return False
    made = [c for c in outcome.calls if c.get("tool") == mutant.call["tool"] and c.get("args") == mutant.call["args"]]
    return not made or any(refused(c) for c in made)  # an error however the tool says it (errors.py)


def detail(mutant: Mutant) -> str:
    if mutant.call is None:
        return f"{mutant.mistake} still passes: its effect is not recorded in the data, or not checked"
    if mutant.id.endswith("~extra"):
        return f"{mutant.mistake} still passes: its effect is not recorded in the data, or not checked"
    return f"{mutant.mistake} still passes: the scorer does not check this argument's effect"


def mutation_part(ctx: GateContext, samples: list[dict[str, Any]]) -> Part:
    """The mutants of ``samples`` (from every sample's values): how many, and a finding for each survivor."""
    limit = ctx.settings.max_mutants_per_sample
    place = {str(s["id"]): i for i, s in enumerate(ctx.samples)}
    pure = pure_tools(ctx.root, ctx.out_dir / "tools")  # calculate and the like: read-only, as lookups are
    everything = [(place.get(str(s["id"]), -1), number, m) for s in samples
                  for number, m in enumerate(mutants_of(s, ctx.samples, limit, pure))]
    part = Part(counts={"mutants": len(everything), "survivors": 0})
    if not everything:
        return part
    outcomes = run_agents(ctx, "mutation", [m.run() for _, _, m in everything])
    for sample, number, mutant in everything:
        outcome = outcomes[mutant.id]
        if outcome.passed and not refused_by_the_tool(mutant, outcome):
            part.counts["survivors"] += 1
            finding = Finding.of("mutation", "L4", detail(mutant), sample=mutant.sample, defect="scorer_gap",
                                 action=mutant.action, evidence=f"the mutant passed: {mutant.mistake}")
            part.findings.append(Keyed(key=[sample, number], finding=finding))
    return part


def mutation_merge(ctx: GateContext, parts: list[Part]) -> GateResult:
    """The share of every mutant the scorer rejected, from the parts' counts."""
    total = sum(p.counts.get("mutants", 0) for p in parts)
    if not total:
        return GateResult({"mutation_score": None, "mutants": 0})
    killed = total - sum(p.counts.get("survivors", 0) for p in parts)
    return GateResult({"mutation_score": round(killed / total, 4), "mutants": total}, ordered(parts))


register(SplitGate("mutation", mutation_part, mutation_merge))

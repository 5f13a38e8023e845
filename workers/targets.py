"""Whether an iteration met every target (docs/proving.md): the loop's "done", said in words when it is not.

The targets are all of: the success rate of Execute's own evaluation, the floor (no floor agent passes more than
``target_floor`` of the samples), the blind solver's solvable share and the rules' coverage. The rule for a gate
that did not measure its figure:

- a gate left out of ``[proving] gates`` is not asked for: its target is *not measured* (shown as such), not met;
- a gate that is configured but could not run (no Inspect, no solver model) or failed *misses* its target, with
  its reason: a scenario is not called done on a figure nobody measured.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from proving.evaluation.quality import Quality
from scenarios.run import RunRecord

TARGET_GATES = {"floor": "floor", "solvable share": "solver", "coverage": "coverage"}
RUNNABLE = "; make it runnable or leave it out of [proving] gates in scenario.toml"


def without_reasons(unmet: str, skipped: dict[str, str]) -> str:
    """A missed target in words without why its gate did not run (``skipped``: gate -> why), for a view that
    says each reason once for every gate and iteration it stopped (issue 38: Inspect missing, said 21 times)."""
    for gate, why in skipped.items():
        unmet = unmet.replace(f"the {gate} gate did not run ({why}){RUNNABLE}", f"the {gate} gate did not run")
    return unmet


def unmet_targets(record: RunRecord, success_rate: float, quality: Quality, gates: list[str]) -> list[str]:
    """Each target the iteration missed, in words (empty: done)."""
    unmet = []
    if success_rate < record.target_success_rate:
        unmet.append(f"success rate {success_rate:.0%} < target {record.target_success_rate:.0%}")
    figures = quality.figures
    for target, gate in TARGET_GATES.items():
        if gate not in gates:
            continue
        if gate in quality.skipped:
            unmet.append(f"{target} not measured: the {gate} gate did not run ({quality.skipped[gate]}){RUNNABLE}")
            continue
        if gate == "floor" and figures.floor is not None:
            over = {agent: share for agent, share in figures.floor.items() if share > record.target_floor}
            if over:
                shown = ", ".join(f"{agent} {share:.0%}" for agent, share in sorted(over.items()))
                unmet.append(f"floor: {shown} > target {record.target_floor:.0%}")
        elif gate == "solver" and figures.solver is not None:
            share = figures.solver.solvable_share
            if share < record.target_solvable_share:
                unmet.append(f"solvable share {share:.0%} < target {record.target_solvable_share:.0%}")
        elif gate == "coverage" and figures.coverage is not None:
            if figures.coverage < record.target_coverage:
                unmet.append(f"coverage {figures.coverage:.0%} < target {record.target_coverage:.0%}")
        elif gate in quality.ran:
            unmet.append(f"{target} not measured: the {gate} gate ran but reported no figure")
    return unmet


def not_measured(gates: list[str]) -> list[str]:
    """The targets no configured gate measures."""
    return [target for target, gate in TARGET_GATES.items() if gate not in gates]


def figure_summary(quality: Quality) -> dict[str, Any]:
    """The few numbers run.json keeps per iteration and status shows (None: not measured)."""
    figures = quality.figures
    solver = figures.solver
    return {
        "floor": max(figures.floor.values()) if figures.floor else (0.0 if figures.floor == {} else None),
        "floor_agents": figures.floor,
        "mutation_score": figures.mutation_score,
        "solvable_share": solver.solvable_share if solver else None,
        "pass_hat_k": solver.pass_hat_k if solver else None,
        "solver": None if solver is None else
        f"{solver.model}{' (SIMULATED)' if solver.simulated else ''} k={solver.k}",
        "coverage": figures.coverage,
        "duplicates": figures.duplicates,
        "findings": len(quality.findings),
        "defects": dict(Counter(f.defect for f in quality.findings).most_common()),  # defect -> findings naming it
        "ran": list(quality.ran),
        "skipped": dict(quality.skipped),
    }

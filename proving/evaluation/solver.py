"""The solver gate (issue 31, items 3 and 4): a blind solver runs each sample k times on the exported task.

It is exactly a ``baton try`` with the solver model (``ProvingSettings.solver_model``, any Inspect model
string; ``solver_k`` epochs): the model sees what the model under test sees (the policy, the tools, the
sample's instruction; on a conversational sample, the same user simulator as ``baton try``, ``ProvingSettings.
user_simulator``), never the expected actions, the checkers or the design notes, and the task's own scorer
judges it. pass^k per sample is tryout's (``tryout._summarise``). A sample never solved in k tries goes back as
an L1 finding, unsolvable or ambiguous, with the first point where the solver's calls left the expected ones.

With no solver model configured, the simulated model plays the blind solver where it has a blind script for
the task (``baton/simulated``, proving/evaluation/blind_model.py), and its figures say SIMULATED; a run through
``baton fake-api`` (``anthropic/...`` with ANTHROPIC_BASE_URL) is recognised by its ``[simulated]`` replies.
With a panel (``ProvingSettings.panel``), each model runs the same k tries: ``figures.difficulty`` holds each
one's pass rate. What the solver and the panel asked and spent is written to the iteration's
``proving_logs/solver.json`` (``SolverRecord``), from Inspect's log.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from pydantic import BaseModel, Field

from proving.evaluation import blind
from proving.evaluation.compare import free_text, same, short
from proving.evaluation.coverage import LOOKING
from proving.evaluation.exported import CALLS, LOGS, task_folder
from proving.evaluation.gates import FunctionGate, GateContext, GateResult, Unavailable, register
from proving.evaluation.quality import Finding, SolverFigures
from proving.export.tryout import Tryout, TryoutError, _summarise, by_baton, eval_export
from scenarios.folder import RECORD_BYTES, Folder

DOUBLE_MAX_TOKENS = 4096
RECORD = "solver.json"  # in proving_logs/: the solver's and the panel's requests, tokens and time
NO_SOLVER = ("no solver model is configured ([proving] solver_model in scenario.toml: any Inspect model string, "
             "preferably of another provider than the agents') and the simulated model has no blind script for "
             "this task (scenarios/_simulations/blind/: {known})")


class ModelSpend(BaseModel):
    model: str
    simulated: bool
    requests: int  # model calls, over every sample and try
    tokens: dict[str, dict[str, int]] = Field(default_factory=dict)  # model -> Inspect's usage (input, output...)
    duration_s: float
    pass_rate: float
    per_sample: dict[str, float] = Field(default_factory=dict)
    log: str


class SolverRecord(BaseModel):
    """What the gate asked and spent, as status and spend read it (a file, not an event of the agents')."""

    iteration: int
    k: int
    solver: ModelSpend
    panel: list[ModelSpend] = Field(default_factory=list)
    difficulty: str | None = None  # with a panel: solved by the strongest, spread across the panel


def difficulty(panel: list[ModelSpend]) -> str | None:
    """The panel in one line: what its strongest model solves, and how far apart the models are."""
    if not panel:
        return None
    strongest = max(panel, key=lambda p: p.pass_rate)
    solved = sum(rate > 0 for rate in strongest.per_sample.values())
    rates = [p.pass_rate for p in panel]
    return (f"the strongest of the panel, {strongest.model}, solves {solved} of {len(strongest.per_sample)} "
            f"sample(s) (pass rate {strongest.pass_rate:.0%}); spread across the panel {min(rates):.0%}"
            f"-{max(rates):.0%}")


# ---- where a trajectory left the expected one ----------------------------------------------------


def call_text(tool: str, args: dict[str, Any], free: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    shown = ", ".join(f"{k}=" + ("<text>" if isinstance(v, str) and v in free else short(v)) for k, v in args.items())
    return f"{tool}({shown})"


def same_call(expected: dict[str, Any], call: dict[str, Any], free: set[str]) -> bool:
    """The call is the expected action: the same tool, the same arguments (text the agent writes itself, a
    reason or a note, only has to be some text)."""
    want, got = expected.get("args") or {}, call.get("args") or {}
    if expected.get("tool") != call.get("tool") or want.keys() != got.keys():
        return False
    return all(isinstance(got[k], str) if isinstance(v, str) and v in free else same(v, got[k])
               for k, v in want.items())


def first_divergence(expected: list[dict[str, Any]], calls: list[dict[str, Any]], free: set[str]) -> str:
    """Where the solver's calls first left the expected actions, in words (actions counted from 1).

    Calls that change the data are compared in order; lookups (``get_...``, ``list_...``: coverage.LOOKING)
    change nothing, so one made in another order, or left out where the solver knew enough, is no divergence
    unless every change matched (then the first lookup left out is named)."""
    if expected and not calls:
        first = call_text(expected[0]["tool"], expected[0].get("args") or {}, free)
        return f"first divergence at action 1: expected {first}, the solver stopped without calling any tool"
    acting = [c for c in calls if not LOOKING.match(str(c.get("tool", "")))]
    made, skipped = 0, None
    for i, want in enumerate(expected):
        asked = call_text(want["tool"], want.get("args") or {}, free)
        if LOOKING.match(str(want["tool"])):
            if skipped is None and not any(same_call(want, c, free) for c in calls):
                skipped = f"first divergence at action {i + 1}: expected {asked}, the solver never made that call"
            continue
        if made >= len(acting):
            return f"first divergence at action {i + 1}: expected {asked}, the solver stopped after {_listed(calls)}"
        if not same_call(want, acting[made], free):
            failed = " (which failed)" if acting[made].get("error") else ""
            return (f"first divergence at action {i + 1}: expected {asked}, the solver called "
                    f"{call_text(str(acting[made].get('tool')), acting[made].get('args') or {})}{failed}")
        made += 1
    if made < len(acting):
        extra = acting[made]
        return (f"first divergence after the {len(expected)} expected action(s): the solver also called "
                f"{call_text(str(extra.get('tool')), extra.get('args') or {})}")
    if skipped:
        return f"{skipped} (its changes were the expected ones)"
    return "no divergence: the solver made the expected calls, and the scorer still rejected the outcome"


def _listed(calls: list[dict[str, Any]]) -> str:
    return ", ".join(call_text(str(c.get("tool")), c.get("args") or {}) for c in calls)


def trajectory(sample_log: Any) -> list[dict[str, Any]]:
    """The calls one try made, as the task kept them (its store), else as the model asked for them."""
    kept = (sample_log.store or {}).get(CALLS)
    if isinstance(kept, list):
        return [c for c in kept if isinstance(c, dict)]
    return [{"tool": c.function, "args": dict(c.arguments)} for m in sample_log.messages
            if m.role == "assistant" for c in (m.tool_calls or [])]


# ---- the gate --------------------------------------------------------------------------------------


def choose_solver(ctx: GateContext) -> str:
    if ctx.settings.solver_model:
        return ctx.settings.solver_model
    spec = json.loads(Folder(ctx.root).read_text(task_folder(ctx) / "scenario.json", RECORD_BYTES))
    if blind.script_for(spec.get("policy", ""), {t["name"] for t in spec.get("tools", [])}) is None:
        raise Unavailable(NO_SOLVER.format(known=", ".join(blind.known_scripts()) or "none"))
    return blind.MODEL


def inspect_model(model: str, environ: Mapping[str, str] = os.environ) -> Any:
    """The model as Inspect gets it: its string, or for ``anthropic/...`` served on this machine (``baton
    fake-api``, ANTHROPIC_BASE_URL on a loopback address) a model that does not stream, which the double does
    not do (Inspect streams any request of 8192 output tokens or more, the SDK refuses one that long unstreamed)."""
    host = urlparse(environ.get("ANTHROPIC_BASE_URL", "")).hostname or ""
    if model.startswith("anthropic/") and (host == "localhost" or host.startswith("127.") or host == "::1"):
        from inspect_ai.model import GenerateConfig, get_model

        # The SDK refuses a non-streamed request that may take over 10 minutes (max_tokens 32000, Inspect's
        # default): a blind solver's turn is a few calls.
        return get_model(model, config=GenerateConfig(max_tokens=DOUBLE_MAX_TOKENS), streaming=False)
    return model


def run_model(ctx: GateContext, model: str) -> tuple[Tryout, Any, ModelSpend]:
    """k tries of every sample with ``model`` on the export: tryout's summary, the log, what it spent."""
    user = ctx.settings.user_simulator  # a conversation's user: the same for the solver and the panel
    if by_baton(model) or by_baton(user):
        import proving.evaluation.blind_model  # noqa: F401 - registers the provider in this process
    task = task_folder(ctx)
    k = ctx.settings.solver_k
    started = time.monotonic()
    try:
        log = eval_export(task, inspect_model(model), k, ctx.out_dir / LOGS, {"user": user})
    except TryoutError as exc:
        raise Unavailable(f"the solver model cannot run: {exc}") from None
    took = time.monotonic() - started
    tryout = _summarise(ctx.root.name, ctx.iteration, model, None, k, log, took, task / "task.py")
    replies = [m for s in log.samples for m in s.messages if m.role == "assistant"]
    simulated = model == blind.MODEL or any(m.text.startswith(blind.LABEL) for m in replies)
    usage = {name: {k: v for k, v in u.model_dump(exclude_none=True).items() if isinstance(v, int)}
             for name, u in (log.stats.model_usage or {}).items()}
    spend = ModelSpend(model=model, simulated=simulated, requests=len(replies), tokens=usage,
                       duration_s=round(took, 3), pass_rate=tryout.pass_rate,
                       per_sample={s.id: s.pass_rate for s in tryout.samples}, log=str(log.location))
    return tryout, log, spend


def _solver(ctx: GateContext) -> GateResult:
    model = choose_solver(ctx)
    k = ctx.settings.solver_k
    tryout, log, spend = run_model(ctx, model)
    panel = [run_model(ctx, m)[2] for m in ctx.settings.panel]
    Folder(ctx.root).write_json(ctx.out_dir / LOGS / RECORD,
                                SolverRecord(iteration=ctx.iteration, k=k, solver=spend, panel=panel,
                                             difficulty=difficulty(panel)).model_dump(mode="json"))
    by_id = {str(s["id"]): s for s in ctx.samples}
    initial = json.loads(Folder(ctx.root).read_text(task_folder(ctx) / "tools" / "data.json", RECORD_BYTES))
    findings = [unsolved(by_id.get(s.id, {"id": s.id}), s.failures, _tries(log, s.id), k, initial, panel,
                         simulated=spend.simulated)
                for s in tryout.samples if s.passes == 0]
    figures = SolverFigures(model=model, simulated=spend.simulated, k=k, pass_hat_k=tryout.pass_hat[str(k)],
                            solvable_share=sum(s.passes > 0 for s in tryout.samples) / len(tryout.samples),
                            per_sample=spend.per_sample)
    result: dict[str, Any] = {"solver": figures}
    if panel:
        result["difficulty"] = {p.model: p.pass_rate for p in panel}
    return GateResult(result, findings)


def _tries(log: Any, sample_id: str) -> list[list[dict[str, Any]]]:
    return [trajectory(s) for s in sorted(log.samples, key=lambda s: s.epoch) if str(s.id) == sample_id]


def unsolved(sample: dict[str, Any], failures: list[str], tries: list[list[dict[str, Any]]], k: int,
             initial: Any, panel: list[ModelSpend], *, simulated: bool = False) -> Finding:
    """The finding of a sample no try solved: where the first try left the expected actions, what the scorer
    said, and how the panel fared with it."""
    expected = list(sample.get("actions") or [])
    where = first_divergence(expected, tries[0] if tries else [], free_text(expected, initial))
    scorer = (failures[0] if failures else "").replace("\n", " ").strip()
    who = "the SIMULATED blind solver" if simulated else "the blind solver"
    lacking = ("the user may not hold or not give a fact the task needs" if isinstance(sample.get("user"), dict)
               else "the instruction may lack a fact the task needs")
    detail = (f"unsolved in {k} tries by {who}; unsolvable or ambiguous ({lacking}, or the expected actions "
              f"contradict the policy): {where}"
              + (f"; the scorer: {scorer[:300]}" if scorer else ""))
    if panel:
        rates = sorted(((p.per_sample.get(str(sample.get("id")), 0.0), p.model) for p in panel), reverse=True)
        detail += "; panel: " + ", ".join(f"{m} {r:.0%}" for r, m in rates)
    return Finding.of("solver", "L1", detail, sample=str(sample.get("id")), defect="unsolved",
                      evidence=f"{who}: {where}")


register(FunctionGate("solver", _solver))

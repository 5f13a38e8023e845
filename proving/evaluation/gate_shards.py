"""An iteration's gates as shards of work that any worker can run, and their merge (SPEC §8: "the gates are
distributed work too"; the tasks are workers/gate_tasks.py, the loop's ``do_proving`` plans and merges).

A *plan* is what the gates of one iteration are to do: per configured gate, its shards (a gate that splits by
sample, floor and mutation, into runs of ``shard_samples`` samples; the others into one). It is named by a digest
of what it depends on (the iteration's report.json as the evaluation left it, the proving settings, the samples'
ids), so a re-evaluated iteration gets a new plan and an old shard's file is never taken for a new one's.

Each shard's result is one file, ``state/gates/iteration_<n>/<plan>/<gate>-<k>.json``, written atomically once the
shard is done, in ``state/`` where no agent can write: a shard whose file is there is done (a duplicate or a
re-delivered task finds it and does nothing), one whose file is not is run again by whoever is asked (a killed
worker's shard is taken over when the loop re-plans). The merge reads every file and computes the figures from
the parts' counts (``gates.SplitGate``), so it gives what one whole run gives, in the same order.
While a shard runs, ``<gate>-<k>.progress`` counts its samples done, for the progress line.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from proving.evaluation.gates import GATES, GateContext, Part, ProvingSettings, assemble, attempt, load_gates
from proving.evaluation.quality import Quality
from proving.evaluation.samples import load_samples
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import Layout, StoreError

ACTIVITY = "activity"  # state/gates/activity: touched by every shard as it goes (the reaper reads its time)


class ShardFile(BaseModel):
    """One shard's result as written in state/."""

    plan: str
    gate: str
    shard: int
    shards: int
    samples: list[str]
    part: Part | None = None
    skipped: str | None = None  # why the gate did not run (unavailable here, or failed): the whole gate is skipped


def gates_dir(root: Path) -> Path:
    return Layout(root).root / "state" / "gates"


def activity_path(root: Path) -> Path:
    return gates_dir(root) / ACTIVITY


@dataclass(frozen=True)
class Plan:
    root: Path
    iteration: int
    settings: ProvingSettings
    samples: tuple[str, ...]  # every valid sample's id, in the gates' order
    id: str

    @classmethod
    def of(cls, root: Path, iteration: int, settings: ProvingSettings) -> Plan:
        """The plan of the iteration as it is on disk now (StoreError if its report cannot be read)."""
        layout = Layout(root)
        report = Folder(root).read_bytes(layout.outputs(iteration) / "report.json", RECORD_BYTES)
        ids = tuple(str(f.raw["id"]) for f in load_samples(Path(root), layout.outputs(iteration) / "samples")
                    if f.raw and "id" in f.raw)
        digest = hashlib.sha256()
        for piece in (report, settings.model_dump_json().encode(), json.dumps(ids).encode(), str(iteration).encode()):
            digest.update(hashlib.sha256(piece).digest())
        return cls(Path(root), iteration, settings, ids, digest.hexdigest()[:16])

    @property
    def folder(self) -> Path:
        return gates_dir(self.root) / f"iteration_{self.iteration}" / self.id

    def shards(self, gate: str) -> int:
        load_gates()
        known = GATES.get(gate)
        if known is None or not known.splits or not self.samples:
            return 1
        return math.ceil(len(self.samples) / self.settings.shard_samples)

    def samples_of(self, gate: str, shard: int) -> list[str]:
        if self.shards(gate) == 1:
            return list(self.samples)
        size = self.settings.shard_samples
        return list(self.samples[shard * size:(shard + 1) * size])

    def work(self) -> list[tuple[str, int]]:
        """Every (gate, shard) of the plan, in the order they are best started: the slowest gates first."""
        slow_first = sorted(self.settings.gates, key=lambda g: (g != "solver", g not in ("mutation", "floor")))
        return [(gate, k) for gate in slow_first for k in range(self.shards(gate))]

    def path(self, gate: str, shard: int) -> Path:
        return self.folder / f"{gate}-{shard}.json"

    def read(self, gate: str, shard: int) -> ShardFile | None:
        """The shard's result if it is there and is this plan's (a damaged or foreign file counts as missing)."""
        try:
            done = ShardFile.model_validate_json(Folder(self.root).read_bytes(self.path(gate, shard), RECORD_BYTES))
        except (OSError, ValueError, ValidationError):  # StoreError is a ValueError
            return None
        expected = (self.id, gate, shard, self.shards(gate), self.samples_of(gate, shard))
        return done if (done.plan, done.gate, done.shard, done.shards, done.samples) == expected else None

    def missing(self) -> list[tuple[str, int]]:
        return [(gate, k) for gate, k in self.work() if self.read(gate, k) is None]

    def progress(self) -> dict[str, tuple[int, int]]:
        """Per gate: (samples done, samples in all), counting a running shard's samples as it reports them."""
        found: dict[str, tuple[int, int]] = {}
        folder = Folder(self.root)
        for gate in self.settings.gates:
            done = 0
            for k in range(self.shards(gate)):
                if self.read(gate, k) is not None:
                    done += len(self.samples_of(gate, k))
                    continue
                try:
                    said = int(folder.read_text(self.folder / f"{gate}-{k}.progress", 64).strip() or 0)
                except (OSError, ValueError):
                    said = 0
                done += min(said, len(self.samples_of(gate, k)))
            found[gate] = (done, len(self.samples))
        return found

    def merge(self) -> Quality:
        """The quality the shards add up to (ValueError if one is missing: the loop plans again)."""
        absent = self.missing()
        if absent:
            raise ValueError(f"gate shards not done: {', '.join(f'{g} {k + 1}/{self.shards(g)}' for g, k in absent)}")
        ctx = GateContext.load(self.root, self.iteration, self.settings)
        outcomes: dict[str, Any] = {}
        for gate in self.settings.gates:
            files = [self.read(gate, k) for k in range(self.shards(gate))]
            skipped = next((f.skipped for f in files if f is not None and f.skipped), None)
            if skipped is not None:
                outcomes[gate] = skipped
                continue
            parts = [f.part for f in files if f is not None and f.part is not None]
            outcomes[gate] = attempt(gate, lambda known: known.merge(ctx, parts))
        return assemble(self.settings, outcomes)


def run_shard(plan: Plan, gate: str, shard: int, on_progress: Callable[[int], None] | None = None) -> ShardFile:
    """Run one shard of the plan and write its file; a shard already done is read, not run again."""
    done = plan.read(gate, shard)
    if done is not None:
        return done
    folder = Folder(plan.root)
    ids = plan.samples_of(gate, shard)
    ctx = GateContext.load(plan.root, plan.iteration, plan.settings)
    ctx.shard = f".{shard + 1}" if plan.shards(gate) > 1 else ""
    count = [0]

    def sample_done() -> None:
        count[0] += 1
        folder.write_atomic(plan.folder / f"{gate}-{shard}.progress", str(count[0]))
        folder.write_atomic(activity_path(plan.root), f"{plan.id} {gate} {shard}")
        if on_progress is not None:
            on_progress(count[0])

    ctx.on_sample = sample_done
    folder.write_atomic(activity_path(plan.root), f"{plan.id} {gate} {shard}")
    chosen = [s for s in ctx.samples if str(s["id"]) in set(ids)]
    outcome = attempt(gate, lambda known: known.part(ctx, chosen))
    result = ShardFile(plan=plan.id, gate=gate, shard=shard, shards=plan.shards(gate), samples=ids,
                       part=outcome if isinstance(outcome, Part) else None,
                       skipped=outcome if isinstance(outcome, str) else None)
    folder.write_json(plan.path(gate, shard), result.model_dump(mode="json", by_alias=True))
    folder.write_atomic(activity_path(plan.root), f"{plan.id} {gate} {shard} done")
    return result


def prove_in_shards(root: Path, iteration: int, settings: ProvingSettings) -> Quality:
    """Every shard not yet done, in this process, then the merge: what the tasks do, without a broker."""
    plan = Plan.of(root, iteration, settings)
    for gate, shard in plan.missing():
        run_shard(plan, gate, shard)
    return plan.merge()


def progress_line(root: Path, iteration: int, settings: ProvingSettings) -> str | None:
    """``gates: floor 20/30 samples, mutation 10/30, ...`` for the iteration's current plan, None without one."""
    try:
        plan = Plan.of(root, iteration, settings)
    except (OSError, StoreError, ValueError):
        return None
    if not Folder(root).is_dir(plan.folder):
        return None
    shown = [f"{gate} {done}/{total}" for gate, (done, total) in plan.progress().items()]
    return "gates (samples done): " + ", ".join(shown)


def shard_label(plan: Plan, gate: str, shard: int) -> str:
    return f"{gate} shard {shard + 1}/{plan.shards(gate)}"



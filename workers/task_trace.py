"""Where each task's span hangs in the run's one trace (docs/deployment.md, "Tracing").

A run outlives every process, and so does an iteration: each is a span that ends as it begins, whose
context is kept on disk (``state/trace/run.json``, ``state/trace/iteration_<n>.json``), so a worker
that starts later, or a resumed run, hangs its spans in the same trace. A step's and a phase's task
carry their iteration's context in their Celery headers; a compaction carries the context of the
step that asked for it, so the summary call on the compaction worker is that step's child. A task
sent without headers (tracing was off in its sender) hangs from its iteration on disk.

Nothing here runs when tracing is off: ``agents.tracing.on()`` is checked first.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agents import tracing
from agents.outcomes import CompactionOutcome, StepOutcome
from scenarios import confined
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.run import load_run
from workers.loop import Task

HEADERS = ("traceparent", "tracestate")


def _kept(root: Path, path: Path, make: Callable[[], tracing.Carrier]) -> tracing.Carrier:
    """The context kept at ``path``, made (one span) and kept the first time; the first writer wins a race."""
    folder = Folder(root)
    kept = folder.read_json_or_none(path, RECORD_BYTES)
    if isinstance(kept, dict):
        return kept
    made = make()
    parts = folder.parts(path)
    with confined.directory(folder.root, parts[:-1], create=True) as dir_fd:
        tmp = f".{parts[-1]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(made, fh)
        try:
            # never replaces: a context another process kept stays the run's
            os.link(tmp, parts[-1], src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            kept = folder.read_json_or_none(path, RECORD_BYTES)
            if isinstance(kept, dict):  # a damaged file: this span goes on under its own context
                made = kept
        finally:
            os.unlink(tmp, dir_fd=dir_fd)
    return made


def iteration_parent(root: Path) -> tracing.Carrier:
    """The context of the run's current iteration (its run's and its own span made the first time)."""
    if not tracing.on():
        return {}
    record = load_run(root)
    folder = root / "state" / "trace"
    run = _kept(root, folder / "run.json", lambda: tracing.mark(
        f"run {root.name}", {"baton.scenario": root.name, "baton.profile": record.profile if record else None,
                             "openinference.span.kind": "CHAIN"}))
    n = record.iteration if record else 1
    return _kept(root, folder / f"iteration_{n}.json", lambda: tracing.mark(
        f"iteration {n}", {"baton.scenario": root.name, "baton.iteration": n, "openinference.span.kind": "CHAIN"},
        parent=run))


def headers_for(task: Task, root: Path) -> tracing.Carrier:
    """What ``task`` is sent with: a compaction hangs from the current span (the step that asked), a step or a
    phase from its iteration; nothing when tracing is off."""
    if not tracing.on():
        return {}
    return tracing.carrier() if task.kind == "compaction" else iteration_parent(root)


def received(request: Any) -> tracing.Carrier:
    """The trace headers a Celery task came with (custom headers land on its request)."""
    headers = getattr(request, "headers", None) or {}
    found = {name: getattr(request, name, None) or headers.get(name) for name in HEADERS}
    return {name: value for name, value in found.items() if isinstance(value, str)}


def _name(task: Task) -> str:
    if task.kind == "step":
        return f"step {task.agent} {task.number}"
    if task.kind == "compaction":
        return f"compaction {task.agent} after step {task.number}"
    return "phase"


@contextmanager
def task_span(task: Task, root: Path, sent: tracing.Carrier | None = None) -> Iterator[tracing.Span]:
    """The span of one task, a child of what it was sent with or else of its iteration on disk."""
    if not tracing.on():
        yield tracing.NOOP
        return
    parent = sent if sent and "traceparent" in sent else iteration_parent(root)
    attributes = {"baton.scenario": task.scenario, "baton.agent": task.agent, "baton.task": task.kind,
                  "baton.number": task.number}
    if task.kind == "step":
        attributes |= {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": task.agent,
                       "openinference.span.kind": "AGENT"}
    with tracing.span(_name(task), attributes, parent=parent) as live:
        yield live


def finish(live: tracing.Span, outcome: StepOutcome | CompactionOutcome | None, following: list[Task],
           root: Path) -> list[tracing.Carrier]:
    """Put the task's outcome on its span; the headers of the tasks that follow (taken inside the span, so a
    compaction is the child of the step that asked for it)."""
    if not tracing.on():
        return [{} for _ in following]
    if isinstance(outcome, StepOutcome):
        live.set({"baton.iteration": outcome.iteration, "baton.status": outcome.status, "baton.skip": outcome.skip,
                  "baton.context.tokens": outcome.tokens_in_context, "baton.context.threshold": outcome.threshold,
                  "baton.stop_reason": outcome.stop_reason, "baton.model": outcome.model})
    elif isinstance(outcome, CompactionOutcome):
        live.set({"baton.status": outcome.status, "baton.skip": outcome.skip,
                  "baton.compaction.trigger": outcome.trigger, "baton.compaction.fallback": outcome.fallback,
                  "baton.compaction.tokens_before": outcome.tokens_before,
                  "baton.compaction.tokens_after": outcome.tokens_after})
    if outcome is not None and outcome.status == "failed":
        live.fail(outcome.reason)
    return [headers_for(task, root) for task in following]

"""An agent's state folder: the append-only log, its events, what it remembers between steps.

``state/<agent>/log.jsonl`` holds every message, one ``LogRecord`` a line;
``events.jsonl`` the typed events of ``agents.events``; ``agent.json`` the
``AgentState``; ``tool_results/`` the full result of every tool call. The log
is never rewritten: what the model sees is derived from it on every call
(``context.assembly``). Everything is loaded per step, so any process can run the
next step of any agent; a process parses only the lines appended since it last read
a file (``scenarios.jsonl_cache``, which proves the earlier bytes unchanged first).

A disk that will be written is loaded with ``claim``: it takes the agent's lease
(``scenarios.lease``) first, and every write below lands only while that lease
is current. An assistant record carries its step event, so a crash between the
log append and the event costs nothing: the event is derived from the log on
load (``owed``) and written by the next claimant.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.events import CompactionRecord, Event, HandoffEvent, StepEvent, append_event, now, read_events
from agents.role import Role
from agents.tools.base import parse_envelope
from context.compaction import CircuitBreaker
from context.compression import archive_ref
from context.history import History
from context.identity_memo import IdentityMemo
from context.messages import Message, TextBlock, ToolResultBlock, parse_message
from context.redaction import redact_message
from scenarios.folder import Folder
from scenarios.jsonl_cache import JsonlCache, Problem
from scenarios.lease import Lease
from scenarios.store import Layout

log = logging.getLogger(__name__)


class AgentState(BaseModel):
    """What an agent remembers between steps besides its log (``state/<agent>/agent.json``)."""

    estimator: dict[str, Any] = Field(default_factory=dict)
    breaker: CircuitBreaker = Field(default_factory=CircuitBreaker)
    tool_memory: dict[str, Any] = Field(default_factory=dict)
    force_compaction: bool = False  # the API said "prompt too long"
    # The last finished step after which a step asked for a compaction; cleared by the compaction.
    # A compaction task runs only when this names the log's last step (duplicates and strays do nothing).
    compaction_due: int | None = None
    too_long_after_compaction: int = 0
    nudges: int = 0
    estimator_step: int = 0  # the last step whose usage ``estimator`` has learned from
    # The fingerprint of the conventions (agents.conventions) the agent was last told: "" before the first
    # step looked, "none" when there were none.
    conventions: str = ""
    # The conventions text the system prompt carries, fixed at the agent's first step: the system prompt
    # never changes within a conversation (thinking is signed over it); a later change is a new message.
    system_conventions: str | None = None
    # Raised when the API refused a thinking block baton sent back: every block stamped before is left out.
    thinking_epoch: int = 0
    thinking_epoch_step: int = 0  # the step that raised it last: a second refusal at the same step fails
    # The API's count of the last request counted (its fingerprint, the count): the step before a step counts
    # that step's request when it decides whether a compaction must come first; the step then takes it from here.
    counted: tuple[str, int] | None = None


class LogRecord(BaseModel):
    """One line of ``state/<agent>/log.jsonl``. Frozen: loads share them (``LOG_FILES``)."""

    model_config = ConfigDict(frozen=True)
    seq: int
    kind: Literal["opening", "assistant", "results", "note"]
    step: int  # the step this record belongs to; an opening carries the last finished step
    iteration: int
    message: dict[str, Any]
    key: str | None = None  # idempotency key of an opening
    model: str | None = None
    request: str | None = None  # fingerprint of the request that produced an assistant message
    # An assistant record's step event and the estimator after learning from it, written with it so
    # that a crash before events.jsonl and agent.json got their copies loses nothing (AgentDisk.claim).
    event: dict[str, Any] | None = None
    estimator: dict[str, Any] | None = None
    # An assistant record's request, for the next one to compare with: its message count plus this reply, the
    # prefix digest after the reply (context.prefix) and its view plan (context.assembly.Assembled.plan).
    prefix_after: dict[str, Any] | None = None
    at: str = ""


def _record_or_problem(number: int, raw: Any) -> LogRecord | Problem:
    try:
        return LogRecord.model_validate(raw)
    except ValueError as exc:
        return Problem(f"log record {number} is not a valid record ({exc.__class__.__name__}); ignored")


LOG_FILES = JsonlCache(_record_or_problem)
# Each record's message, parsed once per process: records are frozen and shared by every load (LOG_FILES),
# so a step's history reuses the messages (and their token counts) the steps before it parsed.
_MESSAGE_OF = IdentityMemo(lambda record: parse_message(record.message), size=8192)


@dataclass
class AgentDisk:
    """Everything about one agent that lives in its state folder, loaded per step."""

    layout: Layout
    agent: Role
    records: list[LogRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    state: AgentState = field(default_factory=AgentState)
    problems: list[str] = field(default_factory=list)
    lease: Lease | None = None  # set by claim: the writes below land only while it is current
    owed: list[Event] = field(default_factory=list)  # events the log shows but events.jsonl lacks

    @property
    def folder(self) -> Folder:
        """The one way into the scenario folder (scenarios.folder)."""
        return Folder(self.layout.root)

    @classmethod
    def claim(cls, root: Path, agent: Role) -> AgentDisk:
        """Take the agent's lease (every earlier writer's is lost), load, and write the events a crash left owed."""
        disk = cls.load(root, agent, Lease.claim(Layout(Path(root)).lease(agent)))
        for event in disk.owed:
            append_event(disk.layout.events(agent), event, disk.lease)
        disk.owed = []
        last = disk.last_step()
        if last is not None and last.estimator and last.step > disk.state.estimator_step:
            # A crash between the log append and agent.json: the estimator learns what it had learned.
            disk.state.estimator, disk.state.estimator_step = last.estimator, last.step
            disk.state.too_long_after_compaction = 0
            disk.save_state()
        return disk

    @classmethod
    def load(cls, root: Path, agent: Role, lease: Lease | None = None) -> AgentDisk:
        disk = cls(Layout(Path(root)), agent, lease=lease)
        log = LOG_FILES.read(disk.layout.log(agent), disk.folder)
        disk.records = log.items
        disk.problems += log.record_problems + [f"{disk.layout.log(agent).name} {p}" for p in log.line_problems]
        disk.events, event_problems = read_events(disk.layout.events(agent))
        disk.problems += event_problems
        path = disk.layout.state(agent) / "agent.json"
        if disk.folder.exists(path):
            try:
                disk.state = AgentState.model_validate(disk.folder.read_json(path, f"{agent} agent state"))
            except ValueError as exc:  # a broken state file costs calibration, never the run
                disk.problems.append(f"{path.name} unreadable, starting fresh: {exc}")
        disk.owed = disk._owed_events()
        disk.events += disk.owed
        return disk

    def _owed_events(self) -> list[Event]:
        """The step and handoff events the log proves happened but events.jsonl lacks (a crash in between)."""
        stepped = {e.step for e in self.events if isinstance(e, StepEvent)}
        handed = {e.step for e in self.events if isinstance(e, HandoffEvent)}
        owed: list[Event] = []
        for rec in self.records:
            if rec.kind == "assistant" and rec.event and rec.step not in stepped:
                owed.append(StepEvent.model_validate(rec.event))
            elif rec.kind == "results" and rec.step not in handed:
                path = next((handoff_path_of(b) for b in _MESSAGE_OF(rec).tool_results
                             if accepted_handoff(b)), None)
                if path is not None:
                    owed.append(HandoffEvent(step=rec.step, iteration=rec.iteration, path=path, at=rec.at or now()))
        return owed

    # -- reading

    @property
    def steps(self) -> list[LogRecord]:
        return [r for r in self.records if r.kind == "assistant"]

    def messages(self) -> list[Message]:
        return [_MESSAGE_OF(r) for r in self.records]

    def history(self) -> History:
        return History(self.messages())

    def last_step(self) -> LogRecord | None:
        steps = self.steps
        return steps[-1] if steps else None

    def due(self) -> int:
        """The step to run next: the pending one, or the one after the last."""
        pending, last = self.pending(), self.last_step()
        return pending.step if pending else (last.step + 1 if last else 1)

    def pending(self) -> LogRecord | None:
        """The last step if its tool calls have no persisted results yet."""
        last = self.last_step()
        if last is None or not _MESSAGE_OF(last).tool_uses:
            return None
        done = any(r.kind == "results" and r.step == last.step for r in self.records)
        return None if done else last

    def iteration(self) -> int:
        openings = [r for r in self.records if r.kind == "opening"]
        return openings[-1].iteration if openings else 0

    def turn_over(self) -> bool:
        """True when the last turn ended with an accepted handoff (and no new opening came)."""
        for rec in reversed(self.records):
            if rec.kind == "opening":
                return False
            if rec.kind == "results":
                return any(accepted_handoff(b) for b in _MESSAGE_OF(rec).tool_results)
        return not self.records

    def steps_this_turn(self) -> int:
        count = 0
        for rec in reversed(self.records):
            if rec.kind == "opening":
                break
            count += rec.kind == "assistant"
        return count

    def compaction(self) -> CompactionRecord | None:
        """The latest compaction: the one the next request is assembled from."""
        compactions = [e for e in self.events if isinstance(e, CompactionRecord)]
        return compactions[-1] if compactions else None

    def compacted_after(self) -> int | None:
        latest = self.compaction()
        return latest.after_step if latest else None

    # -- writing (append-only log, atomic state)

    def append(self, kind: str, step: int, iteration: int, message: Message, **extra: Any) -> LogRecord:
        rec = LogRecord(seq=len(self.records) + 1, kind=kind, step=step, iteration=iteration,
                        message=redact_message(message).stored, at=now(), **extra)
        self.folder.append_jsonl(self.layout.log(self.agent), rec.model_dump(exclude_none=True), self.lease)
        self.records.append(rec)
        return rec

    def event(self, event: Event) -> None:
        append_event(self.layout.events(self.agent), event, self.lease)
        self.events.append(event)

    def save_state(self) -> None:
        self.folder.write_json(self.layout.state(self.agent) / "agent.json", self.state.model_dump(mode="json"),
                               self.lease)

    def archive(self, tool_use_id: str) -> Path:
        # The same path the compressed results point the agent to.
        return self.layout.root / archive_ref(self.agent, tool_use_id)


def note_discarded(layout: Layout, agent: Role, step: int, reason: str) -> None:
    """Say that a writer lost its lease (``scenarios.lease``) and stopped: in the process's log, and in
    ``discarded.jsonl`` (what ``baton status`` reports). The only write such a writer makes, without the
    lease on purpose, and never into a state folder that was archived."""
    log.warning("%s step %d: %s", agent, step, reason)
    folder = Folder(layout.root)
    if folder.is_dir(layout.state(agent)):
        folder.append_jsonl(layout.state(agent) / "discarded.jsonl", {"at": now(), "step": step, "reason": reason})


def accepted_handoff(block: ToolResultBlock) -> bool:
    data = parse_envelope(block.text).get("data")
    return not block.is_error and isinstance(data, dict) and data.get("accepted") is True


def handoff_path_of(block: ToolResultBlock) -> str | None:
    """The payload path an accepted SubmitHandoff result names."""
    return parse_envelope(block.text)["data"].get("path")


def open_turn(root: Path, agent: Role, iteration: int, text: str, key: str) -> bool:
    """Append the opening user message of a turn, once per ``key`` (idempotent).

    Returns False when an opening with this key is already in the log.
    """
    if any(r.kind == "opening" and r.key == key for r in AgentDisk.load(root, agent).records):
        return False  # checked before claiming: a repeated opening must not take the lease from a running step
    disk = AgentDisk.claim(root, agent)
    if any(r.kind == "opening" and r.key == key for r in disk.records):
        return False
    if disk.pending():
        raise RuntimeError(f"{agent} has a step with unfinished tool calls; run its step before opening a new turn")
    last = disk.last_step()
    disk.append("opening", last.step if last else 0, iteration, Message(role="user", content=[TextBlock(text=text)]),
                key=key)
    disk.state.nudges = 0
    disk.save_state()
    return True

"""The simulated model: baton's offline default. It is labelled "simulated" everywhere.

It is a deterministic stand-in for Claude that answers Messages API requests the
way an agent would: it reads the conversation it is sent, works out where it
is, and answers with text plus real tool calls that the real tools then run on
real files. The same request always gets the same response.

The model itself knows no scenario. What to write, read, fix and hand off is a
*script* (``SimulationScript``), one per example scenario, kept beside it as
``scenarios/_simulations/<name>.py``. A script is chosen by the scenario's
**brief**, never by default: each script declares the fingerprint of the brief.md
it was written for (``BRIEF_SHA256``), and ``script_for_brief`` finds the one whose
fingerprint matches. Any other brief (a new scenario, an edited example) is refused
with ``UnknownBrief`` before the first step, saying what to do (set
``ANTHROPIC_API_KEY``, or ``baton new NAME --from <example>``): the simulated model
plays the shipped examples and nothing else. A copy of an example under another
name has the same brief, so it runs.

A model built without a script (``SimulatedModel()``, as the fake API has it: it
sees requests, not folders) chooses per request: by the brief the conversation
quotes (a whole Read of brief.md), else by the example its opening names
(``Scenario: <name>``), or by the example an unedited copy's opening says it copies
(``Scenario: fa (a copy of the example refund_desk)``, written by baton when the copy's
brief.md is the example's): a copy plays through the fake API as it plays offline. An
edited copy is refused as soon as Init reads its brief.

The model brings the machinery every script shares:

- Where am I? Every reply carries a small state marker
  ``<sim_state>{...}</sim_state>`` in its text. The last assistant message is
  always in the context (the last N steps are verbatim, even after compaction),
  so the marker survives compaction; a turn's opening message (``Iteration: n``)
  after the last marker starts a new plan (``script.new_plan``).
- The plan is a queue of named moves (``script.MOVES``); what a move learns
  from its tool results is absorbed into the state on the next call
  (``script.absorb``).
- Compaction prompts are answered with a summary built from the conversation
  (``script.summary`` fills it in). Usage is the token estimator's count of the
  request.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from agents.models import ModelError, ModelRequest, ModelResponse
from agents.tools.base import parse_envelope
from context.estimator import TokenEstimator
from context.messages import CompactionBlock, Message, TextBlock, ToolUseBlock, Usage, parse_message
from context.tokens import count_text
from scenarios.script_files import import_script

LABEL = "simulated"
STATE_TAG = re.compile(r"<sim_state>(.*?)</sim_state>", re.DOTALL)
PINNED = re.compile(r"<round_opening>.*?</round_opening>", re.DOTALL)  # context.assembly.PINNED_OPENING
ITERATION = re.compile(r"^Iteration: (\d+)", re.MULTILINE)
SCENARIO = re.compile(r"^Scenario: (\S+)", re.MULTILINE)
COPY_OF = re.compile(r"^Scenario: \S+ \(a copy of the example (\S+)\)$", re.MULTILINE)
SUMMARY_ASK = "<compact_summary>"
BRIEF = "brief.md"
NUMBERED_LINE = re.compile(r"^ *\d+\t", re.MULTILINE)  # Read's line numbers ("     1\t")

ToolCall = tuple[str, dict[str, Any]]  # (tool name, input)
ToolResult = tuple[str, dict[str, Any], dict[str, Any]]  # (tool name, input, parsed result envelope)
Move = Callable[[dict[str, Any], str], tuple[str, list[ToolCall]]]  # (state, "name:arg") -> (narration, calls)


class SimulationError(ModelError):
    """The script cannot go on (an unknown script or scenario, a tool it cannot recover from)."""


class UnknownBrief(SimulationError):
    """The brief is not one the simulated model has a script for: it must not pretend to design it."""


class SimulationScript(Protocol):
    """What a scenario's script (``scenarios/_simulations/<name>.py``) provides, as module-level names.

    The state is a JSON-able dict the script owns, except for three keys the model keeps:
    ``queue`` (the move names still to play, which ``new_plan`` fills), ``done`` (the last
    move played) and ``round`` (which opening the plan answers).
    """

    BRIEF_SHA256: str  # ``brief_fingerprint`` of the brief.md the script was written for
    MOVES: Mapping[str, Move]  # by the part of a move's name before the first ':'

    def new_plan(self, role: str, iteration: int, opening: str) -> dict[str, Any]:
        """The state for a new turn of ``role`` ("init" or "execute") that ``opening`` starts."""
        ...

    def absorb(self, state: dict[str, Any], results: list[ToolResult]) -> None:
        """Learn from the results of the last move's tool calls (may rewrite ``state["queue"]``)."""
        ...

    def summary(self, role: str, state: dict[str, Any], written: list[str], previous: dict[str, Any]) -> dict[str, Any]:
        """The compaction summary's JSON body: from the state, the paths written and the previous summary."""
        ...


# ---- loading a script by its file's name ---------------------------------------------------


def _scripts_folder() -> Path:
    # In the installed ``scenarios`` package, not the user's scenarios dir: the scripts ship with baton.
    # Outside every scenario folder, so no agent lists or reads the answers; "_" is never a scenario name.
    return Path(str(files("scenarios"))) / "_simulations"


def known_scripts() -> list[str]:
    # A file named "_<something>.py" is a part of a script (its documents and code, say), not a script: load_part.
    return sorted(path.stem for path in _scripts_folder().glob("*.py") if not path.stem.startswith("_"))


_scripts: dict[str, SimulationScript] = {}


def load_script(name: str) -> SimulationScript:
    """The script ``scenarios/_simulations/<name>.py``, imported from its file path (the folder is not a package)."""
    if name in _scripts:
        return _scripts[name]
    path = _scripts_folder() / f"{name}.py"
    if not re.fullmatch(r"[A-Za-z0-9_]+", name) or not path.is_file():
        raise SimulationError(f"the simulated model has no script {name!r}; "
                              f"scripts: {', '.join(known_scripts()) or 'none'} (scenarios/_simulations/<name>.py)")
    _scripts[name] = _import(name, path)  # type: ignore[assignment]  # a module satisfies the Protocol by its names
    return _scripts[name]


def load_part(name: str) -> ModuleType:
    """``scenarios/_simulations/_<name>.py``: a module a script is split into (a script over 600 lines keeps, say,
    the documents and code its agents write in a part). Not a script: ``known_scripts`` leaves it out."""
    path = _scripts_folder() / f"_{name}.py"
    if not re.fullmatch(r"[A-Za-z0-9_]+", name) or not path.is_file():
        raise SimulationError(f"the simulated model has no script part {path.name!r} (scenarios/_simulations/)")
    return sys.modules.get(f"baton_simulation__{name}") or _import(f"_{name}", path)


def _import(name: str, path: Path) -> ModuleType:
    """The module at ``path``, imported from its file (the folder is not a package) without writing bytecode."""
    return import_script(f"baton_simulation_{name}", path)


# ---- choosing a script by its brief ------------------------------------------------------


def brief_fingerprint(text: str) -> str:
    """sha256 of the brief's text with every run of whitespace made one space.

    Exact content, not key phrases: a script's design, data and samples answer every rule of
    its brief, so a brief with one rule changed (a 14-day window instead of 30) must be refused,
    not "succeed" with the old design. Whitespace is normalised so that re-wrapped lines, CRLF
    line endings (a Windows checkout) or a trailing newline do not refuse the example itself."""
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()


def unknown_brief(problem: str) -> UnknownBrief:
    """The refusal every path gives (CLI, workers, fake API): ``problem``, then what the model knows and what to do."""
    examples = known_scripts()
    return UnknownBrief(
        f"{problem}. The simulated model (baton's model when ANTHROPIC_API_KEY is not set, and the one "
        f"`baton fake-api` answers with) only drives the examples that ship with baton "
        f"({', '.join(examples) or 'none'}), recognised by their unedited brief.md. To run this scenario with "
        f"Claude, set ANTHROPIC_API_KEY to a real key (and no ANTHROPIC_BASE_URL pointing at `baton fake-api`); "
        f"or start from an example: `baton new NAME --from {examples[0] if examples else 'EXAMPLE'}`")


def script_for_brief(brief: str, what: str = "this scenario's brief.md") -> str:
    """The name of the script written for ``brief`` (its ``BRIEF_SHA256`` matches), or ``UnknownBrief``."""
    fingerprint = brief_fingerprint(brief)
    for name in known_scripts():
        if load_script(name).BRIEF_SHA256 == fingerprint:
            return name
    raise unknown_brief(f"{what} is not the brief of an example the simulated model can play")


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

    def last_opening(self, pinned: bool = False) -> tuple[int, str] | None:
        """The latest user message that opens a round ("Iteration: n"). An opening baton pinned after a compaction
        (inside <round_opening>) counts only with ``pinned``: after the API's compaction the pin is appended to the
        last message, after the steps it opened, and is no new round."""
        for i in range(len(self.messages) - 1, -1, -1):
            msg = self.messages[i]
            text = msg.text if pinned else PINNED.sub("", msg.text)
            if msg.role == "user" and ITERATION.search(text):
                return i, msg.text
        return None

    def script_name(self) -> str:
        """For a model built without a script: the script of the brief this conversation quotes (a whole
        Read of brief.md), else of the example its opening names. The name is the fallback only because
        a turn's first request has not read the brief yet, and Execute never reads it."""
        quoted = self.quoted_brief()
        if quoted is not None:
            return script_for_brief(quoted, "the brief.md this request quotes")
        named = [found for msg in self.messages for found in SCENARIO.findall(_said_by_user_or_summary(msg))]
        copied = [found for msg in self.messages if msg.role == "user" for found in COPY_OF.findall(msg.text)]
        if copied and copied[-1] in known_scripts():
            return copied[-1]  # an unedited copy (agents.openings.scenario_line): its brief is the example's
        if named and named[-1] in known_scripts():
            return named[-1]
        scenario = f"scenario {named[-1]!r}" if named else "a scenario it does not name"
        raise unknown_brief(f"this request is for {scenario}, not an example the simulated model can play (a "
                            "model that sees requests only goes by the scenario's name until one quotes its brief.md)")

    def quoted_brief(self) -> str | None:
        """The text of brief.md from the last Read that returned all of it, Read's line numbers removed."""
        reads = {u.id for m in self.messages for u in m.tool_uses
                 if u.name == "Read" and str(u.input.get("path", "")).removeprefix("./") == BRIEF}
        found = None
        for msg in self.messages:
            for block in msg.tool_results if msg.role == "user" else []:
                data = parse_envelope(block.text).get("data") if block.tool_use_id in reads else None
                # A compressed or capped result is no envelope; a partial Read is not the whole brief.
                if isinstance(data, dict) and data.get("start_line") == 1 and \
                        data.get("end_line") == data.get("total_lines") and isinstance(data.get("content"), str):
                    found = NUMBERED_LINE.sub("", data["content"])
        return found

    def last_results(self) -> list[ToolResult]:
        """(tool name, input, parsed envelope) for the results in the last user message; a system message
        after it (baton's reminder, context.reminders) is left aside."""
        messages = self.messages[:-1] if self.messages and self.messages[-1].role == "system" else self.messages
        if len(messages) < 2 or messages[-1].role != "user":
            return []
        uses = {u.id: u for u in messages[-2].tool_uses} if messages[-2].role == "assistant" else {}
        out = []
        for block in messages[-1].tool_results:
            use = uses.get(block.tool_use_id)
            if use is not None:
                envelope = parse_envelope(block.text) or {"status": "error", "error": block.text[:300]}
                out.append((use.name, dict(use.input), envelope))
        return out

    def written_paths(self) -> list[str]:
        paths: dict[str, None] = {}
        for msg in self.messages:
            for use in msg.tool_uses:
                if use.name in ("Write", "Edit") and isinstance(use.input.get("path"), str):
                    paths[use.input["path"]] = None
        return list(paths)

    def previous_summary(self) -> dict[str, Any]:
        """The summary the conversation starts from: baton's own (assistant text) or the API's compaction block."""
        for msg in self.messages:
            if msg.role != "assistant":
                continue
            said = "\n".join([msg.text, *(b.content or "" for b in msg.content if isinstance(b, CompactionBlock))])
            found = re.search(r"<compact_summary>(.*?)</compact_summary>", said, re.DOTALL)
            if found:
                try:
                    return json.loads(found.group(1))
                except ValueError:
                    return {}
        return {}


def _said_by_user_or_summary(msg: Message) -> str:
    """A user message's text, or a summary: the API's compaction block (the double reads it as the assistant's
    text, where the API puts the summary) or baton's own."""
    if msg.role == "user":
        return msg.text
    blocks = "\n".join(b.content or "" for b in msg.content if isinstance(b, CompactionBlock))
    return blocks + ("\n" + msg.text if SUMMARY_ASK in msg.text else "")


def _strip_cache(content: Any) -> Any:
    if isinstance(content, list):
        return [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
    return content


def handoff_payload(opening: str, kind: str) -> dict[str, Any] | None:
    """The handoff JSON an opening carries in ``<{kind}_context>`` (e.g. kind "init_to_execute"), if any."""
    found = re.search(rf"<{kind}_context>(.*?)</{kind}_context>", opening, re.DOTALL)
    if not found:
        return None
    try:
        return json.loads(found.group(1).replace("<\\/", "</"))
    except ValueError:
        return None


# ---- the model --------------------------------------------------------------------------


class SimulatedModel:
    """Deterministic stand-in for Claude that plays a scenario's script; see the module docstring."""

    label = LABEL

    def __init__(self, script: str | None = None) -> None:
        """``script``: the one to play, from the scenario's brief (``script_for_brief``); None: chosen per
        request from what the request shows of the brief (``Conversation.script_name``)."""
        self.script = load_script(script) if script is not None else None
        self.script_name = script
        self.requests: list[str] = []  # fingerprints of every request, for tests

    def create(self, request: ModelRequest) -> ModelResponse:
        fingerprint = request.fingerprint()  # once: it serialises the whole request
        self.requests.append(fingerprint)
        convo = Conversation.of(request)
        name = self.script_name or convo.script_name()
        script = self.script or load_script(name)
        if request.purpose == "summary" or convo.wants_summary():
            blocks: list[Any] = [TextBlock(text=_summary(script, convo, name))]
            stop = "end_turn"
        else:
            blocks = Planner(script, convo).reply()
            stop = "tool_use" if any(isinstance(b, ToolUseBlock) for b in blocks) else "end_turn"
        return ModelResponse(id=f"msg_sim_{fingerprint}", model=f"{request.model} ({LABEL})", content=blocks,
                             stop_reason=stop, usage=_usage(request, convo.messages, blocks), simulated=True)


def _usage(request: ModelRequest, messages: list[Message], blocks: list[Any]) -> Usage:
    system = request.system if isinstance(request.system, str) else json.dumps(request.system or [])
    extra = count_text(system) + count_text(json.dumps(request.tools, sort_keys=True))
    input_tokens = TokenEstimator().estimate_input(messages, extra)
    return Usage(input_tokens=input_tokens, output_tokens=sum(b.tokens for b in blocks))


def _summary(script: SimulationScript, convo: Conversation, name: str) -> str:
    """The script's summary; its prose names the scenario, so a conversation that starts from it (the API's
    compaction block, where no opening names it any more) still says which script plays it."""
    marker = convo.last_state()
    state = marker[1] if marker else {}
    body = json.dumps(script.summary(convo.role, state, convo.written_paths(), convo.previous_summary()),
                      sort_keys=True)
    return f"[simulated] Summary of the work so far.\nScenario: {name}\n<compact_summary>{body}</compact_summary>"


# ---- the plan -------------------------------------------------------------------------------


class Planner:
    """Picks the next move of the current turn and turns it into content blocks."""

    def __init__(self, script: SimulationScript, convo: Conversation):
        self.script = script
        self.convo = convo
        opening = convo.last_opening()
        marker = convo.last_state()
        if marker is None and opening is None:
            opening = convo.last_opening(pinned=True)  # the round's own opening was compacted away
        if marker is None or (opening is not None and opening[0] > marker[0]):
            if opening is None:
                raise SimulationError("the simulated model found no opening message ('Iteration: n') to start from")
            iteration = int(ITERATION.search(opening[1]).group(1))  # type: ignore[union-attr]  # found by last_opening
            self.state = script.new_plan(convo.role, iteration, opening[1])
            self.state["round"] = hashlib.sha256(opening[1].encode()).hexdigest()[:12]
        else:
            self.state = marker[1]
            script.absorb(self.state, convo.last_results())

    def reply(self) -> list[Any]:
        failed = [(name, env) for name, _, env in self.convo.last_results() if env.get("status") == "error"]
        if failed:
            name, env = failed[0]
            # A script has no recovery: say so plainly; baton reminds it, then fails the turn.
            return [TextBlock(text=f"[simulated] {name} failed: {env.get('error')}. The simulated model cannot recover "
                                   f"from this on its own.\n{self._marker()}")]
        if not self.state["queue"]:
            return [TextBlock(text=f"[simulated] Nothing left in the plan.\n{self._marker()}")]
        move = self.state["queue"].pop(0)
        self.state["done"] = move
        narration, calls = self.script.MOVES[move.split(":")[0]](self.state, move)
        text = f"[simulated] {narration}\n{self._marker()}"
        return [TextBlock(text=text), *(self._use(j, name, args) for j, (name, args) in enumerate(calls))]

    def _marker(self) -> str:
        return f"<sim_state>{json.dumps(self.state, sort_keys=True)}</sim_state>"

    def _use(self, j: int, name: str, args: dict[str, Any]) -> ToolUseBlock:
        # From the plan state only (round, remaining moves), never from tool results that
        # carry mtimes: the same plan position gives the same ids in every run.
        digest = hashlib.sha256(f"{json.dumps(self.state, sort_keys=True)}|{j}".encode()).hexdigest()[:24]
        return ToolUseBlock(id=f"toolu_sim_{digest}", name=name, input=args)


# ---- moves any script can use: each returns (narration, [(tool, input), ...]) -------------


def _todo(state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    items = [m.split(":")[0] for m in state["queue"]]
    todos = [{"content": step, "status": "pending"} for step in dict.fromkeys(items)]
    return "Planning the turn.", [("TodoWrite", {"todos": todos})]


def _ls(_state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    return "Looking at the scenario folder.", [("LS", {"path": "."})]


def _read(_state: dict[str, Any], move: str) -> tuple[str, list[ToolCall]]:
    path = move.split(":", 1)[1]
    return f"Reading {path}.", [("Read", {"path": path})]


def _evaluate(_state: dict[str, Any], _move: str) -> tuple[str, list[ToolCall]]:
    return "Running the evaluation.", [("RunEvaluation", {})]


# "todo" (the plan as a TodoWrite), "ls" (the scenario folder), "read:<path>", "evaluate" (RunEvaluation).
COMMON_MOVES: dict[str, Move] = {"todo": _todo, "ls": _ls, "read": _read, "evaluate": _evaluate}

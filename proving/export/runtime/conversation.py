"""A conversational sample run in the exported task (docs/conversations.md): the model under test talks with a
simulated user, turn by turn, until the user stops or the turn limit. Needs Inspect; the user's rules and the
check are the standard library's (``users.py``, ``user_check.py``).

Each turn of the model under test is Inspect's ``generate()`` as for any sample, so its tool calls run in the
sample's sandbox exactly as before and the message limit still holds. The user's turns go into the sample's
messages as user messages, so a transcript shows both sides. The user is the task's ``-T user=`` setting:
``scripted`` (the deterministic user, offline, the default) or any Inspect model string, which is prompted with
the persona, the goal, the facts and the rules (``user_simulator.md``) and whose calls show as model events in
a span named "user simulator". What was said is kept in the sample's store (``RECORD``), as the user heard it,
for the scorer's simulator check.
"""

from __future__ import annotations

from typing import Any

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    get_model,
)
from inspect_ai.scorer import Metric, SampleScore, metric
from inspect_ai.solver import Generate, TaskState
from inspect_ai.util import span, store

from . import user_check
from .users import AGENT, SCRIPTED, SIMULATOR, STOP, USER, Reply, ScriptedUser, Turn, UserSpec
from .users import simulator_prompt as prompt  # the user simulator's system message (user_simulator.md)

RECORD = "baton:conversation"  # per-sample store key: {"user_simulator", "turns": [{"role", "text"}], "ended"}
FAULT = "simulator_fault"  # the score's metadata: why the run is the user simulator's fault, or None
SILENT = "(the agent said nothing)"  # what the user hears of a turn with no text: an empty message is refused
# A user's message is a few sentences. Below 8192 output tokens Inspect does not stream a request (at or above it,
# it does), so a model user also runs against an API that answers unstreamed requests only, as `baton fake-api`.
USER_MAX_TOKENS = 4096


def conversational(sample: dict[str, Any]) -> bool:
    return isinstance(sample.get("user"), dict)


def extra_messages(samples: list[dict[str, Any]]) -> int:
    """What the task's message limit allows beyond a single instruction's: each turn of the longest conversation
    adds the user's message and the agent's reply (the limit is the task's, not a sample's, in this Inspect)."""
    return 2 * max((int(s["user"]["max_turns"]) for s in samples if conversational(s)), default=0)


def check_model(setting: str) -> None:
    """Make the user's model when the task starts: one Inspect cannot make (no key, an unknown provider) fails
    before any sample, saying it is the user simulator's and not the model under test's."""
    from inspect_ai._util.error import PrerequisiteError  # Inspect's error for what the user must set up

    if setting == SCRIPTED:
        return
    try:
        get_model(setting)
    except PrerequisiteError as exc:
        from rich.text import Text  # Inspect's messages are Rich markup, and this one is said inside another

        lines = Text.from_markup(str(exc.message)).plain.removeprefix("ERROR:").splitlines()
        said = ": ".join(line.strip() for line in lines if line.strip()).rstrip(".")
        raise PrerequisiteError(f"{SIMULATOR} {setting} (-T user=): {said}") from None


class ModelUser:
    """A model playing the user, prompted as tau2-bench prompts its user simulator: it sees the conversation
    from the user's side (the agent's words as the other party's, never its tool calls) and writes ``STOP``
    when the goal is met."""

    def __init__(self, spec: UserSpec, opening: str, model: str) -> None:
        self.spec, self.name = spec, model
        self.prompt = prompt(spec, opening)
        self.model = get_model(model)

    async def reply(self, turns: list[Turn]) -> Reply:
        messages: list[ChatMessage] = [ChatMessageSystem(content=self.prompt)]
        for turn in turns[1:]:  # the opening is in the prompt: a request must start with the other party's turn
            said = ChatMessageUser if turn.role == AGENT else ChatMessageAssistant
            messages.append(said(content=turn.text))
        async with span("user simulator", type="user"):
            output = await self.model.generate(messages, config=GenerateConfig(max_tokens=USER_MAX_TOKENS))
        text = output.completion.strip()
        return Reply(text, stop=STOP in text) if text else Reply(STOP, stop=True)  # silence ends it


class Scripted:
    """``users.ScriptedUser`` behind the same awaitable ``reply`` as a model."""

    def __init__(self, spec: UserSpec) -> None:
        self.spec, self.user, self.name = spec, ScriptedUser(spec), SCRIPTED

    async def reply(self, turns: list[Turn]) -> Reply:
        return self.user.reply(turns)


def user_for(sample: dict[str, Any], setting: str) -> Scripted | ModelUser:
    spec = UserSpec.from_dict(sample["user"])
    return Scripted(spec) if setting == SCRIPTED else ModelUser(spec, sample["instruction"], setting)


async def converse(sample: dict[str, Any], state: TaskState, generate: Generate, setting: str) -> TaskState:
    """The conversation: the sample's instruction (already the first user message) opens it; then the model
    under test answers (``generate``, tools included) and the user replies, until the user stops, the user has
    had ``max_turns`` messages, or a limit of the task ends the sample (``ended`` stays None)."""
    user = user_for(sample, setting)
    turns = [Turn(USER, sample["instruction"])]
    state.metadata["user_simulator"] = user.name
    ended = None
    while True:
        _record(user.name, turns, None)  # what a limit that stops generate() leaves for the scorer
        state = await generate(state)
        turns.append(Turn(AGENT, state.output.message.text.strip() or SILENT))
        if state.completed:
            break
        if sum(t.role == USER for t in turns) >= user.spec.max_turns:
            ended = "max_turns"
            break
        reply = await user.reply(turns)
        state.messages.append(ChatMessageUser(content=reply.text))
        turns.append(Turn(USER, reply.text))
        if reply.stop:
            ended = "user"
            break
    _record(user.name, turns, ended)
    return state


def _record(name: str, turns: list[Turn], ended: str | None) -> None:
    store().set(RECORD, {"user_simulator": name, "turns": [vars(t) for t in turns], "ended": ended})


def verdict(sample: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """The score's metadata for a conversation: what was said and how it ended, and the simulator check."""
    spec = UserSpec.from_dict(sample["user"])
    turns = [Turn(str(t.get("role")), str(t.get("text"))) for t in record.get("turns") or [] if isinstance(t, dict)]
    faults = user_check.simulator_faults(spec, turns, sample.get("actions") or [])
    return {"conversation": {"user_simulator": record.get("user_simulator"), "ended": record.get("ended") or "limit",
                             "user_turns": sum(t.role == USER for t in turns),
                             "agent_turns": sum(t.role == AGENT for t in turns)},
            FAULT: "; ".join(faults) or None, "simulator_faults": faults}


def _fault(score: SampleScore) -> bool:
    return bool((score.score.metadata or {}).get(FAULT))


# Each trial on its own ("unreduced"): with several epochs a reduced score keeps only the first epoch's metadata.
@metric(scores="unreduced")
def agent_accuracy() -> Metric:
    """The agent's pass rate over the trials the user simulator did not spoil."""

    def compute(scores: list[SampleScore]) -> float:
        judged = [s.score.as_float() for s in scores if not _fault(s)]
        return sum(judged) / len(judged) if judged else 0.0

    return compute


@metric(scores="unreduced")
def simulator_faults() -> Metric:
    """How many trials the user simulator spoiled: counted apart, neither the agent's passes nor its failures."""

    def compute(scores: list[SampleScore]) -> int:
        return sum(_fault(s) for s in scores)

    return compute

"""The user of a conversational sample (docs/conversations.md): what it holds, how a text is read for the facts
it names or says, and the deterministic scripted user. Standard library only and pure (but for reading the
prompt's template): the exported task plays the user with it (``conversation.py``), baton's sample schema reads
an opening with the same rules (proving/evaluation/user_part.py), and the simulator check judges any user by
them (``user_check.py``). The prompt a model playing the user gets (``simulator_prompt``) is written here too,
without Inspect, so that baton's simulated user can read it back (proving/evaluation/simulated_user.py).

Texts are compared loosely and the same way everywhere: lower case, ``_`` and ``-`` read as spaces, whitespace
collapsed, and a phrase or a value found only as a whole (``C1`` is not in ``C10``). A fact is *named* by its
name's words (``order_id``: "order id", "order ids") or by one of its ``asked_by`` phrases; it is *said* when its
value appears.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

STOP = "###STOP###"  # what a user writes to end the conversation, as in tau-bench's user simulator
SCRIPTED = "scripted"
SIMULATOR = "the user simulator"  # how an error about the model playing the user starts (tryout.py reads it)
DONT_KNOW = "I do not know that."
CLOSING = f"Thank you, that is all. {STOP}"
USER, AGENT = "user", "agent"
SIMULATOR_PROMPT = Path(__file__).with_name("user_simulator.md")  # the template of a model user's system message
# The prompt's fixed first words: how a model provider that plays the user itself (baton's simulated model) tells
# a user simulator's request from a model under test's (tests/test_simulated_user.py holds them to the file).
SIMULATOR_OPENING = "You are playing a customer who is talking with a customer service agent, to test that agent."

_SEPARATORS = re.compile(r"[_\-\s]+")
_EDGE = "0-9a-z"  # what may not touch a phrase or a value for it to count as found whole


def normal(text: str) -> str:
    return _SEPARATORS.sub(" ", text.lower()).strip()


def says_phrase(text: str, phrase: str, plural: bool = False) -> bool:
    """``phrase`` appears whole in ``text`` (``plural``: an ``s`` after it counts too)."""
    return _found(normal(text), phrase, plural)


def _found(said: str, phrase: str, plural: bool = False) -> bool:
    """``says_phrase`` on a text already ``normal``: a reply is read once for all the phrases of all the facts."""
    wanted = normal(phrase)
    if not wanted:
        return False
    tail = "s?" if plural else ""
    # Not inside a number either: 89 is not said by 89.5 nor by 1.89.
    return re.search(rf"(?<![{_EDGE}])(?<![0-9]\.){re.escape(wanted)}{tail}(?![{_EDGE}]|\.[0-9])", said) is not None


def value_forms(value: Any) -> list[str]:
    """How a fact's value may be written: ``89.0`` also as ``89``."""
    if isinstance(value, float) and value.is_integer():
        return [repr(value), str(int(value))]
    return [str(value)]


def says_value(text: str, value: Any) -> bool:
    said = normal(text)
    return any(_found(said, form) for form in value_forms(value))


def words(name: str) -> str:
    """A fact's name as the words a person would use: ``order_id`` -> ``order id``."""
    return normal(name)


def unasked(text: str, facts: Mapping[str, Any], withheld: Sequence[str], never_say: Sequence[str],
            asked: Collection[str] = ()) -> list[str]:
    """What ``text``, said by the user, gives away, in words: ``leaked NAME (VALUE)`` for each withheld fact not
    in ``asked`` whose value it says, ``said 'THING'`` for each thing never to be said that it says."""
    found = [f"leaked {name} ({facts[name]!r})" for name in withheld
             if name in facts and name not in asked and says_value(text, facts[name])]
    return found + [f"said {thing!r}, which the user must never say" for thing in never_say
                    if says_phrase(text, thing)]


@dataclass(frozen=True)
class UserSpec:
    """A sample's ``user`` part, as baton's schema checked it (proving/evaluation/user_part.py)."""

    persona: str
    goal: str
    facts: dict[str, Any]
    withheld: tuple[str, ...]
    stop_when: tuple[str, ...]
    max_turns: int
    never_say: tuple[str, ...] = ()
    asked_by: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> UserSpec:
        return cls(persona=str(raw["persona"]), goal=str(raw["goal"]), facts=dict(raw.get("facts") or {}),
                   withheld=tuple(raw.get("withheld") or ()), stop_when=tuple(raw["stop_when"]),
                   max_turns=int(raw["max_turns"]), never_say=tuple(raw.get("never_say") or ()),
                   asked_by={k: tuple(v) for k, v in (raw.get("asked_by") or {}).items()})

    def named(self, text: str) -> list[str]:
        """The facts ``text`` names (asks for, when the agent says it), in the facts' order."""
        said = normal(text)
        return [name for name in self.facts
                if any(_found(said, p, plural=True) for p in (words(name), *self.asked_by.get(name, ())))]

    def said(self, text: str) -> list[str]:
        """The facts whose value ``text`` says."""
        return [name for name, value in self.facts.items() if says_value(text, value)]

    def done(self, text: str) -> bool:
        """``text`` (the agent's) says the goal is met: one of ``stop_when`` appears in it."""
        return any(says_phrase(text, phrase) for phrase in self.stop_when)


@dataclass(frozen=True)
class Turn:
    role: str  # USER or AGENT
    text: str


@dataclass(frozen=True)
class Reply:
    text: str
    stop: bool = False  # the user ends the conversation with this message


def answer(spec: UserSpec, names: Sequence[str]) -> str:
    return " ".join(f"{words(name).capitalize()}: {spec.facts[name]}." for name in names)


class ScriptedUser:
    """The deterministic user: it opens with the sample's instruction (the conversation's first message, which
    the schema keeps free of withheld facts), then answers each reply of the agent by these rules, in order:

    1. the reply names facts not given yet: it gives them (``Order id: O1001.``);
    2. the reply says the goal is met (``stop_when``): it thanks and ends (``CLOSING``);
    3. the reply asks again (a ``?``) for facts already given: it gives them again;
    4. otherwise: ``I do not know that.``

    The turn limit (``max_turns``) is the conversation's (``conversation.py``), not the user's."""

    name = SCRIPTED

    def __init__(self, spec: UserSpec) -> None:
        self.spec = spec

    def reply(self, turns: Sequence[Turn]) -> Reply:
        said = turns[-1].text if turns and turns[-1].role == AGENT else ""
        given = {name for t in turns if t.role == USER for name in self.spec.said(t.text)}
        named = self.spec.named(said)
        fresh = [name for name in named if name not in given]
        if fresh:
            return Reply(answer(self.spec, fresh))
        if self.spec.done(said):
            return Reply(CLOSING, stop=True)
        if named and "?" in said:
            return Reply(answer(self.spec, named))
        return Reply(DONT_KNOW)


def simulator_template() -> str:
    """``user_simulator.md``: the prompt with its blanks (``$persona``, ...)."""
    return SIMULATOR_PROMPT.read_text(encoding="utf-8")


def simulator_prompt(spec: UserSpec, opening: str) -> str:
    """The system message of a model playing the user. Template, not format: braces in a persona are text."""
    listed = "\n".join(f"- {name}: {value}" for name, value in spec.facts.items()) or "- (nothing beyond the above)"
    return Template(simulator_template()).safe_substitute(
        persona=spec.persona, goal=spec.goal, facts=listed, opening=opening, stop=STOP,
        withheld=", ".join(spec.withheld) or "(none)", never_say="; ".join(spec.never_say) or "(nothing)",
        asked_by=other_words(spec.asked_by), stop_when="; ".join(f'"{p}"' for p in spec.stop_when))


def other_words(asked_by: Mapping[str, Sequence[str]]) -> str:
    """``asked_by`` as the prompt lists it: ``order_id: "order number", "which order"``, facts apart by ``; ``.
    Each phrase is a JSON string, so one holding a quote or a ``;`` reads back whole."""
    return "; ".join(f"{name}: " + ", ".join(json.dumps(p, ensure_ascii=False) for p in phrases)
                     for name, phrases in asked_by.items() if phrases) or "(none)"

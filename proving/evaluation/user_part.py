"""The ``user`` part of a conversational sample (docs/conversations.md): who the simulated user is, what it wants,
the facts it gives when asked, what it must not say unasked, and when it stops.

Strict and bounded, as everything a model wrote: no coercion (``"max_turns": "5"`` is refused), no unknown key,
every size and count capped, and every name it refers to must exist. A bad one makes the sample an L4 before
anything runs (proving/evaluation/samples.py). Texts are read by the rules of the exported task's user
(proving/export/runtime/users.py), so the schema and the run agree on what "says a fact" means.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StringConstraints, model_validator

from proving.export.runtime import users

MAX_FACTS = 20
MAX_TURNS = 30  # a conversation of more turns costs more than it tells, and tau2's tasks end well within it
MIN_WITHHELD_CHARS = 3  # a withheld value as short as "5" would be "said" by any text holding that digit

FactName = Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z][a-z0-9_]{0,47}$")]
Text = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=2000)]
Phrase = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=200)]
FactText = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=500)]
FactValue = FactText | StrictInt | StrictFloat  # not bool: "true" would be said by every yes


class UserPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    persona: Text  # who the user is and how they talk
    goal: Text  # what the user wants from the conversation, told to the user simulator only
    facts: dict[FactName, FactValue] = Field(default_factory=dict, max_length=MAX_FACTS)
    withheld: list[FactName] = Field(default_factory=list, max_length=MAX_FACTS)  # given only when asked for
    never_say: list[Phrase] = Field(default_factory=list, max_length=20)  # never said, asked or not
    asked_by: dict[FactName, list[Phrase]] = Field(default_factory=dict, max_length=MAX_FACTS)  # more names
    stop_when: list[Phrase] = Field(min_length=1, max_length=10)  # the agent's words that mean the goal is met
    max_turns: int = Field(default=10, ge=2, le=MAX_TURNS)  # the user's messages, the opening included

    @model_validator(mode="after")
    def _names_exist(self) -> UserPart:
        unknown = sorted({*self.withheld, *self.asked_by} - set(self.facts))
        if unknown:
            raise ValueError(f"withheld and asked_by name facts the user does not hold: {', '.join(unknown)} "
                             f"(the facts are: {', '.join(self.facts) or 'none'})")
        if len(set(self.withheld)) != len(self.withheld):
            raise ValueError("withheld names a fact twice")
        short = [n for n in self.withheld if all(len(f) < MIN_WITHHELD_CHARS for f in users.value_forms(self.facts[n]))]
        if short:
            raise ValueError(f"withheld facts need values of at least {MIN_WITHHELD_CHARS} characters, to be told "
                             f"apart from other words: {', '.join(short)}")
        blank = [p for p in [*self.stop_when, *self.never_say, *(p for ps in self.asked_by.values() for p in ps)]
                 if not users.normal(p)]
        if blank:
            raise ValueError(f"a phrase of stop_when, never_say or asked_by holds no word: {blank[0]!r}")
        if any(len(phrases) > 8 for phrases in self.asked_by.values()):
            raise ValueError("asked_by gives at most 8 phrases a fact")
        if users.STOP in self.model_dump_json():  # a model playing the user ends the conversation with it
            raise ValueError(f"{users.STOP} is the user's word for the end of the conversation: no text here may "
                             "hold it")
        return self

    def said_unasked(self, text: str) -> str | None:
        """What ``text`` would give away if the user said it before being asked anything, in words; None if
        nothing."""
        found = users.unasked(text, self.facts, self.withheld, self.never_say)
        return "; ".join(found) if found else None

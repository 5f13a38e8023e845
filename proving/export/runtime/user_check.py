"""The simulator check (docs/conversations.md): after a conversation, did the user simulator spoil it? Standard
library only and deterministic, so it judges the scripted user and any model playing the user alike.

A run is the simulator's fault when the user

- said a withheld fact's value before the agent had named that fact in any earlier turn (``leaked``),
- said one of the things it must never say (``said``),
- broke persona (``broke persona``): spoke as the agent or an assistant ("how can I help you"), said it is an AI,
  or repeated its instructions (their headings or first words), as tau2-bench's user simulators did before its
  prompts were fixed, or
- ended the conversation (``STOP``) right after the agent asked for a fact it holds, without giving it
  (``stopped``): the prompt says not to end it while the agent is still asking for something the user knows, or
- held a fact the expected actions need, was asked for it, had a turn to answer after the ask, and never gave it
  in the whole conversation (``never gave``): refusing or claiming not to know.

In tau2-bench up to 30% of the failed retail runs were the user simulator's (its PR #392): such a run says
nothing about the agent, so it is counted apart from the agent's failures. What the check cannot see (a user
that breaks persona in other ways, or misleads with wrong values) is left to reading the transcripts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .users import AGENT, SIMULATOR_OPENING, STOP, USER, Turn, UserSpec, normal, says_phrase, unasked, value_forms

# What a customer does not say: the words of a service agent or an assistant, and the prompt's own (its first
# words and its headings). Matched whole and loosely, as every phrase (users.says_phrase).
OUT_OF_PERSONA = ("how can i help you", "how may i help you", "how can i assist you", "how may i assist you",
                  "is there anything else i can help", "as an ai", "i am an ai", "i'm an ai", "language model",
                  "i am the agent", "as the customer service agent", SIMULATOR_OPENING.split(",")[0],
                  "## who you are", "## what you know", "## how you give what you know", "## you already said",
                  "## when the conversation ends")


def needed_facts(spec: UserSpec, actions: Sequence[Mapping[str, Any]]) -> list[str]:
    """The user's facts whose value an expected action's arguments hold (the agent cannot act right without
    them, unless a tool tells it), in the facts' order."""
    values = [v for action in actions for v in _leaves(action.get("args") or {})]
    return [name for name, fact in spec.facts.items() if any(_same(fact, v) for v in values)]


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _same(fact: Any, value: Any) -> bool:
    """An argument holds the fact: equal numbers, or the same text as the fact in any of its forms."""
    if isinstance(value, bool) or isinstance(fact, bool):
        return False
    if isinstance(value, int | float) and isinstance(fact, int | float):
        return float(value) == float(fact)
    forms = {normal(form) for form in value_forms(fact)}
    return normal(str(value)) in forms if isinstance(value, str) else normal(str(fact)) in value_forms(value)


def simulator_faults(spec: UserSpec, turns: Sequence[Turn], actions: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why the conversation ``turns`` is the user simulator's fault, in words (empty: it is not)."""
    faults: list[str] = []
    asked: set[str] = set()  # facts the agent has named so far
    answerable: set[str] = set()  # of those, the ones a user turn came after
    given: set[str] = set()
    asking: list[str] = []  # the facts the agent's latest turn asks for
    stopped_on: set[str] = set()  # facts the user ended the conversation on, asked and not given
    number = 0
    for turn in turns:
        if turn.role == AGENT:
            asking = spec.named(turn.text)
            asked |= set(asking)
            continue
        if turn.role != USER:
            continue
        number += 1
        answerable |= asked
        for found in unasked(turn.text, spec.facts, spec.withheld, spec.never_say, asked):
            if not any(f.startswith(found) for f in faults):  # the first time is the fault; repeats add nothing
                later = ", before the agent asked for it" if found.startswith("leaked") else ""
                faults.append(f"{found} in the user's turn {number}{later}")
        broke = next((phrase for phrase in OUT_OF_PERSONA if says_phrase(turn.text, phrase)), None)
        if broke and not any(f.startswith("broke persona") for f in faults):
            faults.append(f"broke persona in the user's turn {number}: said {broke!r}, which no customer says")
        given |= set(spec.said(turn.text))
        pending = [name for name in asking if name not in given]
        if STOP in turn.text and pending and not stopped_on:
            stopped_on |= set(pending)
            faults.append(f"stopped in the user's turn {number} while the agent was asking for "
                          f"{', '.join(pending)}, which the user holds")
    for name in needed_facts(spec, actions):
        if name in answerable and name not in given and name not in stopped_on:
            faults.append(f"never gave {name}, which the expected actions need, although the agent asked for it")
    return faults

"""The simulated model as the USER of a conversational sample (docs/conversations.md), played offline.

A model playing the user gets a system message written from the sample's ``user`` part
(``users.simulator_prompt``, from ``user_simulator.md``) and the conversation from the user's side: the agent's
turns as user messages, its own as assistant messages, its opening in the prompt. This module answers such a
request without a language model, so ``-T user=baton/simulated`` (proving/evaluation/blind_model.py) and
``-T user=anthropic/<id>`` against ``baton fake-api`` (workers/fake_api/answer.py) play the user offline. It
reads the user part back out of the prompt and replies by the scripted user's rules (``users.ScriptedUser``),
every text starting with ``[simulated]`` so no transcript passes it off as a model's.

Reading back is strict, because a misread fact would be a wrong answer given with confidence: the prompt must be
the template with its blanks filled, and the part read, written out again, must give the same prompt character
for character. A prompt that is not one (another template, an edited one, a garbled one) gets None, never a
guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from string import Template
from typing import Any

from proving.evaluation.blind import LABEL, text_of
from proving.export.runtime.users import (
    AGENT,
    SIMULATOR_OPENING,
    USER,
    ScriptedUser,
    Turn,
    UserSpec,
    simulator_prompt,
    simulator_template,
)

NOT_COUNTED = 0  # the prompt says no turn limit: the conversation counts the turns, the user does not
_NAME = r"[a-z][a-z0-9_]{0,47}"  # a fact's name, as the sample schema allows it (proving/evaluation/user_part.py)
_FACT = re.compile(rf"^- ({_NAME}): ", re.MULTILINE)
_NO_FACTS = "- (nothing beyond the above)"
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_PHRASE = r'"(?:[^"\\]|\\.)*"'  # a JSON string, as users.other_words writes each phrase
_OTHER_WORDS = re.compile(rf"({_NAME}): ({_PHRASE}(?:, {_PHRASE})*)(?:; |\Z)")


@dataclass(frozen=True)
class Prompted:
    """What a user simulator's prompt says: the user part (less the turn limit) and the opening already said."""

    spec: UserSpec
    opening: str


def recognises(system: Any) -> bool:
    """The system message (a text or Messages API blocks) is a user simulator's prompt, by its first words."""
    return text_of(system).lstrip().startswith(SIMULATOR_OPENING)


def read_prompt(system: str) -> Prompted | None:
    """The user part and the opening a user simulator's prompt was written from; None when ``system`` is not
    exactly such a prompt."""
    if not recognises(system):
        return None
    found = _template().fullmatch(system.strip())
    if found is None:
        return None
    blank = found.groupdict()
    facts, asked_by, stop_when = _facts(blank["facts"]), _other_words(blank["asked_by"]), _quoted(blank["stop_when"])
    withheld = _listed(blank["withheld"], ", ", "(none)")
    if facts is None or asked_by is None or not stop_when or not {*withheld, *asked_by} <= set(facts):
        return None  # the sample schema's rule too: withheld and asked_by name facts the user holds
    never_say = _listed(blank["never_say"], "; ", "(nothing)")
    spec = UserSpec(persona=blank["persona"], goal=blank["goal"], facts=facts, withheld=withheld,
                    stop_when=stop_when, max_turns=NOT_COUNTED, never_say=never_say, asked_by=asked_by)
    # Written out again it must be the same prompt: a thing never to say that holds "; " reads back as two and
    # still writes the same (the scripted user does not use them), but no fact is ever read otherwise than written.
    if simulator_prompt(spec, blank["opening"]).strip() != system.strip():
        return None
    return Prompted(spec, blank["opening"])


def turns(opening: str, said: Iterable[tuple[str, str]]) -> list[Turn]:
    """The conversation as the user had it, from a request's messages (role, text): the opening, then the agent's
    turns (the request's user messages) and the user's own (its assistant messages)."""
    roles = {"user": AGENT, "assistant": USER}
    return [Turn(USER, opening), *(Turn(roles[role], text) for role, text in said if role in roles)]


def reply_text(system: str, said: Sequence[tuple[str, str]]) -> str | None:
    """The simulated user's next message, labelled, to a request with this system message and these messages
    ((role, text), from the user's side); None when ``system`` is no user simulator prompt it can read. The
    scripted user's ``###STOP###`` stays in it: the conversation ends on it as on a model's."""
    prompted = read_prompt(system)
    if prompted is None:
        return None
    answer = ScriptedUser(prompted.spec).reply(turns(prompted.opening, said))
    return f"{LABEL} {answer.text}"


def anthropic_reply(system: Any, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The content and stop reason of the simulated user's answer to a Messages API request, or None when the
    request's system message is no user simulator prompt it can read."""
    said = [(str(m.get("role")), text_of(m.get("content"))) for m in messages if isinstance(m, dict)]
    text = reply_text(text_of(system), said)
    if text is None:
        return None
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


@cache
def _template() -> re.Pattern[str]:
    """``user_simulator.md`` as a pattern: its text as written, each blank a group (a blank met again must hold
    the same text). Blanks are lazy: the fixed text around them says where each ends."""
    template = simulator_template().strip()
    parts: list[str] = []
    named: set[str] = set()
    last = 0
    for blank in Template.pattern.finditer(template):
        parts.append(re.escape(template[last:blank.start()]))
        name = blank.group("named") or blank.group("braced")
        if name is None:  # "$$", or a "$" no name follows: safe_substitute leaves it as written
            parts.append(re.escape("$" if blank.group("escaped") is not None else blank.group()))
        else:
            parts.append(f"(?P={name})" if name in named else f"(?P<{name}>.*?)")
            named.add(name)
        last = blank.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts), re.DOTALL)


def _facts(text: str) -> dict[str, Any] | None:
    """``- name: value`` lines, a value running to the next fact's line."""
    if text == _NO_FACTS:
        return {}
    starts = list(_FACT.finditer(text))
    if not starts or starts[0].start() != 0:
        return None
    ends = [s.start() for s in starts[1:]] + [len(text) + 1]
    return {s.group(1): _value(text[s.end():end - 1]) for s, end in zip(starts, ends, strict=True)}


def _value(text: str) -> Any:
    """A fact as the sample gave it: a number written as Python writes one is that number (so ``89.0`` is also
    said by "$89"); anything else (``007``, ``O1001``) stays text."""
    if _NUMBER.fullmatch(text):
        number = float(text) if "." in text else int(text)
        if str(number) == text:
            return number
    return text


def _listed(text: str, separator: str, none: str) -> tuple[str, ...]:
    return () if text == none else tuple(text.split(separator))


def _quoted(text: str) -> tuple[str, ...]:
    """``"a"; "b"`` as its phrases; empty when it is not written so."""
    if len(text) < 2 or not (text.startswith('"') and text.endswith('"')):
        return ()
    return tuple(text[1:-1].split('"; "'))


def _other_words(text: str) -> dict[str, tuple[str, ...]] | None:
    """``order_id: "order number", "which order"; customer_id: "account"`` (users.other_words) as a mapping."""
    if text == "(none)":
        return {}
    found: dict[str, tuple[str, ...]] = {}
    at = 0
    while at < len(text):
        match = _OTHER_WORDS.match(text, at)
        if match is None:
            return None
        try:
            found[match.group(1)] = tuple(json.loads(f"[{match.group(2)}]"))
        except ValueError:
            return None
        at = match.end()
    return found or None

"""Whether the goal of a conversational sample can be reached with what the agent can learn (issue 33).

The reference replay runs the sample's expected actions; an agent under test must pass the same identifiers to
its tools. It can learn each one from the user's opening (the instruction), from a fact the user holds and gives
when asked, or from the output of an earlier call. An identifier none of these holds is one the user never gives:
no agent can reach the goal, whatever it asks, and the sample is unsolvable (an L4 the report carries back).

Only identifiers count (text without spaces, at least three characters: an order id, an email): free text such
as a refund's reason is the agent's own words, and an amount may be computed; neither is checked here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from proving.evaluation.models import Sample
from proving.export.runtime.users import says_value

IDENTIFIER = re.compile(r"^[^\s]{3,200}$")


def _identifiers(value: Any, path: str = "") -> Iterable[tuple[str, str]]:
    """(argument path, value) for every identifier-like text in an action's arguments."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _identifiers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _identifiers(item, f"{path}[{index}]")
    elif isinstance(value, str) and IDENTIFIER.match(value):
        yield path, value


def unreachable(sample: Sample, outputs: list[Any]) -> str | None:
    """Why a conversational sample's goal cannot be reached (the first identifier nothing gives), or None."""
    if sample.user is None or sample.lookups_omitted:
        return None
    facts = [str(value) for value in sample.user.facts.values()]
    for index, action in enumerate(sample.actions):
        seen = [sample.instruction, *facts, *(json.dumps(out, ensure_ascii=False, default=str)
                                              for out in outputs[:index])]
        for path, value in _identifiers(action.args):
            if not any(says_value(text, value) for text in seen):
                return (f"unsolvable: action {index} ({action.tool}) needs {path} = {value!r}, which neither the "
                        "user's opening, a fact the user holds nor an earlier call's output gives: the user never "
                        "gives it, so no agent can reach the goal")
    return None

"""The domain's policy as ``design/business_rules.md``: tau2's text kept word for word, each of its rules (a
paragraph or list item that obliges, allows or forbids something) opened by an id, ``P1:``, ``P2:``..., so that
the coverage gate can count them (proving/evaluation/coverage.py reads a list item opening with an id).

What is a rule is read from its words (must, should, can, only, never, ...): a line that only describes the data
(``- unique user id``) is left as it is. A paragraph becomes a list item to carry its id; its words do not change.
"""

from __future__ import annotations

import re

NORMATIVE = re.compile(r"\b(must|should|shall|can|cannot|can't|may|only|never|always|need|needs|required?|"
                       r"not allowed|allowed|have to|has to|deny|refuse|do not|don't|will|if and only if|at most|"
                       r"at least|before|unless)\b", re.IGNORECASE)
LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+(.*)$")
OPENING = "P"


def numbered(policy: str) -> tuple[str, list[str]]:
    """(the policy with its rules numbered, the ids in order)."""
    lines = policy.splitlines()
    out: list[str] = []
    ids: list[str] = []
    in_code = False
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.lstrip().startswith("```"):
            in_code = not in_code
        item = LIST_ITEM.match(line)
        if in_code or not line.strip() or line.lstrip().startswith(("#", "<", "|", ">")):
            out.append(line)
        elif item:
            text = item.group(3)
            if NORMATIVE.search(text):
                ids.append(f"{OPENING}{len(ids) + 1}")
                out.append(f"{item.group(1)}{item.group(2)} {ids[-1]}: {text}")
            else:
                out.append(line)
        else:  # a paragraph: its lines up to the next blank line, heading or list item
            block = [line]
            while index + 1 < len(lines) and lines[index + 1].strip() and not LIST_ITEM.match(lines[index + 1]) \
                    and not lines[index + 1].lstrip().startswith(("#", "```", "<", "|")):
                index += 1
                block.append(lines[index])
            if NORMATIVE.search(" ".join(block)):
                ids.append(f"{OPENING}{len(ids) + 1}")
                out.append(f"- {ids[-1]}: {block[0]}")
                out += [f"  {b}" for b in block[1:]]
            else:
                out += block
        index += 1
    return "\n".join(out) + ("\n" if policy.endswith("\n") else ""), ids


def words(text: str) -> str:
    """The text without the ids and list markers ``numbered`` adds: the words a test compares with tau2's."""
    text = re.sub(rf"^(\s*)(?:- )?(?:([-*+]|\d+[.)]) )?{OPENING}\d+: ", r"\1\2 ", text, flags=re.MULTILINE)
    return " ".join(re.sub(r"^\s*(?:[-*+]|\d+[.)])?\s*", "", line) for line in text.splitlines() if line.strip())

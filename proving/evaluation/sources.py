"""Where a literal of an expected action can come from, and what the data says about it (the gold gate, gold.py).

An agent under test can pass only what it can learn: the user's opening, the facts the user holds, the policy,
the output of a call it made before, or arithmetic over their numbers (a total, a difference). A literal none of
these gives is one no agent can know (or a wrong one). And where an argument is a record (a passenger, an
address) that matches one the data holds in some fields, a field it changes must be one the user asked for.

Texts are read as the exported task's user reads them (runtime/users.py: a value found whole, ``89.0`` also as
``89``); everything is bounded (a walk of the data stops at ``MAX_NODES``, the numbers combined at ``MAX_NUMBERS``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from proving.export.runtime.users import normal, says_value

NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]\d)")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
ID_LIKE = re.compile(r"^#?(?=.*\d)[A-Za-z0-9][\w\-.]*$")  # O1001, #W2378156, credit_card_1, mia_garcia_4516
MAX_NODES = 200_000
MAX_NUMBERS = 300
FREE = frozenset({0, 1})  # a count of one, nothing: defaults no source needs to give
CENT = 0.005


def walk(value: Any, path: str = "", budget: list[int] | None = None) -> Iterator[tuple[str, Any]]:
    """(path, value) of every node under ``value``, at most MAX_NODES in all."""
    budget = budget if budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0:
        return
    yield path, value
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from walk(item, f"{path}.{key}" if path else str(key), budget)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, f"{path}[{index}]", budget)


def _numbers(value: Any) -> list[float]:
    found: list[float] = []
    for _, node in walk(value):
        if isinstance(node, int | float) and not isinstance(node, bool):
            found.append(float(node))
        elif isinstance(node, str):
            found += [float(n) for n in NUMBER.findall(node)]
    return found


def _sums(value: Any) -> list[float]:
    """Per field name, the sum of its numbers over the output (the prices of an order's items: its total)."""
    by_key: dict[str, float] = {}
    for path, node in walk(value):
        if isinstance(node, int | float) and not isinstance(node, bool):
            key = re.sub(r"\[\d+\]", "[]", path)
            by_key[key] = by_key.get(key, 0.0) + float(node)
    return list(by_key.values())


class Sources:
    """What an agent could know before one action of a sample: texts, and numbers to combine."""

    def __init__(self, texts: list[str], numbers: list[float], known: frozenset[str],
                 user: list[str] | None = None) -> None:
        self.texts = [t for t in texts if t]
        self.user = [t for t in user or [] if t]  # what the user says or holds: its word on a value wins
        self.numbers = numbers
        self.known = known  # normal forms of the data's texts, when the sample's lookups are left out
        self._combined: set[float] | None = None

    @classmethod
    def of(cls, sample: Mapping[str, Any], policy: str, data: Any) -> Sources:
        user = sample.get("user") if isinstance(sample.get("user"), Mapping) else {}
        facts = user.get("facts") if isinstance(user.get("facts"), Mapping) else {}
        texts = [str(sample.get("instruction") or ""), str(user.get("goal") or ""), policy,
                 *(str(v) for v in facts.values())]
        numbers = [n for t in texts for n in _numbers(t)]
        known: frozenset[str] = frozenset()
        if sample.get("lookups_omitted") and data is not None:
            # The gold leaves out the lookups that give its ids: what the data holds is what those lookups give.
            known = frozenset(normal(str(v)) for _, v in walk(data) if isinstance(v, str | int | float))
        return cls(texts, numbers, known, [texts[0], texts[1], *texts[3:]])

    def said_by_user(self, value: Any) -> bool:
        return any(says_value(t, value) for t in self.user)

    def add_output(self, output: Any) -> None:
        self.texts.append(json.dumps(output, ensure_ascii=False, default=str))
        self.numbers += _numbers(output) + _sums(output)
        self._combined = None

    def gives(self, value: Any) -> bool:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value in FREE or any(abs(value - n) < CENT for n in self.combined())
        text = str(value)
        if normal(text) in self.known:
            return True
        return any(says_value(t, text) for t in self.texts)

    def combined(self) -> set[float]:
        """The numbers, and every sum, difference, product and ratio of two of them (rounded to the cent)."""
        if self._combined is None:
            base = list(dict.fromkeys(round(n, 4) for n in self.numbers))[:MAX_NUMBERS]
            found = set(base)
            for i, a in enumerate(base):
                for b in base[i:]:
                    found.update((a + b, a - b, b - a, a * b))
                    if b:
                        found.add(a / b)
                    if a:
                        found.add(b / a)
            self._combined = {round(n, 2) for n in found}
        return self._combined


def records_of(args: Mapping[str, Any], data: Any) -> list[tuple[str, Any]]:
    """The records of the data an action's identifiers name: the value under a key equal to one, and each object
    with a field equal to one ((path, record), each once)."""
    ids = {v for _, v in walk(args) if isinstance(v, str) and ID_LIKE.match(v) and not DATE.match(v) and len(v) >= 2}
    if not ids or not isinstance(data, Mapping):
        return []
    found: dict[str, Any] = {}
    for path, node in walk(data):
        if isinstance(node, Mapping):
            for key, item in node.items():
                if isinstance(key, str) and key in ids:
                    found.setdefault(f"{path}.{key}" if path else key, item)
            if any(isinstance(item, str) and item in ids for item in node.values()):
                found.setdefault(path, node)
    return list(found.items())


def contradicted(args: Mapping[str, Any], records: list[tuple[str, Any]],
                 sources: Sources) -> list[tuple[str, Any, str]]:
    """(argument path, value, where the data says otherwise) for each field of a record-like argument that a
    record of the data matches on another field but holds otherwise, and that the user's opening does not say."""
    found = []
    for arg_path, arg in walk(args):
        if not isinstance(arg, Mapping):
            continue
        scalars = {k: v for k, v in arg.items() if isinstance(v, str | int | float) and not isinstance(v, bool)}
        if len(scalars) < 2:
            continue
        for where, record in records:
            for path, node in walk(record, where):
                if not isinstance(node, Mapping):
                    continue
                shared = [k for k in scalars if k in node and isinstance(node[k], str | int | float)]
                same = [k for k in shared if node[k] == scalars[k] and isinstance(node[k], str) and len(node[k]) > 1]
                other = [k for k in shared if node[k] != scalars[k]]
                if not same or not other or len(shared) < 2:
                    continue
                for key in other:
                    if sources.said_by_user(scalars[key]):
                        continue
                    at = f"{arg_path}.{key}" if arg_path else key
                    found.append((at, scalars[key], f"{path}.{key} = {node[key]!r} (the record whose "
                                  f"{same[0]} is {node[same[0]]!r})"))
    return list({(a, repr(v)): (a, v, w) for a, v, w in found}.values())


def canonical(value: Any, names: dict[str, str]) -> Any:
    """A record up to renaming of its ids (dates and amounts kept: rules decide on them)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), canonical(v, names)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(canonical(v, names) for v in value)
    if isinstance(value, str) and ID_LIKE.match(value) and not DATE.match(value):
        return names.setdefault(value, f"<id{len(names)}>")
    return value


def situation(sample: Mapping[str, Any], data: Any) -> tuple[Any, ...] | None:
    """What decides a sample, up to renaming: the rules it cites and the records its actions name. None when it
    names none (nothing to compare)."""
    names: dict[str, str] = {}
    records = []
    for action in sample.get("actions") or []:
        if isinstance(action, Mapping) and isinstance(action.get("args"), Mapping):
            for _, record in records_of(action["args"], data):
                records.append(canonical(record, names))
    if not records:
        return None
    return tuple(sorted(str(r) for r in sample.get("rules") or [])), tuple(dict.fromkeys(records))


def asked(sample: Mapping[str, Any]) -> set[str]:
    """The words of what the user asks and holds, ids and numbers left out (for comparing two requests)."""
    user = sample.get("user") if isinstance(sample.get("user"), Mapping) else {}
    text = " ".join([str(sample.get("instruction") or ""), str(user.get("goal") or "")])
    return {w for w in normal(re.sub(r"[^\w\s-]", " ", text)).split() if not any(c.isdigit() for c in w)}

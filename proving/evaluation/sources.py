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

from proving.export.runtime.users import _found, normal, value_forms  # _found: says_value on a normal text

NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]\d)")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
ID_LIKE = re.compile(r"^#?(?=.*\d)[A-Za-z0-9][\w\-.]*$")  # O1001, #W2378156, credit_card_1, mia_garcia_4516
MAX_NODES = 200_000  # a record, an output
DATA_NODES = 5_000_000  # the whole data, indexed once (a benchmark's database: a few hundred thousand)
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


def numbers_in(value: Any) -> list[float]:
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


class DataIndex:
    """The initial data read once for every sample: each id-like text's places (the value under a key equal to it,
    and each object with a field equal to it), and, for samples whose gold leaves its lookups out, every text it
    holds (what those lookups would give)."""

    def __init__(self, data: Any) -> None:
        self.places: dict[str, dict[str, Any]] = {}
        self.texts: set[str] = set()
        if not isinstance(data, Mapping):
            return
        for path, node in walk(data, budget=[DATA_NODES]):
            if isinstance(node, str | int | float) and not isinstance(node, bool):
                self.texts.add(normal(str(node)))
            if not isinstance(node, Mapping):
                continue
            for key, item in node.items():
                if isinstance(key, str) and ID_LIKE.match(key):
                    self.places.setdefault(key, {}).setdefault(f"{path}.{key}" if path else key, item)
                if isinstance(item, str) and ID_LIKE.match(item):
                    self.places.setdefault(item, {}).setdefault(path, node)

    def records_of(self, args: Any) -> list[tuple[str, Any]]:
        """The records an action's identifiers name ((path, record), each once)."""
        ids = [v for _, v in walk(args) if isinstance(v, str) and ID_LIKE.match(v) and not DATE.match(v)]
        found: dict[str, Any] = {}
        for value in dict.fromkeys(ids):
            found.update(self.places.get(value, {}))
        return list(found.items())


class Sources:
    """What an agent could know before one action of a sample: texts (kept in their normal form), and numbers to
    combine."""

    def __init__(self, texts: list[str], numbers: list[float], known: set[str] | frozenset[str],
                 user: list[str] | None = None) -> None:
        self.texts = [normal(t) for t in texts if t]
        self.user = [normal(t) for t in user or [] if t]  # what the user says or holds: its word on a value wins
        self.numbers = numbers
        self.known = known  # the data's texts, when the sample's lookups are left out
        self._combined: set[float] | None = None

    @classmethod
    def of(cls, sample: Mapping[str, Any], policy: str, index: DataIndex) -> Sources:
        user = sample.get("user") if isinstance(sample.get("user"), Mapping) else {}
        facts = user.get("facts") if isinstance(user.get("facts"), Mapping) else {}
        said = [str(sample.get("instruction") or ""), str(user.get("goal") or ""), *(str(v) for v in facts.values())]
        numbers = [n for t in [*said, policy] for n in numbers_in(t)]
        # The gold leaves out the lookups that give its ids: what the data holds is what those lookups give.
        known = index.texts if sample.get("lookups_omitted") else frozenset()
        return cls([*said, policy], numbers, known, said)

    def said_by_user(self, value: Any) -> bool:
        return any(_found_value(t, value) for t in self.user)

    def add_output(self, output: Any) -> None:
        self.texts.append(normal(json.dumps(output, ensure_ascii=False, default=str)))
        self.numbers += numbers_in(output) + _sums(output)
        self._combined = None

    def gives(self, value: Any) -> bool:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return (value in FREE or any(abs(value - n) < CENT for n in self.combined())
                    or any(form in self.known for form in value_forms(value)))
        if normal(str(value)) in self.known:
            return True
        return any(_found_value(t, value) for t in self.texts)

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


def _found_value(said: str, value: Any) -> bool:
    """``says_value`` on a text already in its normal form."""
    return any(_found(said, form) for form in value_forms(value))


def held_otherwise(args: Mapping[str, Any], records: list[tuple[str, Any]], path: str, value: Any) -> str | None:
    """Where a record the action names holds another value for the argument at ``path``, in a record that matches
    the argument's record on another field ("users.u1.saved_passengers[0].dob = '1990-04-02' (the record whose
    first_name is 'Noah')"); None when none does. Evidence for a value no source gives."""
    parent_path, _, key = path.rpartition(".")
    parent: Any = args
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", parent_path):
        parent = parent[int(part[1:-1])] if part.startswith("[") and isinstance(parent, list) else (
            parent.get(part) if isinstance(parent, Mapping) else None)
    if not isinstance(parent, Mapping):
        return None
    for where, record in records:
        for at, node in walk(record, where):
            if not isinstance(node, Mapping) or key not in node or node[key] == value:
                continue
            same = [k for k, v in parent.items() if k != key and isinstance(v, str) and len(v) > 1 and node.get(k) == v]
            if same:
                return f"{at}.{key} = {node[key]!r} (the record whose {same[0]} is {node[same[0]]!r})"
    return None


def canonical(value: Any, names: dict[str, str]) -> Any:
    """A record up to renaming of its ids (dates and amounts kept: rules decide on them)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), canonical(v, names)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(canonical(v, names) for v in value)
    if isinstance(value, str) and ID_LIKE.match(value) and not DATE.match(value):
        return names.setdefault(value, f"<id{len(names)}>")
    return value


def situation(sample: Mapping[str, Any], index: DataIndex) -> tuple[Any, ...] | None:
    """What decides a sample, up to renaming: the rules it cites and the records its actions name. None when it
    names none (nothing to compare)."""
    names: dict[str, str] = {}
    records = []
    for action in sample.get("actions") or []:
        if isinstance(action, Mapping) and isinstance(action.get("args"), Mapping):
            for _, record in index.records_of(action["args"]):
                records.append(canonical(record, names))
    if not records:
        return None
    return tuple(sorted(str(r) for r in sample.get("rules") or [])), tuple(dict.fromkeys(records))


def asked(sample: Mapping[str, Any]) -> set[str]:
    """The words of what the user asks and holds, ids and numbers left out (for comparing two requests)."""
    user = sample.get("user") if isinstance(sample.get("user"), Mapping) else {}
    text = " ".join([str(sample.get("instruction") or ""), str(user.get("goal") or "")])
    return {w for w in normal(re.sub(r"[^\w\s-]", " ", text)).split() if not any(c.isdigit() for c in w)}

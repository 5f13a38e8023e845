"""The order tests/conftest.py gives the suite under pytest-xdist: one pile per worker with exactly the count
worksteal sends it, a group's tests together in one pile, slow tests spread over the piles and first in them."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from tests.conftest import deal, share_sizes


@dataclass
class FakeItem:
    name: str
    markers: dict[str, SimpleNamespace] = field(default_factory=dict)

    def get_closest_marker(self, name: str) -> SimpleNamespace | None:
        return self.markers.get(name)


def item(name: str, slow: bool = False, group: str | None = None) -> FakeItem:
    markers = {"slow": SimpleNamespace(args=(), kwargs={})} if slow else {}
    if group:
        markers["xdist_group"] = SimpleNamespace(args=(group,), kwargs={})
    return FakeItem(name, markers)


def suite() -> list[FakeItem]:
    items = [item(f"quick{i}") for i in range(40)]
    items[3:3] = [item(f"slow{i}", slow=True) for i in range(6)]
    items[20:20] = [item(f"inspect{i}", group="inspect") for i in range(5)]
    items += [item(f"chaos{i}", group="chaos", slow=i == 0) for i in range(3)]
    return items


def test_the_share_sizes_are_those_worksteal_sends() -> None:
    assert share_sizes(10, 4) == [2, 2, 3, 3]
    assert share_sizes(1228, 4) == [307, 307, 307, 307]
    assert sum(share_sizes(1305, 3)) == 1305


def test_piles_have_their_counts_groups_stay_whole_and_slow_tests_lead() -> None:
    items = suite()
    sizes = share_sizes(len(items), 4)
    piles = deal(items, sizes)
    assert [len(p) for p in piles] == sizes
    assert sorted(i.name for p in piles for i in p) == sorted(i.name for i in items)
    for group in ("inspect", "chaos"):
        (holder,) = [p for p in piles if any(i.name.startswith(group) for i in p)]
        names = [i.name for i in holder if i.name.startswith(group)]
        start = [i.name for i in holder].index(names[0])
        assert [i.name for i in holder[start:start + len(names)]] == names  # contiguous, in file order
    slow_per_pile = [sum(i.get_closest_marker("slow") is not None for i in p) for p in piles]
    assert max(slow_per_pile) - min(slow_per_pile) <= 2
    for pile in piles:  # quick singles come after every heavy unit of the pile
        kinds = ["quick" if i.name.startswith("quick") else "heavy" for i in pile]
        assert kinds == sorted(kinds, key=lambda k: k == "quick")


def test_every_worker_computes_the_same_order() -> None:
    first = [i.name for p in deal(suite(), share_sizes(54, 4)) for i in p]
    assert first == [i.name for p in deal(suite(), share_sizes(54, 4)) for i in p]

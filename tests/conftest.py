"""Fixtures shared by test files: a private redis-server on a free port (never the machine's own), the
example run to its end or to its approval gate (made once per session for every xdist worker,
tests/shared_runs.py), and its export. Under pytest-xdist (the README's ``--dist worksteal``) each worker
starts on its share of the heavy tests: slow ones and ``xdist_group`` groups (the order below)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.shared_runs import SharedRun, shared_run

if TYPE_CHECKING:
    from tests.workers_harness import RedisServer

if sys.dont_write_bytecode and not sys.pycache_prefix:
    # Under PYTHONDONTWRITEBYTECODE pytest rewrites every test module's asserts afresh in every process: about
    # 8 s of CPU per xdist worker on every run. Keep the rewritten modules outside the checkout instead, so the
    # tree stays as clean as the setting asks (this process only: the processes tests start are unchanged).
    sys.pycache_prefix = str(Path(tempfile.gettempdir()) / f"baton-test-pycache-{os.getuid()}")
    sys.dont_write_bytecode = False


# The example's scenario.toml runs all seven gates, and the floor, mutation and solver gates add about 20 s to each
# of its iterations. The tests of the runtime (Celery, compaction, recovery, export) run the example dozens of
# times without looking at those figures, so the suite runs the two gates that take milliseconds unless a test
# asks for more: the gates' own tests, and tests/test_proving_loop.py, which runs the example as a user does and
# checks every figure of every iteration. Set before any fixture starts a worker, so every process inherits it.
os.environ.setdefault("BATON_PROVING_GATES", "coverage,duplicate")


@pytest.fixture(autouse=True)
def start_up_settings() -> Iterator[None]:
    """Each test begins with baton's start-up settings as this process started (proving/startup.py): a CLI
    invocation in a test fixes them anew from the environment it was given (BATON_EVAL_SANDBOX=none, say),
    which must not carry into the tests after it."""
    from proving import startup

    before = startup.fixed()
    yield
    startup.fix(before.environ)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, lay the tests out as one pile per worker, end to end: worksteal hands each worker
    one contiguous share of equal count, and idle workers later steal from the ends of the others' shares.

    Each pile begins with its heavy units, largest first, so they start early rather than keep the others
    waiting at the end: slow tests (whole runs of tens of seconds) and groups, the tests of one
    ``xdist_group`` kept together so that what they share (a module fixture that starts servers, a
    library that takes seconds to import) is paid on one worker instead of on each. Quick tests fill
    the piles to their counts, dealt like cards. Every worker computes the same order, as xdist needs."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers < 2:
        return  # a plain run keeps the files' order
    piles = deal(items, share_sizes(len(items), workers))
    items[:] = [item for pile in piles for item in pile]


SLOW_WEIGHT, QUICK_WEIGHT, GROUP_WEIGHT = 10, 1, 10  # rough costs: what a group shares is its own weight


def share_sizes(count: int, workers: int) -> list[int]:
    """The counts worksteal's first schedule sends: the pending tests split evenly, the remainder last."""
    sizes = []
    for remaining in range(workers, 0, -1):
        sizes.append((count - sum(sizes)) // remaining)
    return sizes


def deal(items: list[pytest.Item], sizes: list[int]) -> list[list[pytest.Item]]:
    groups: dict[str, list[pytest.Item]] = {}
    heavy: list[list[pytest.Item]] = []
    quick: list[pytest.Item] = []
    for item in items:
        group = item.get_closest_marker("xdist_group")
        if group is not None:
            name = group.kwargs.get("name", group.args[0] if group.args else "")
            if name not in groups:
                groups[name] = []
                heavy.append(groups[name])
            groups[name].append(item)
        elif item.get_closest_marker("slow") is not None:
            heavy.append([item])
        else:
            quick.append(item)

    def weight(unit: list[pytest.Item]) -> int:
        own = sum(SLOW_WEIGHT if i.get_closest_marker("slow") else QUICK_WEIGHT for i in unit)
        return own + (GROUP_WEIGHT if unit[0].get_closest_marker("xdist_group") else 0)

    piles: list[list[pytest.Item]] = [[] for _ in sizes]
    loads = [0] * len(sizes)
    for unit in sorted(heavy, key=weight, reverse=True):  # longest first, each to the least-loaded pile
        room = [p for p in range(len(piles)) if len(piles[p]) + len(unit) <= sizes[p]] or range(len(piles))
        target = min(room, key=lambda p: loads[p])
        piles[target] += unit
        loads[target] += weight(unit)
    pile = 0
    for item in quick:  # like cards, to the piles with room left
        while len(piles[pile]) >= sizes[pile] and any(len(piles[p]) < sizes[p] for p in range(len(piles))):
            pile = (pile + 1) % len(piles)
        piles[pile].append(item)
        pile = (pile + 1) % len(piles)
    return piles


@pytest.fixture
def redis_server(tmp_path) -> Iterator[RedisServer]:
    # Imported here, not at the top: Celery and baton's workers load only in the processes that use them.
    from tests.workers_harness import RedisServer

    try:
        server = RedisServer(tmp_path / "redis")
    except FileNotFoundError:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI provides it)")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """``baton run refund_desk --auto-approve --profile demo`` on a copy of the example: iteration 1 at 80%,
    iteration 2 passing. Shared read-only: take a copy (``copy_to``) to work on."""
    from tests.export_support import run_example  # here: the CLI loads only on workers that run the example

    run = shared_run(tmp_path_factory, "finished", lambda folder: run_example(folder, "--auto-approve"))
    assert run.exit_code == 0, run.output
    return run


@pytest.fixture(scope="session")
def awaiting_run(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """``baton run refund_desk --profile demo`` without --auto-approve: stopped at the approval gate (exit 3)."""
    from tests.export_support import run_example

    run = shared_run(tmp_path_factory, "awaiting", run_example)
    assert run.exit_code == 3, run.output
    return run


@pytest.fixture(scope="session")
def example(finished_run: SharedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This worker's copy of the finished run (tests here may add to it, as ``baton try`` does)."""
    return finished_run.copy_to(tmp_path_factory.mktemp("example"))


@pytest.fixture(scope="session")
def exported(example: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Its export (``baton export refund_desk --to inspect``)."""
    from agents.scenario_facts import scenario_facts
    from proving.export.build import export_inspect

    out = tmp_path_factory.mktemp("export") / "refund_desk"
    export_inspect(example, out, scenario_facts(example))
    return out

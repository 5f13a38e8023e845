"""Fixtures shared by test files: a private redis-server on a free port (never the machine's own), and
the example run to its end and exported (the export tests). Under pytest-xdist (the README's ``-n 4
--dist worksteal``) each worker starts on its share of the slow tests (the order below)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.export_support import finished_example
from tests.workers_harness import RedisServer

if sys.dont_write_bytecode and not sys.pycache_prefix:
    # Under PYTHONDONTWRITEBYTECODE pytest rewrites every test module's asserts afresh in every process: about
    # 8 s of CPU per xdist worker on every run. Keep the rewritten modules outside the checkout instead, so the
    # tree stays as clean as the setting asks (this process only: the processes tests start are unchanged).
    sys.pycache_prefix = str(Path(tempfile.gettempdir()) / f"baton-test-pycache-{os.getuid()}")
    sys.dont_write_bytecode = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, deal the tests out like cards, slow ones first, into one pile per worker, and lay
    the piles end to end: worksteal hands each worker one contiguous share, so each begins with its slow
    tests (whole runs of tens of seconds that would otherwise start last and keep the others waiting) and
    ends on quick ones that idle workers can steal. Every worker computes the same order, as xdist needs."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers < 2:
        return  # a plain run keeps the files' order
    ordered = sorted(items, key=lambda item: item.get_closest_marker("slow") is None)  # stable: slow first
    items[:] = [item for pile in range(workers) for item in ordered[pile::workers]]


@pytest.fixture
def redis_server(tmp_path) -> Iterator[RedisServer]:
    try:
        server = RedisServer(tmp_path / "redis")
    except FileNotFoundError:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI provides it)")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example run to its end offline: iteration 1 at 80%, iteration 2 passing."""
    return finished_example(tmp_path_factory.mktemp("example"))


@pytest.fixture(scope="session")
def exported(example: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Its export (``baton export refund_desk --to inspect``)."""
    from agents.export.build import export_inspect

    out = tmp_path_factory.mktemp("export") / "refund_desk"
    export_inspect(example, out)
    return out

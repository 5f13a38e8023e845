"""Fixtures shared by test files: a private redis-server on a free port (never the machine's own), and
the example run to its end and exported (the export tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.export_support import finished_example
from tests.workers_harness import RedisServer


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

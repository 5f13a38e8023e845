"""Fixtures shared by test files: a private redis-server on a free port (never the machine's own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.workers_harness import RedisServer


@pytest.fixture
def redis_server(tmp_path) -> Iterator[RedisServer]:
    try:
        server = RedisServer(tmp_path / "redis")
    except FileNotFoundError:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI provides it)")
    yield server
    server.stop()

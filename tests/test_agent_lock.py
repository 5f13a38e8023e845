"""The per-agent lock: renewed while a step runs, freed soon after its holder dies."""

from __future__ import annotations

import time

import fakeredis
import pytest

from workers import tasks
from workers.lock_ttl import LOCK_TTL_ENV, lock_ttl_s


@pytest.fixture
def server(monkeypatch):
    client = fakeredis.FakeRedis()
    monkeypatch.setattr(tasks, "redis_client", lambda: client)
    monkeypatch.setenv(LOCK_TTL_ENV, "1")  # renewed every third of a second
    return client


@pytest.mark.slow  # waits past a real lock TTL
def test_a_step_longer_than_the_ttl_keeps_its_lock(server):
    with tasks.agent_lock("s", "execute"):
        time.sleep(2.5)  # > 2x the TTL: only renewal keeps the key alive
        assert server.exists("baton:lock:s:execute")
        with pytest.raises(tasks.LockBusy), tasks.agent_lock("s", "execute"):
            pass
    assert not server.exists("baton:lock:s:execute")


def test_a_dead_holders_lock_expires(server):
    lock = server.lock("baton:lock:s:init", timeout=lock_ttl_s())
    assert lock.acquire()  # taken, then never released: the holder was killed
    deadline = time.monotonic() + 10
    while server.exists("baton:lock:s:init") and time.monotonic() < deadline:
        time.sleep(0.1)
    with tasks.agent_lock("s", "init"):
        pass

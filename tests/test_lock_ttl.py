"""The agent lock's TTL (workers/lock_ttl.py): 15 s unless BATON_LOCK_TTL_S says otherwise, and the
reaper's stall bound must outlast whatever it is."""

from __future__ import annotations

import fakeredis
import pytest

from scenarios.store import StoreError
from tests.workers_harness import refused_worker
from workers import tasks
from workers.lock_ttl import DEFAULT_LOCK_TTL_S, LOCK_TTL_ENV, lock_ttl_s
from workers.reaper import ReaperSettings


def test_the_default_is_fifteen_seconds_and_a_number_sets_another() -> None:
    assert lock_ttl_s({}) == DEFAULT_LOCK_TTL_S == 15
    assert lock_ttl_s({LOCK_TTL_ENV: " "}) == 15
    assert lock_ttl_s({LOCK_TTL_ENV: "4.5"}) == 4.5


@pytest.mark.parametrize("value", ["soon", "0", "0.5", "-3", "nan", "inf"])
def test_a_bad_value_is_named_with_what_it_takes(value: str) -> None:
    with pytest.raises(ValueError, match=f"{LOCK_TTL_ENV}='{value}' must be a number of seconds of at least 1"):
        lock_ttl_s({LOCK_TTL_ENV: value})


def test_a_step_takes_its_lock_for_the_configured_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    client = fakeredis.FakeRedis()
    monkeypatch.setattr(tasks, "redis_client", lambda: client)
    for ttl, expected_ms in (("7", 7000), (None, 15000)):
        if ttl is None:
            monkeypatch.delenv(LOCK_TTL_ENV, raising=False)
        else:
            monkeypatch.setenv(LOCK_TTL_ENV, ttl)
        with tasks.agent_lock("s", "init"):
            left = client.pttl("baton:lock:s:init")
        assert expected_ms - 1000 < left <= expected_ms, (ttl, left)


def test_the_stall_bound_must_outlast_the_configured_ttl() -> None:
    assert ReaperSettings.from_env({LOCK_TTL_ENV: "5", "BATON_STALL_AFTER_S": "7"}).stall_after_s == 7
    with pytest.raises(StoreError, match="above the agent lock's TTL \\(30 s, BATON_LOCK_TTL_S\\)") as caught:
        ReaperSettings.from_env({LOCK_TTL_ENV: "30"})  # the default stall bound, 20 s, no longer outlasts it
    assert "BATON_STALL_AFTER_S to seconds above the lock's 30 s" in str(caught.value)
    with pytest.raises(StoreError, match=f"{LOCK_TTL_ENV}='x'"):
        ReaperSettings.from_env({LOCK_TTL_ENV: "x"})


def test_a_worker_with_a_bad_ttl_does_not_start() -> None:
    said = refused_worker("init", LOCK_TTL_ENV, "soon")
    assert f"{LOCK_TTL_ENV}='soon' must be a number of seconds" in said, said
    said = refused_worker("init", LOCK_TTL_ENV, "30")  # above the default stall bound
    assert "BATON_STALL_AFTER_S to seconds above the lock's 30 s" in said, said

"""The distributed run through the double: three Celery workers on a private ``redis-server``, each talking
to ``baton fake-api`` through the real SDK, take refund_desk to done (tests/workers_harness.py)."""

from __future__ import annotations

import pytest

from tests.fake_api_support import KEY, stats, thinking_figures
from tests.workers_harness import Cluster
from workers.fake_api.server import FakeApi, start

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # three real workers through the double


def test_three_workers_reach_done_through_the_double(request, redis_server, tmp_path, monkeypatch):
    double = start(FakeApi())
    request.addfinalizer(double.stop)
    cluster = Cluster(redis_server.url, tmp_path)
    request.addfinalizer(cluster.stop_all)  # before the double and the broker stop
    endpoint = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": double.url}
    cluster.env.update(endpoint)
    for name, value in endpoint.items():  # this process starts the run, and may pin its models
        monkeypatch.setenv(name, value)

    cluster.workers()
    cluster.start_run()
    record = cluster.wait_done()

    assert record["iteration"] == 2 and record["last_error"] is None
    assert {role: pin["id"] for role, pin in record["models"].items()} == {
        "init": "claude-opus-5-5", "execute": "claude-sonnet-5-5"}
    seen = stats(double.url)
    assert seen["requests"]["POST /v1/messages"] > 20 and seen["errors"] == {}
    assert set(seen["models"]) == {"claude-opus-5-5", "claude-sonnet-5-5"}
    print("thinking through the double, three workers:", thinking_figures(seen, cluster.root))
    assert KEY not in "".join(proc.tail(10**7) for proc in cluster.procs)

"""The example's trace in a real Arize Phoenix (``phoenix serve``, OTLP over HTTP), read back with Phoenix's
own client: `baton run` embedded, and the three Celery workers.

Phoenix is not in baton's extras: it installs about 850 MB in some 90 s (a database, a web app, pandas,
gRPC), too much for every CI install. The test runs when a ``phoenix`` command is on PATH or named by
``BATON_TEST_PHOENIX`` (e.g. a separate virtualenv's ``bin/phoenix``: ``python -m venv /opt/phx &&
/opt/phx/bin/pip install arize-phoenix``); the client runs in Phoenix's own interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.suite_gates import suite_gates
from tests.trace_checks import Recorded, check_run_tree, content_keys
from tests.workers_harness import Cluster, free_port, spawn, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
PROJECT = "baton-test"
READ_SPANS = textwrap.dedent("""
    import json, sys
    from phoenix.client import Client
    spans = Client(base_url=sys.argv[1]).spans.get_spans(project_identifier=sys.argv[2], limit=100_000)
    print(json.dumps(spans, default=str))
""")


def _phoenix() -> Path | None:
    named = os.environ.get("BATON_TEST_PHOENIX") or shutil.which("phoenix")
    return Path(named) if named and Path(named).is_file() else None


@pytest.fixture
def phoenix(tmp_path):
    executable = _phoenix()
    if executable is None:
        pytest.skip("Arize Phoenix is not installed (too heavy for the test extra): put `phoenix` on PATH or set "
                    "BATON_TEST_PHOENIX to its executable")
    port, grpc = free_port(), free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(grpc), "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
           "PHOENIX_HOST": "127.0.0.1"}
    (tmp_path / "logs").mkdir()
    proc = spawn("phoenix", [str(executable), "serve"], env, tmp_path / "logs")
    url = f"http://127.0.0.1:{port}"

    def healthy():
        if not proc.running():
            raise AssertionError(f"phoenix serve exited: {proc.tail()}")
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, "phoenix serve to answer", timeout=180, interval=0.5, diagnose=proc.tail)
        yield url, executable.parent / "python"
    finally:
        proc.stop()


def _spans(url: str, python: Path) -> list[Recorded]:
    done = subprocess.run([str(python), "-c", READ_SPANS, url, PROJECT], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return []  # the project exists once the first span arrived
    return [Recorded(name=s["name"], trace_id=s["context"]["trace_id"], span_id=s["context"]["span_id"],
                     parent_id=s.get("parent_id"), attributes=s.get("attributes") or {},
                     error=s.get("status_code") == "ERROR") for s in json.loads(done.stdout)]


def _read_back(url: str, python: Path, root: Path) -> list[Recorded]:
    """Phoenix's spans of the run, once the tree is whole (it ingests in the background)."""
    def whole():
        spans = _spans(url, python)
        try:
            check_run_tree(spans, root)
        except (AssertionError, KeyError):
            return None
        return spans

    spans = wait_for(whole, "Phoenix to hold every span of the run", timeout=60, interval=1.0)
    return spans


def _otel_env(url: str) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}"}


def test_embedded_run_in_phoenix(phoenix, tmp_path):
    url, python = phoenix
    scenarios = tmp_path / "scenarios"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_", "BATON_", "CELERY_"))}
    env |= suite_gates()
    baton = str(Path(sys.executable).parent / "baton")
    done = subprocess.run([baton, "--scenarios-dir", str(scenarios), "run", "refund_desk", "--auto-approve",
                           "--profile", "demo", "--embedded"], env=env | _otel_env(url), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    spans = _read_back(url, python, scenarios / "refund_desk")
    kinds = check_run_tree(spans, scenarios / "refund_desk")
    assert kinds["compactions"] and not content_keys(spans)
    chat = kinds["chats"][0]
    assert chat.attributes["gen_ai.provider.name"] == "anthropic"


def test_three_workers_run_in_phoenix(phoenix, redis_server, request, tmp_path):
    url, python = phoenix
    cluster = Cluster(redis_server.url, tmp_path / "cluster")
    request.addfinalizer(cluster.stop_all)
    cluster.env |= _otel_env(url) | {"OTEL_BSP_SCHEDULE_DELAY": "200"}
    cluster.workers()
    cluster.start_run()
    cluster.wait_done()
    spans = _read_back(url, python, cluster.root)
    assert check_run_tree(spans, cluster.root)["compactions"]

"""A broker URL baton cannot use is refused before anything is written (issue 38, item 5).

baton's queues, results and agent locks all live on one Redis (workers/app.py, workers/tasks.py), so only a
redis:// or rediss:// URL can work. Anything else (a typo, ``amqp://`` from another project's Celery, a
socket path) used to be found out only while dispatching: ``unexpected ModuleNotFoundError`` or
``ImproperlyConfigured``, after run.json had been written "running" with a ``state/`` that live workers then
picked up. docs/deployment.md promises broker errors exit 2 before anything is written.

Real ``baton`` processes: in this process the Celery app was made when workers.app was first imported, with
whatever URL was set then, so a command that got as far as dispatching would send to that broker, not the one
under test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.suite_gates import suite_gates

BATON = Path(sys.executable).parent / "baton"
SECRET = "s3cretBrokerPw42"


def baton(folder: Path, variable: str, url: str, *args: str) -> tuple[int, str]:
    if not BATON.exists():
        pytest.skip("the baton entry point is not installed (pip install -e .)")
    env = {"PATH": str(BATON.parent), "HOME": str(folder), "COLUMNS": "200", variable: url, **suite_gates()}
    done = subprocess.run([str(BATON), "--scenarios-dir", str(folder), *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    return done.returncode, " ".join((done.stdout + done.stderr).split())  # rich wraps long lines


@pytest.mark.parametrize(("variable", "url"), [
    ("BATON_BROKER_URL", "notaurl"),
    ("BATON_BROKER_URL", f"amqp://guest:{SECRET}@127.0.0.1:5672//"),  # another transport, its library or not
    ("CELERY_BROKER_URL", "unix:///run/redis/redis.sock"),  # redis-py reads it, Celery's result backend cannot
    ("BATON_BROKER_URL", f"redis://:{SECRET}@127.0.0.1:notaport/0"),
], ids=["not-a-url", "amqp", "unix-socket", "bad-port"])
def test_run_refuses_a_broker_url_it_cannot_use_before_writing_anything(tmp_path: Path, variable: str,
                                                                        url: str) -> None:
    code, text = baton(tmp_path, variable, url, "run", "refund_desk", "--auto-approve")
    assert code == 2, text
    assert "unexpected" not in text and "Traceback" not in text, text
    assert "redis://" in text and variable in text, text  # what the URL must look like, and where to set it
    assert SECRET not in text, text
    # Not even the example's copy: the folder is as it was (no run.json, no state/ for workers to pick up).
    assert list(tmp_path.iterdir()) == [], text


def test_a_worker_refuses_it_too(tmp_path: Path) -> None:
    code, text = baton(tmp_path, "BATON_BROKER_URL", f"amqp://guest:{SECRET}@127.0.0.1:5672//", "worker", "execute")
    assert code == 2 and "redis://" in text and "unexpected" not in text, text
    assert SECRET not in text

"""The broker's password is never printed, and a wrong one is reported as such.

A private ``redis-server`` asks for a password (given through standard input, so not on its
command line), on a free loopback port; ``baton`` runs as a real process against it with
the right password, a wrong one, none, and against a closed port.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.agent_run import copy_example
from tests.suite_gates import suite_gates
from tests.workers_harness import Proc, free_port, load_scaled, wait_for
from workers.app import mask_secrets, mask_url

BATON = Path(sys.executable).parent / "baton"
PASSWORD = "s3cretBrokerPw42"
WRONG = "n0tTheRightOne77"

pytestmark = pytest.mark.timeout(180)


def test_mask_url_hides_every_password_form():
    assert mask_url(f"redis://:{PASSWORD}@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert mask_url(f"rediss://ops:{PASSWORD}@host/1") == "rediss://ops:***@host/1"
    assert mask_url(f"redis://host/0?password={PASSWORD}&db=1") == "redis://host/0?password=***&db=1"
    assert mask_url(f"unix:///run/redis.sock?password={PASSWORD}") == "unix:///run/redis.sock?password=***"
    assert mask_url(f"redis://:{PASSWORD}@a:1/0;redis://:{WRONG}@b:2/0") == "redis://:***@a:1/0;redis://:***@b:2/0"
    assert mask_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_mask_secrets_also_hides_the_configured_password_quoted_alone():
    env = {"BATON_BROKER_URL": f"redis://:{PASSWORD}@127.0.0.1:6379/0"}
    text = mask_secrets(f"AUTH {PASSWORD} failed for redis://:{PASSWORD}@127.0.0.1:6379/0", env)
    assert PASSWORD not in text and text == "AUTH *** failed for redis://:***@127.0.0.1:6379/0"


@pytest.fixture(scope="module")
def redis_with_password(tmp_path_factory):
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    workdir = tmp_path_factory.mktemp("redis-auth")
    port = free_port()
    logfile = workdir / "redis.log"
    config = f"requirepass {PASSWORD}\nport {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\ndir {workdir}\n"
    with logfile.open("ab") as log:
        popen = subprocess.Popen([binary, "-"], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                 cwd=workdir, start_new_session=True)
    assert popen.stdin is not None
    popen.stdin.write(config.encode())
    popen.stdin.close()
    proc = Proc("redis-server", popen, logfile)
    try:
        client = redis.Redis(host="127.0.0.1", port=port, password=PASSWORD, socket_connect_timeout=1)

        def answers() -> bool:
            if not proc.running():
                pytest.fail(f"redis-server exited: {proc.tail()}")
            try:
                return bool(client.ping())
            except redis.exceptions.ConnectionError:
                return False

        wait_for(answers, "redis-server to answer PING", timeout=20, interval=0.1, diagnose=proc.tail)
        assert PASSWORD not in Path(f"/proc/{popen.pid}/cmdline").read_bytes().decode(errors="replace")
        yield port
    finally:
        proc.stop(grace=5)


def baton(scenarios: Path, broker: str, *args: str) -> subprocess.CompletedProcess[str]:
    if not BATON.exists():
        pytest.skip("the baton entry point is not installed (pip install -e .)")
    env = {"PATH": str(BATON.parent), "HOME": str(scenarios), "COLUMNS": "200", "BATON_BROKER_URL": broker,
           **suite_gates()}
    return subprocess.run([str(BATON), "--scenarios-dir", str(scenarios), *args], env=env, capture_output=True,
                          text=True, timeout=load_scaled(120), check=False)


def output_of(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join((done.stdout + done.stderr).split())  # rich wraps long lines


@pytest.mark.slow  # real baton processes against a real redis-server
def test_dispatch_messages_mask_the_password(redis_with_password, tmp_path):
    copy_example(tmp_path)
    broker = f"redis://:{PASSWORD}@127.0.0.1:{redis_with_password}/0"
    for command in (["run", "refund_desk", "--no-follow"], ["resume", "refund_desk", "--no-follow"]):
        done = baton(tmp_path, broker, *command)
        text = output_of(done)
        assert done.returncode == 0, text
        assert f"to redis://:***@127.0.0.1:{redis_with_password}/0" in text, text
        assert PASSWORD not in text


@pytest.mark.parametrize("password", [WRONG, None], ids=["wrong-password", "no-password"])
@pytest.mark.parametrize("command", [["run", "refund_desk"], ["worker", "init"]], ids=["run", "worker"])
@pytest.mark.slow  # real baton processes against a real redis-server
def test_a_refused_password_is_reported_as_an_authentication_failure(redis_with_password, tmp_path, password,
                                                                     command):
    root = copy_example(tmp_path)
    auth = f":{password}@" if password else ""
    done = baton(tmp_path, f"redis://{auth}127.0.0.1:{redis_with_password}/0", *command)
    text = output_of(done)
    assert done.returncode == 2, text
    assert "authentication failed" in text and "requirepass" in text, text
    assert "unreachable" not in text and "start Redis" not in text, text
    assert WRONG not in text and PASSWORD not in text
    assert not (root / "run.json").exists()  # refused before anything was written


@pytest.mark.slow  # real baton processes against a real redis-server
def test_an_unreachable_broker_is_reported_without_its_password(tmp_path):
    copy_example(tmp_path)
    done = baton(tmp_path, f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0", "run", "refund_desk")
    text = output_of(done)
    assert done.returncode == 2, text
    assert "unreachable" in text and "redis://:***@127.0.0.1:" in text, text
    assert PASSWORD not in text


@pytest.mark.slow  # real baton processes against a real redis-server
def test_status_json_never_carries_the_password(redis_with_password, tmp_path):
    copy_example(tmp_path)
    broker = f"redis://:{PASSWORD}@127.0.0.1:{redis_with_password}/0"
    baton(tmp_path, broker, "run", "refund_desk", "--no-follow")
    done = baton(tmp_path, broker, "status", "refund_desk", "--json")
    assert done.returncode == 0, output_of(done)
    json.loads(done.stdout)
    assert PASSWORD not in done.stdout + done.stderr

"""Flower, seen in a real browser: screenshots of its task list while a step runs and after the run.

Starts a private redis-server, ``baton fake-api`` (the real SDK path, offline), the three workers and
Flower, all on free ports of 127.0.0.1 and all stopped at the end (only the processes started here).
It runs refund_desk with the demo profile to its design, queues a ``hang`` fault, rejects the design so
Init's next step hangs on its model call, and takes a headless Chromium screenshot of Flower's task list
while that step runs (its progress line in the result column), then another when Init has handed off again.

    .venv/bin/python bench/flower_screenshot.py OUT_DIR      # needs redis-server and chromium on PATH

Writes OUT_DIR/flower_running.png, OUT_DIR/flower_done.png and OUT_DIR/logs/.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scenarios.run import copy_scenario  # noqa: E402

COLUMNS = "name,uuid,state,args,kwargs,result,received,started,runtime,worker"  # as in docker-compose.yml
HANG_S = 25


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check: Callable[[], object], what: str, timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.3)
    raise SystemExit(f"timed out waiting for {what}")


def get(url: str, data: bytes | None = None) -> bytes:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=5) as response:
            return response.read()
    except OSError:
        return b""


def screenshot(chromium: str, url: str, path: Path) -> None:
    profile = tempfile.mkdtemp(prefix="chromium-")
    try:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                        "--hide-scrollbars", "--virtual-time-budget=5000", "--window-size=2200,1000",
                        f"--screenshot={path}", url], check=True, capture_output=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    print(f"screenshot: {path}")


def main(out: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None or shutil.which("redis-server") is None:
        raise SystemExit("needs redis-server and chromium (apt-get install -y redis-server chromium)")
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="baton-flower-"))
    scenarios = work / "scenarios"
    copy_scenario(REPO / "scenarios" / "refund_desk", scenarios / "refund_desk")
    redis_port, api_port, flower_port = free_port(), free_port(), free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BATON_", "CELERY_", "FLOWER_"))}
    env |= {"BATON_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0", "BATON_SCENARIOS_DIR": str(scenarios),
            "ANTHROPIC_API_KEY": "sk-ant-fake-double", "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{api_port}",
            "FLOWER_TASKS_COLUMNS": COLUMNS, "PYTHONUNBUFFERED": "1",
            # a private Flower on 127.0.0.1 for the length of this script: its API is read without a password
            "FLOWER_UNAUTHENTICATED_API": "true",
            # this checkout's code, whatever the installed copy holds (python -m baton needs baton/)
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    baton = [sys.executable, "-m", "baton"]
    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str]) -> None:
        log = open(logs / f"{name}.log", "w")
        procs.append(subprocess.Popen(argv, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))

    def baton_cli(*args: str) -> None:
        done = subprocess.run([*baton, *args], env=env, cwd=work, capture_output=True, text=True, timeout=300)
        (logs / "cli.log").open("a").write(f"$ baton {' '.join(args)}  -> exit {done.returncode}\n{done.stdout}"
                                           f"{done.stderr}\n")

    try:
        start("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no"])
        start("fake-api", [*baton, "fake-api", "--port", str(api_port)])
        wait_for(lambda: get(f"http://127.0.0.1:{api_port}/faults"), "the API double")
        for queue in ("init", "execute", "compaction"):
            # prefork, as in docker-compose.yml: a solo worker runs its task inside its event loop, so its
            # task-received and task-started events reach Flower only after the task
            start(f"worker-{queue}", [*baton, "worker", queue])
        start("flower", [sys.executable, "-m", "celery", "-A", "workers.app", "flower", f"--port={flower_port}",
                         "--address=127.0.0.1"])
        flower = f"http://127.0.0.1:{flower_port}"
        wait_for(lambda: get(f"{flower}/healthcheck") == b"OK", "Flower")
        wait_for(lambda: get(f"{flower}/api/workers?refresh=1").count(b"@") >= 3, "three workers in Flower")

        baton_cli("run", "refund_desk", "--profile", "demo")  # Init designs; the run waits for approval
        fault = {"fault": "hang", "count": 1, "hang_s": HANG_S}
        get(f"http://127.0.0.1:{api_port}/faults", json.dumps(fault).encode())
        baton_cli("reject", "refund_desk", "--feedback", "add a rule about gift cards", "--no-follow")

        def running() -> bool:
            tasks = json.loads(get(f"{flower}/api/tasks") or b"{}")
            return any(t.get("state") == "PROGRESS" for t in tasks.values())

        wait_for(running, "a step in PROGRESS")
        time.sleep(1)
        (out / "tasks_running.json").write_bytes(get(f"{flower}/api/tasks"))
        screenshot(chromium, f"{flower}/tasks", out / "flower_running.png")
        baton_cli("status", "refund_desk")
        wait_for(lambda: '"awaiting_approval"' in (scenarios / "refund_desk" / "run.json").read_text(),
                 "Init to hand off again", timeout=HANG_S + 120)
        time.sleep(2)
        screenshot(chromium, f"{flower}/tasks", out / "flower_done.png")
        (out / "tasks.json").write_bytes(get(f"{flower}/api/tasks"))
        # docs/deployment.md's example: the readable names are searchable
        (out / "search.json").write_bytes(get(f"{flower}/api/tasks?search=refund_desk/init&limit=5"))
    finally:
        for proc in reversed(procs):  # only what this script started, each by its own process group
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "flower_screenshots"))

"""The example's trace in Arize Phoenix, seen in a real browser (docs/deployment.md, "Tracing").

Starts ``phoenix serve`` on free ports of 127.0.0.1 (its data in a temporary folder), runs refund_desk
embedded with the demo profile and ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointed at it, finds the run's trace
and one model call with Phoenix's client (in Phoenix's own interpreter), and takes a headless Chromium
screenshot of the trace with that call selected. Stops only the Phoenix it started.

    .venv/bin/python bench/phoenix_screenshot.py PHOENIX_EXECUTABLE OUT.png   # needs chromium on PATH
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.flower_screenshot import free_port, screenshot  # noqa: E402

PROJECT = "baton-example"
FIND = """
import json, sys
from phoenix.client import Client
client = Client(base_url=sys.argv[1])
spans = client.spans.get_spans(project_identifier=sys.argv[2], limit=100_000)
project = next(p for p in client.projects.list() if p["name"] == sys.argv[2])
steps = {s["context"]["span_id"] for s in spans if s["name"] == "step init 1"}
chat = next(s for s in spans if s["name"].startswith("chat ") and s["parent_id"] in steps)
print(json.dumps({"project": project["id"], "trace": chat["context"]["trace_id"], "span": chat["id"]}))
"""


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def main(phoenix: Path, out: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs chromium (apt-get install -y chromium)")
    work = Path(tempfile.mkdtemp(prefix="baton-phoenix-"))
    port = free_port()
    env = {"PATH": os.environ["PATH"], "HOME": str(work), "PHOENIX_PORT": str(port), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_WORKING_DIR": str(work / "phoenix")}
    with (work / "phoenix.log").open("wb") as log:
        server = subprocess.Popen([str(phoenix), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while not healthy(url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"phoenix serve did not start; see {work / 'phoenix.log'}")
            time.sleep(0.5)
        run = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_", "BATON_"))}
        run |= {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}"}
        subprocess.run([str(Path(sys.executable).parent / "baton"), "--scenarios-dir", str(work / "scenarios"), "run",
                        "refund_desk", "--auto-approve", "--profile", "demo", "--embedded"], env=run, check=True,
                       stdout=subprocess.DEVNULL)
        time.sleep(3)  # Phoenix ingests in the background
        found = json.loads(subprocess.run([str(phoenix.parent / "python"), "-c", FIND, url, PROJECT], check=True,
                                          capture_output=True, text=True).stdout)
        page = f"{url}/projects/{found['project']}/traces/{found['trace']}?selectedSpanNodeId={found['span']}"
        screenshot(chromium, page, out)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))

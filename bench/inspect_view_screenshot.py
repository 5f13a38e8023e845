"""A conversational sample in ``inspect view``, seen in a real browser (docs/export.md, "Conversational samples").

Runs the example offline in a temporary folder (``baton new refund_desk --from refund_desk``, then ``baton run
refund_desk --auto-approve --profile demo`` with the fast gates), exports it, runs the export with
``inspect eval task.py --model baton/simulated`` (baton's simulated blind solver; the user is the scripted one),
starts ``inspect view`` on a free port of 127.0.0.1 and takes a headless Chromium screenshot of the messages of
the conversational sample s04_over_500_escalated: the user's opening, the agent asking for the order, the user's
answer, the tool calls and the user's closing. Stops only the processes it started; removes its temporary
folder unless --keep.

The viewer reads the sample in a web worker, which Chromium's ``--virtual-time-budget`` does not wait for, so
bench/flower_screenshot.py's one-shot ``--screenshot`` catches "Loading sample data...". This script drives the
same headless Chromium over the DevTools protocol instead: it waits until the user's closing message is on the
page, then captures it.

    .venv/bin/python bench/inspect_view_screenshot.py OUT.png [--keep]   # needs chromium on PATH
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import importlib.metadata
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

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.flower_screenshot import free_port, wait_for  # noqa: E402

SAMPLE, EPOCH, TAB = "s04_over_500_escalated", 1, "messages"
DONE = "that is all"  # the scripted user's closing: the whole conversation is on the page
WIDTH, HEIGHT = 1100, 4000  # CSS pixels: a window tall enough for the whole conversation, cut below its end


def get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read()
    except OSError:
        return b""


async def capture(devtools: str, url: str, out: Path, timeout: float = 60) -> None:
    """Open ``url`` in the headless Chromium whose DevTools listen at ``devtools``, wait for the conversation,
    and write a PNG of the page from its top to the end of the conversation."""
    target = json.loads(get(f"{devtools}/json/list"))
    page = next(t for t in target if t["type"] == "page")
    async with aiohttp.ClientSession() as session, session.ws_connect(page["webSocketDebuggerUrl"],
                                                                      max_msg_size=0) as ws:
        ids = iter(range(1, 1_000_000))

        async def call(method: str, **params: object) -> dict:
            sent = next(ids)
            await ws.send_json({"id": sent, "method": method, "params": params})
            async for message in ws:
                reply = json.loads(message.data)
                if reply.get("id") == sent:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            raise RuntimeError("the DevTools connection closed")

        async def evaluate(expression: str) -> object:
            return (await call("Runtime.evaluate", expression=expression, returnByValue=True))["result"].get("value")

        await call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False)
        await call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not await evaluate(f"document.body !== null && document.body.innerText.includes({DONE!r})"):
            if time.monotonic() > deadline:
                raise SystemExit(f"the sample's conversation did not show in {timeout:.0f} s: {url}")
            await asyncio.sleep(0.3)
        await asyncio.sleep(1.5)  # fonts and the last layout pass
        # the bottom of the last message, so the picture ends where the conversation does
        bottom = await evaluate(f"""(() => {{
            const all = [...document.querySelectorAll('body *')].filter(e => e.children.length === 0
                && e.textContent.includes({DONE!r}));
            const rect = all.length ? all[all.length - 1].getBoundingClientRect() : null;
            return rect ? Math.ceil(rect.bottom + window.scrollY) : null; }})()""")
        height = min(HEIGHT, int(bottom) + 40) if bottom else HEIGHT
        shot = await call("Page.captureScreenshot", format="png",
                          clip={"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(base64.b64decode(shot["data"]))
    print(f"screenshot: {out} ({WIDTH}x{height})")


def stop(proc: subprocess.Popen) -> None:
    """Stop a process this script started, by its own process group."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main(out: Path, keep: bool) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs chromium (apt-get install -y chromium)")
    if not any(e.name == "baton" for e in importlib.metadata.entry_points(group="inspect_ai")):
        raise SystemExit("the baton/simulated Inspect provider is not registered: .venv/bin/pip install --no-deps -e .")
    started = time.monotonic()
    bin_dir = Path(sys.executable).parent
    baton, inspect = str(bin_dir / "baton"), str(bin_dir / "inspect")
    work = Path(tempfile.mkdtemp(prefix="baton-inspect-view-"))
    scenarios, export, logs = work / "scenarios", work / "export", work / "logs"
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "BATON_BROKER_URL",
                                                             "CELERY_BROKER_URL")}
    env["BATON_PROVING_GATES"] = "coverage,duplicate"  # the fast gates: the picture needs the export, not the proof

    def run(*argv: str, cwd: Path = work) -> None:
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
        (work / "commands.log").open("a").write(f"$ {' '.join(argv)}  -> exit {done.returncode}\n"
                                                f"{done.stdout}{done.stderr}\n")
        if done.returncode:
            raise SystemExit(f"failed: {' '.join(argv)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")

    procs: list[subprocess.Popen] = []
    try:
        run(baton, "--scenarios-dir", str(scenarios), "new", "refund_desk", "--from", "refund_desk")
        run(baton, "--scenarios-dir", str(scenarios), "run", "refund_desk", "--auto-approve", "--profile", "demo")
        run(baton, "--scenarios-dir", str(scenarios), "export", "refund_desk", "--out", str(export))
        run(inspect, "eval", "task.py", "--model", "baton/simulated", "--log-dir", str(logs), "--display", "none",
            cwd=export)
        log = next(logs.glob("*.eval")).name
        print(f"eval log: {log} ({time.monotonic() - started:.1f} s)")

        port = free_port()
        with (work / "view.log").open("wb") as view_log:
            procs.append(subprocess.Popen([inspect, "view", "--log-dir", str(logs), "--host", "127.0.0.1", "--port",
                                           str(port)], env=env, cwd=work, stdout=view_log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        viewer = f"http://127.0.0.1:{port}"

        def viewer_up() -> bytes:
            if procs[0].poll() is not None:
                raise SystemExit(f"inspect view exited; see {work / 'view.log'} (with --keep)")
            return get(f"{viewer}/")

        wait_for(viewer_up, "inspect view", timeout=60)

        debug_port = free_port()
        procs.append(subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                       f"--user-data-dir={work / 'chromium'}", "--hide-scrollbars",
                                       f"--remote-debugging-port={debug_port}", "--remote-debugging-address=127.0.0.1",
                                       f"--window-size={WIDTH},{HEIGHT}", "about:blank"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        devtools = f"http://127.0.0.1:{debug_port}"
        wait_for(lambda: get(f"{devtools}/json/version"), "chromium's DevTools", timeout=60)
        # the viewer's hash route of one sample's tab: #/logs/<log file>/samples/sample/<id>/<epoch>/<tab>
        url = f"{viewer}/#/logs/{log}/samples/sample/{SAMPLE}/{EPOCH}/{TAB}"
        print(f"page: {url}")
        asyncio.run(capture(devtools, url, out))
    finally:
        for proc in reversed(procs):  # only what this script started, each by its own process group
            stop(proc)
        if keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"took {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, export, eval log)")
    args = parser.parse_args()
    main(args.out, args.keep)

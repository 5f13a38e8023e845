"""Replaying the tasks' expected actions with the domain's own code, to record each task's expected state and the
data every sample starts from. The code is the user's checkout's, not baton's: it runs in the sandbox every
scenario's tools run in (bubblewrap: no network, nothing of the host's but the Python, only its own folder
writable), or unconfined where a person set ``BATON_EVAL_SANDBOX=none``, as the evaluation does."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from importers.tau2.checkout import Tau2ImportError
from proving.sandbox import bwrap
from proving.sandbox.policy import evaluation_confined

RUNNER = Path(__file__).with_name("replay_main.py")
TIMEOUT_S = 600  # a domain of megabytes and a few hundred tasks replays in well under a minute
RESULT_BYTES = 512 * 1024 * 1024
INSIDE = "/replay"  # not /work nor /tmp: the Python may live under either


@dataclass
class Replayed:
    initial: dict[str, Any]  # the database as the domain's model writes it: tools/data.json
    tasks: dict[str, dict[str, Any]]  # task id -> {"expected_state", "outputs", "error"?}
    confined: bool


def _result(path: Path) -> str | None:
    """The replay's result as the domain's code left it in its folder: a regular file, never a link (the code
    ran in the sandbox, but the folder is read here, outside it), at most RESULT_BYTES; None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        data = fh.read(RESULT_BYTES + 1)
    if len(data) > RESULT_BYTES:
        raise Tau2ImportError("the replay's result is larger than the import reads")
    return data.decode("utf-8", errors="replace")


def replay(files: dict[str, str], raw: dict[str, Any], actions: dict[str, list[dict[str, Any]]]) -> Replayed:
    with tempfile.TemporaryDirectory(prefix="baton-tau2-replay-") as tmp:
        work = Path(tmp)
        for relative, text in files.items():
            (work / "tools" / relative).parent.mkdir(parents=True, exist_ok=True)
            (work / "tools" / relative).write_text(text, encoding="utf-8")
        (work / "raw.json").write_text(json.dumps(raw), encoding="utf-8")
        (work / "actions.json").write_text(json.dumps(actions), encoding="utf-8")
        shutil.copyfile(RUNNER, work / RUNNER.name)
        confined = evaluation_confined()
        argv = _confined(work) if confined else [sys.executable, "-I", str(work / RUNNER.name)]
        env = {"PATH": ":".join(bwrap.python_path_dirs()), "LANG": "C.UTF-8", "HOME": str(work), "TMPDIR": str(work)}
        try:
            done = subprocess.run(argv, cwd=work, env={} if confined else env, capture_output=True, text=True,
                                  timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise Tau2ImportError(f"replaying the tasks' expected actions took more than {TIMEOUT_S} s") from None
        text = _result(work / "replayed.json") if done.returncode == 0 else None
        if text is None:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-12:]
            raise Tau2ImportError("the domain's code failed while loading its database or replaying the tasks "
                                  f"(exit {done.returncode}):\n" + "\n".join(tail),
                                  "run the same domain with tau2 itself to see whether the checkout is broken")
        value = json.loads(text)
    return Replayed(value["initial"], value["tasks"], confined)


def _confined(work: Path) -> list[str]:
    try:
        path = bwrap.usable_bwrap()
    except bwrap.SandboxUnavailable as exc:
        raise Tau2ImportError(f"no sandbox to run the domain's code in: {exc}",
                              "install bubblewrap, or set BATON_EVAL_SANDBOX=none to run it unconfined") from None
    env = {"PATH": ":".join(bwrap.python_path_dirs()), "LANG": "C.UTF-8", "HOME": INSIDE, "TMPDIR": INSIDE}
    return bwrap.command(path, writable={work: INSIDE}, chdir=INSIDE, env=env,
                         argv=[sys.executable, "-I", f"{INSIDE}/{RUNNER.name}"])

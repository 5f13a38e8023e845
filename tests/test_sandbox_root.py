"""The sandbox's own root and /dev are read-only (issue 30, item 5: disk is bounded): bwrap builds the
sandbox's / and /dev on tmpfs, which a sample or a Bash command could fill without bound, up to half the
host's memory, were they writable. Only the sample's folder, /tmp and /dev/shm take writes, each sized."""

from __future__ import annotations

import json

import pytest

from tests.test_sandbox_escapes import CHECKER, NO_BWRAP, WAYS, bash, drive
from tests.test_sandbox_escapes import place as place  # noqa: F401 - a fixture, used by name

pytestmark = pytest.mark.skipif(bool(NO_BWRAP), reason=f"needs a working bubblewrap: {NO_BWRAP}")

WRITE_ROOT = '''
import os


def write_root(data, paths):
    written = []
    for path in paths:
        try:
            with open(path, "wb") as fh:
                fh.write(b"x" * 4096)
            written.append(path)
        except OSError:
            pass
    return {"written": written}
'''
PATHS = ["/filler", "/dev/filler", "/usr/filler"]


@pytest.mark.parametrize("way", WAYS)
def test_nothing_is_written_to_the_sandbox_s_own_root_or_dev(place, way):
    if way == "bash":
        writes = "for p in " + " ".join(PATHS) + "; do echo x > $p 2>/dev/null && echo wrote $p; done;"
        data = bash(place["root"], writes + " echo x > /tmp/ok && echo tmp-ok")
        assert "wrote" not in data["stdout"] and "tmp-ok" in data["stdout"], data
        return
    out = place["root"] / "execution_outputs" / "iteration_1"
    for folder in ("tools", "checkers", "samples"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    (out / "tools" / "tools.py").write_text(WRITE_ROOT, encoding="utf-8")
    (out / "tools" / "data.json").write_text("{}", encoding="utf-8")
    (out / "checkers" / "any.py").write_text(CHECKER, encoding="utf-8")
    sample = {"id": "root", "instruction": "try", "actions": [{"tool": "write_root", "args": {"paths": PATHS}}]}
    (out / "samples" / "root.json").write_text(json.dumps(sample), encoding="utf-8")
    drive(way, "evaluate", str(place["root"]), "20", "512")
    result = json.loads((out / "results.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert result["outputs"] and result["outputs"][0]["written"] == [], result

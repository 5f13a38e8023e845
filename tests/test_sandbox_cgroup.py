"""The sandbox's cgroups (proving/sandbox/cgroup.py) where the machine offers a writable one:
a group per sandbox, removed afterwards, and the groups of a killed worker removed later."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proving.sandbox import cgroup

pytestmark = pytest.mark.skipif(not cgroup.available(), reason="no writable cgroup here")
REPO = Path(__file__).resolve().parents[1]
HOLDS_A_GROUP = """
import json, sys, time
from proving.sandbox import cgroup
parent = cgroup.create_parent()
child = cgroup.create(64, 8, parent)
print(json.dumps([str(p) for p in [*child.parts.values(), *parent.parts.values()]]), flush=True)
time.sleep(60)
"""


def test_a_group_holds_its_limits_and_is_removed() -> None:
    group = cgroup.create(64, 8)
    assert group is not None
    memory = group.parts.get("memory") or group.parts["unified"]
    limit = (memory / ("memory.limit_in_bytes" if group.version == 1 else "memory.max")).read_text()
    assert int(limit) == 64 * cgroup.MIB
    group.close()
    assert not any(path.exists() for path in group.parts.values())


def test_the_groups_of_a_killed_worker_are_pruned() -> None:
    worker = subprocess.Popen([sys.executable, "-c", HOLDS_A_GROUP], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        paths = [Path(p) for p in json.loads(worker.stdout.readline())]
        assert all(path.is_dir() for path in paths)
    finally:
        worker.kill()
        worker.wait()
    cgroup.prune()
    assert not any(path.exists() for path in paths)

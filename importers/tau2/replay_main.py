"""Run inside the sandbox by ``replay.py`` (``python -I replay_main.py``, in a folder holding ``tools/``,
``raw.json`` and ``actions.json``): the domain's own code, carried into ``tools/``, loads the database, which is
written back as the data every sample starts from, and replays each task's expected actions on a fresh copy,
recording what changed (dotted paths, as a sample's ``expected_state``) and each action that failed (tau2's
evaluator logs such a gold action and goes on; so does this replay), and whether it changed the data first.

Standard library only (and what ``tools/`` imports): it runs with nothing of baton's.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

UNSAFE_KEY = re.compile(r"[.\[\]]")  # a key a dotted path cannot name


def changes(before: Any, after: Any, path: str, into: dict[str, Any]) -> None:
    """``into`` gets ``path: value`` for what ``after`` changed; a change a path cannot say (a key removed, a
    key with a dot in it, a list that grew) is said by its parent's whole value."""
    if isinstance(before, dict) and isinstance(after, dict):
        if before.keys() - after.keys() or any(UNSAFE_KEY.search(k) for k in after if before.get(k) != after[k]):
            if not path:
                raise ValueError("the database's top level lost a key or changed one a path cannot name")
            into[path] = after
            return
        for key, value in after.items():
            where = f"{path}.{key}" if path else key
            if key not in before:
                into[where] = value
            elif before[key] != value or type(before[key]) is not type(value):
                changes(before[key], value, where, into)
        return
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for index, (old, new) in enumerate(zip(before, after)):
            if old != new or type(old) is not type(new):
                changes(old, new, f"{path}.{index}", into)
        return
    into[path] = after


def main() -> int:
    here = Path.cwd()
    sys.path.append(str(here / "tools"))
    import tau2_glue  # noqa: PLC0415 - from tools/, put on the path just above
    import tools  # noqa: PLC0415

    initial_text = json.dumps(tau2_glue.dumped(tau2_glue.database(json.loads((here / "raw.json").read_text()))))
    initial = json.loads(initial_text)
    results: dict[str, Any] = {}
    for task_id, actions in json.loads((here / "actions.json").read_text()).items():
        data = json.loads(initial_text)
        outputs: list[Any] = []
        failed: list[dict[str, Any]] = []
        for index, action in enumerate(actions):
            before = None if action["tool"] in tau2_glue.KIT["read_only"] else json.dumps(data)
            try:
                outputs.append(getattr(tools, action["tool"])(data, **action["args"]))
            except Exception as exc:  # noqa: BLE001 - tau2 logs a failing gold action and goes on; so does this
                outputs.append(None)
                failed.append({"action": index, "tool": action["tool"], "message": f"{type(exc).__name__}: {exc}",
                               "changed": before is not None and before != json.dumps(data)})
        state: dict[str, Any] = {}
        if any(a["tool"] not in tau2_glue.KIT["read_only"] for a in actions):
            changes(initial, data, "", state)
        results[task_id] = {"outputs": outputs, "failed": failed, "expected_state": state}
    (here / "replayed.json").write_text(json.dumps({"initial": initial, "tasks": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

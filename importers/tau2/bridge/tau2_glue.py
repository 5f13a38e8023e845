"""Between baton's tools (``def tool(data, **args) -> dict``) and a tau2-bench toolkit (methods on a database
model): written by baton, copied into an imported scenario's ``tools/`` beside the generated ``tools.py``.

``tau2_kit.json`` beside this file names the toolkit class, the database model and the tools that write. Each
call builds the database model from ``data`` (once per ``data`` object: the calls of one sample share it), calls
the method as tau2's environment would, and after a tool that may change the database writes the model back into
``data`` as JSON, the form ``tools/data.json`` holds it in. An exception the tool raises is raised on, as tau2's
tools raise it (the state it left is written back first, as tau2 keeps it).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

KIT = json.loads(Path(__file__).with_name("tau2_kit.json").read_text(encoding="utf-8"))
_LOADED: dict[int, tuple[dict[str, Any], Any]] = {}  # id(data) -> (data, toolkit); data held so its id stays its own


def _class(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def database(data: dict[str, Any]) -> Any:
    """The domain's database model of ``data``."""
    return _class(KIT["db_module"], KIT["db_class"]).model_validate(data)


def dumped(db: Any) -> dict[str, Any]:
    return db.model_dump(mode="json")


def _toolkit(data: dict[str, Any]) -> Any:
    held = _LOADED.get(id(data))
    if held is not None and held[0] is data:
        return held[1]
    kit = _class(KIT["toolkit_module"], KIT["toolkit_class"])(database(data))
    _LOADED.clear()  # one sample's data at a time
    _LOADED[id(data)] = (data, kit)
    return kit


def call(data: dict[str, Any], name: str, **args: Any) -> dict[str, Any]:
    kit = _toolkit(data)
    try:
        result = getattr(kit, name)(**args)
    finally:
        if name not in KIT["read_only"]:
            data.clear()
            data.update(dumped(kit.db))
    return output(result)


def output(result: Any) -> dict[str, Any]:
    """What the tool returned, as baton's tools return it: a model as its JSON, a dict as it is, anything else
    (tau2's tools return strings, lists, numbers) under ``result``."""
    if hasattr(result, "model_dump"):
        result = result.model_dump(mode="json")
    elif isinstance(result, list):
        result = [r.model_dump(mode="json") if hasattr(r, "model_dump") else r for r in result]
    return result if isinstance(result, dict) else {"result": result}

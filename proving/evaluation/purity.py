"""Which tools are pure (issue 41's noise): a tool that computes from its arguments alone (``calculate``) changes
no state and tells nothing of it, so a mutant that drops or changes its call is no mistake the scorer should
catch; it counts as read-only, like a lookup.

A tool is pure when its code never touches the data it is given (the function's first parameter is never read:
read statically, nothing runs), or when an imported benchmark declares it a tool that does not write (tau2-bench's
THINK and GENERIC tools, in the import's ``tools/tau2_kit.json``). A tool that records a refusal or hands the
request on is never pure: whether it was called is the outcome.
"""

from __future__ import annotations

import ast
from pathlib import Path

from proving.evaluation.coverage import REFUSING
from scenarios.folder import RECORD_BYTES, Folder

KIT = "tau2_kit.json"  # what `baton import tau2` writes beside tools.py (importers/tau2/toolkit.py)


def pure_in_source(source: str) -> set[str]:
    """The public functions of ``source`` whose first parameter (the data) no line of theirs reads."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    found = set()
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or fn.name.startswith("_") or not fn.args.args:
            continue
        data = fn.args.args[0].arg
        if not any(isinstance(node, ast.Name) and node.id == data for node in ast.walk(fn)):
            found.add(fn.name)
    return found


def pure_tools(root: Path, tools_dir: Path) -> frozenset[str]:
    """The pure tools of an iteration's ``tools/`` (read through the scenario folder's one way in)."""
    folder = Folder(root)
    found = pure_in_source(folder.read_text_or(tools_dir / "tools.py", "", RECORD_BYTES))
    kit = folder.read_json_or_none(tools_dir / KIT, RECORD_BYTES)
    if isinstance(kit, dict) and isinstance(kit.get("read_only"), list):
        found |= {str(name) for name in kit["read_only"]}
    return frozenset(name for name in found if not REFUSING.search(name))

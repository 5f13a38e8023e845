"""Scripts that ship beside the example scenarios (``scenarios/_simulations/``): imported from their files, by
the simulated model (agents/simulated.py) and the simulated blind solver (proving/evaluation/blind.py).

The folder is not a package, and no ``__pycache__`` may appear beside a script: so each is imported from its path,
with a loader that writes no bytecode.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class _NoBytecodeLoader(importlib.machinery.SourceFileLoader):
    """Never writes ``__pycache__`` beside the script."""

    def set_data(self, path: str, data: bytes, *, _mode: int = 0o666) -> None:
        pass


def import_script(module_name: str, path: Path) -> ModuleType:
    """The module at ``path``, imported under ``module_name`` (kept in ``sys.modules``; a script that fails to
    run is removed again, so no half-run module is left behind for the next load)."""
    spec = importlib.util.spec_from_file_location(module_name, path, loader=_NoBytecodeLoader(module_name, str(path)))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module

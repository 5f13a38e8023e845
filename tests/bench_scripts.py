"""Loading a script of bench/ (not a package) as a module, for the tests that check a benchmark."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(stem: str) -> ModuleType:
    """bench/<stem>.py as the module `bench_<stem>` (a script that imports its neighbours puts bench/ on the path)."""
    spec = importlib.util.spec_from_file_location(f"bench_{stem}", BENCH / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file is executed
    spec.loader.exec_module(module)
    return module

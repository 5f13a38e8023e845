"""The shape of the code (docs/architecture.md): dependencies point one way, no import
cycles (read from the source with ast, nothing is imported), and ruff is clean."""

from __future__ import annotations

import ast
import functools
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.sources import package_sources

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("context", "scenarios", "proving", "agents", "workers", "importers")
# What each package may import from the others: workers -> agents -> context; proving (the sandbox,
# evaluation, export and gates) is used by agents and workers and imports neither; scenarios (the folder
# store) serves them all; context is pure.
ALLOWED = {
    "context": {"context"},
    "scenarios": {"scenarios"},
    "proving": {"proving", "context", "scenarios"},
    "agents": {"agents", "proving", "context", "scenarios"},
    "workers": {"workers", "agents", "proving", "context", "scenarios", "importers"},
    # Importers (baton import) write a scenario with what proving checks and scenarios store; only the CLI uses them.
    "importers": {"importers", "proving", "context", "scenarios"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    # Scenario folders (the example's, a user's with its run outputs) and the simulated model's scripts are no
    # package: their files are data or model-written code, not baton's modules.
    return {_module_name(p): p for package in PACKAGES for p in package_sources(REPO, package)}


def _imports(path: Path, known: set[str]) -> set[str]:
    """Project modules imported by ``path`` at any depth (late imports count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found |= {name for name in names if name in known}
    return found


@functools.cache  # both tests read the same sources: parse them once
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, set(modules)) - {name} for name, path in modules.items()}


def test_dependencies_point_one_way():
    wrong = [f"{module} imports {target}" for module, targets in _graph().items() for target in targets
             if target.split(".")[0] not in ALLOWED[module.split(".")[0]]]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    graph = _graph()
    cycles, state = [], dict.fromkeys(graph, 0)  # 0 unseen, 1 on the stack, 2 done

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif state.get(target) == 0:
                visit(target, stack + [target])
        state[module] = 2

    for module in sorted(graph):
        if state[module] == 0:
            visit(module, [module])
    assert not cycles, "\n".join(cycles)


@pytest.mark.skipif(shutil.which("ruff") is None and not (REPO / ".venv/bin/ruff").exists(),
                    reason="ruff is not installed (pip install -e '.[test]' brings it)")
def test_lines_fit_in_120_columns():
    ruff = shutil.which("ruff") or str(REPO / ".venv/bin/ruff")
    done = subprocess.run(
        [ruff, "check", "--select", "E501", "--output-format", "concise", *PACKAGES, "bench", "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

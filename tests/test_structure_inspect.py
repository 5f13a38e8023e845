"""The shape of the code that keeps a model's files from configuring baton (issue 39), read from the source with
ast as tests/test_structure.py reads it: Inspect AI's eval is started in one place only, the launcher of its
child process; and no module reads a confinement setting from ``os.environ`` (each asks proving/startup.py,
which read the environment once, when the process started)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.sources import in_scenario_folder

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("context", "scenarios", "proving", "agents", "workers")
LAUNCHER = "proving/export/inspect_child_main.py"
STARTS_INSPECT = {"eval", "eval_async", "eval_set", "eval_retry", "eval_retry_async", "eval_set_async"}
CONFINEMENT = {"BATON_EVAL_SANDBOX", "BATON_EXPORT_BWRAP"}
CONFINEMENT_NAMES = {"EVAL_SANDBOX_ENV", "EXPORT_BWRAP_ENV", "BWRAP_ENV"}  # the constants that hold them
# Where a confinement setting is read from an environment, and why that environment is the right one.
READERS = {
    "proving/startup.py": "the one reader: the environment as the process started",
    "proving/export/runtime/sandbox.py": "the exported task's own code, run by Inspect in the process baton built "
                                         "(proving/export/inspect_child.py) or by a user's `inspect eval`",
}


def sources() -> dict[str, ast.AST]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if in_scenario_folder(path, REPO):
                continue  # model-written code of a scenario's runs (a user's in the checkout), not baton's
            found[str(path.relative_to(REPO))] = ast.parse(path.read_text(encoding="utf-8"))
    return found


def starts_inspect(tree: ast.AST) -> list[int]:
    """Lines that start an Inspect eval: ``inspect_ai.eval(...)`` (any alias of the module) or a name imported
    from ``inspect_ai`` or its ``_eval`` modules that is one of the eval functions."""
    modules = {"inspect_ai"}
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "inspect_ai"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("inspect_ai"):
            names |= {a.asname or a.name for a in node.names if a.name in STARTS_INSPECT}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in STARTS_INSPECT and ast.unparse(func.value) in modules:
            lines.append(node.lineno)
        elif isinstance(func, ast.Name) and func.id in names:
            lines.append(node.lineno)
    return lines


def is_confinement(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in CONFINEMENT
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in CONFINEMENT_NAMES


def is_environ(node: ast.AST) -> bool:
    """``os.environ``, ``os.getenv`` or ``from os import environ, getenv`` (code, not a docstring's words)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
        return node.attr in ("environ", "getenv", "environb")
    return isinstance(node, ast.ImportFrom) and node.module == "os" and any(
        a.name in ("environ", "getenv") for a in node.names)


def reads_confinement_from_environ(tree: ast.AST) -> list[int]:
    """Lines that look a confinement setting up (``.get(NAME)``, ``[NAME]``, ``getenv(NAME)``) in a module that
    holds ``os.environ`` or ``os.getenv``: the setting read from the environment as it is now."""
    if not any(is_environ(node) for node in ast.walk(tree)):
        return []
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "getenv",
                                                                                                     "pop"):
            if node.args and is_confinement(node.args[0]):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and is_confinement(node.slice) and isinstance(node.ctx, ast.Load):
            lines.append(node.lineno)
    return lines


def test_inspect_s_eval_starts_only_in_the_child_launcher():
    wrong = [f"{path}:{line}" for path, tree in sources().items() if path != LAUNCHER
             for line in starts_inspect(tree)]
    assert not wrong, "Inspect started in baton's own process (use proving/export/inspect_child.run_eval):\n" + \
        "\n".join(wrong)
    assert starts_inspect(sources()[LAUNCHER])  # the check sees the one place that does


def test_no_module_reads_a_confinement_setting_from_the_environment_after_start_up():
    trees = sources()
    wrong = [f"{path}:{line}" for path, tree in trees.items() if path not in READERS
             for line in reads_confinement_from_environ(tree)]
    assert not wrong, "a confinement setting read from os.environ (ask proving.startup.fixed()):\n" + "\n".join(wrong)
    assert reads_confinement_from_environ(trees["proving/export/runtime/sandbox.py"])  # the check sees a reader

"""baton's own source files, as the tests that read the source (the one way in, the structure) see them.

A checkout's scenarios/ also holds the user's scenarios (`baton new mine --from refund_desk`), whose runs leave
model-written Python in execution_outputs/ (tools, checkers, the exported task): none of it is baton's code. A
module is baton's when every folder between it and the checkout is a package (has ``__init__.py``), which a
scenario folder never is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def in_package(path: Path, repo: Path) -> bool:
    return all((folder / "__init__.py").exists() for folder in path.parents if repo in folder.parents)


def package_sources(repo: Path, package: str) -> Iterator[Path]:
    """The package's modules, sorted, leaving out folders that are no package (scenario folders, data)."""
    for path in sorted((repo / package).rglob("*.py")):
        if in_package(path, repo):
            yield path


def in_scenario_folder(path: Path, repo: Path) -> bool:
    """``path`` lies in a scenario's folder (one holding scenario.toml: the example's, a user's with its runs)."""
    return any((folder / "scenario.toml").is_file() for folder in path.parents if repo in folder.parents)


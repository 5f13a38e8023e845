"""Names of files that configure a program merely by being where it looks (issue 39, item 4).

A model writes a scenario's files, and programs baton starts on them read some files by name before anything
else: Inspect and python-dotenv load a ``.env`` from the working directory upwards into the environment (which
once switched both sandboxes off and sent the API key to a listener), direnv a ``.envrc``, Python runs ``*.pth``
files and imports ``sitecustomize``/``usercustomize`` at start-up, pytest reads ``conftest.py``, ``pytest.ini``,
``pyproject.toml`` and ``setup.cfg``, Inspect ``.inspect*``. Nothing in a scenario's design names any of them
(docs/evaluation.md: tools/, checkers/, samples/, design/ hold plain modules, data and text), so the file tools
and Bash refuse to make them anywhere in a scenario folder, and every copy of a model-written folder leaves them
out and says so. Names are compared case-folded (a case-insensitive disk opens ``.ENV`` for ``.env``), and a
folder of such a name counts too (``sitecustomize/`` is imported like ``sitecustomize.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

_EXACT = {
    ".env": "loaded into the environment by Inspect and python-dotenv",
    ".envrc": "loaded into the shell's environment by direnv",
    "sitecustomize.py": "run by every Python at start-up",
    "sitecustomize": "imported by every Python at start-up",
    "usercustomize.py": "run by every Python at start-up",
    "usercustomize": "imported by every Python at start-up",
    "pyproject.toml": "read as settings by pytest, pip and other Python tools",
    "setup.cfg": "read as settings by pytest and setuptools",
    "pytest.ini": "read as settings by pytest",
    "conftest.py": "run by pytest before any test",
    "tox.ini": "read as settings by pytest and tox",
}


def configures(name: str) -> str | None:
    """Why a file or folder called ``name`` would configure a program, or None when it would not."""
    folded = name.casefold()
    if folded in _EXACT:
        why = _EXACT[folded]
    elif folded.startswith(".env."):
        why = "loaded into the environment by dotenv-style tools"
    elif folded.endswith(".pth"):
        why = "run by Python at start-up from a site folder"
    elif folded.startswith(".inspect"):
        why = "read as settings by Inspect"
    else:
        return None
    return f"{name} configures a program by its name alone ({why})"


def configuring_part(parts: Iterable[str]) -> str | None:
    """Why a path that has such a name among its components would configure a program, or None."""
    for part in parts:
        if (why := configures(part)) is not None:
            return why
    return None

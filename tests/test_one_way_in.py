"""One way into a scenario folder (issue 30): nothing in baton opens, lists, copies or removes a path directly
but ``scenarios.confined`` (and ``scenarios.folder``, its face for the rest of baton), and the places below
that work on files that are not a scenario's, each with the reason. Read from the source with ast.

What counts as direct file access: the builtin ``open``; ``os``, ``shutil`` and ``tempfile`` calls that open,
list, stat, copy, move or remove; ``pathlib.Path`` methods that do (``read_text``, ``glob``, ``exists``...).
``Folder`` has methods of some of those names, always called with the path as an argument, while a Path's
``exists()``, ``is_file()``, ``read_bytes()`` take none and its ``glob(pattern)`` one: the count tells them apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.sources import package_sources

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("agents", "proving", "workers", "scenarios", "importers")
MODULE_CALLS = {
    "os": {"open", "listdir", "scandir", "walk", "remove", "unlink", "rename", "replace", "mkdir", "makedirs", "stat",
           "lstat", "rmdir", "link", "symlink", "readlink", "chmod", "truncate", "mkfifo"},
    "os.path": {"exists", "isfile", "isdir", "islink", "getsize", "getmtime", "lexists"},
    "shutil": {"copytree", "rmtree", "copyfile", "copy", "copy2", "move", "copyfileobj"},
    "tempfile": {"mkstemp", "mkdtemp", "TemporaryDirectory", "NamedTemporaryFile", "TemporaryFile"},
}
# Path methods, with the number of positional arguments a Path call takes (None: any).
PATH_METHODS = {"read_text": 0, "read_bytes": 0, "write_text": None, "write_bytes": None, "open": None,
                "iterdir": 0, "glob": 1, "rglob": 1, "unlink": 0, "rmdir": 0, "mkdir": None, "touch": None,
                "rename": 1, "exists": 0, "is_file": 0, "is_dir": 0, "is_symlink": 0, "stat": 0, "lstat": 0,
                "is_fifo": 0, "readlink": 0, "symlink_to": None, "hardlink_to": None}
RECEIVERS_THAT_ARE_NOT_PATHS = {"os", "shutil", "tempfile", "os.path", "confined", "re", "json", "str"}

# (module, function or "*") -> why it may touch files directly. A function's entry covers what it nests.
ALLOWED = {
    ("scenarios/confined.py", "*"): "the one way in: every access beneath a scenario folder's descriptor",
    ("scenarios/trees.py", "*"): "the one way in for whole folders: copies and removals beneath a descriptor",
    ("scenarios/folder.py", "*"): "the one way in, as the rest of baton calls it (it calls confined only)",
    ("scenarios/store.py", "_fsync_dir"): "no scenario file is opened: the folder's descriptor, for fsync",
    ("scenarios/lease.py", "*"): "state/<agent>/lease.json, opened O_NOFOLLOW under state/ that no agent reaches",
    ("workers/scenario_lock.py", "*"): "state/.lock, opened O_NOFOLLOW for flock under state/ that no agent reaches",
    ("scenarios/run.py", "shipped_example"): "the example baton ships inside its package",
    ("scenarios/run.py", "example_copied"): "the examples baton ships inside its package",
    ("scenarios/run.py", "add_shipped_example"): "the scenarios folder itself, before a scenario exists in it",
    ("scenarios/run.py", "archive_run"): "renames entries of the scenario folder; a rename moves a link, never "
                                         "its target, and what it moves was listed by Folder",
    ("workers/rebuild.py", "replace_run_json"): "moves run.json aside as it is (a rename never follows a link)",
    ("workers/cli.py", "new"): "the scenarios folder: is the new scenario's name free, then its folder made",
    ("workers/cli.py", "source_folder"): "a folder a person names on the command line",
    ("workers/cli.py", "brief_text"): "a brief file a person names on the command line, outside any scenario",
    ("workers/task_trace.py", "_kept"): "a trace context made once, never replaced: created beneath state/trace's "
                                        "descriptor (confined.directory) and linked into place there",
    ("agents/tools/listing.py", "_mark"): "a DirEntry confined.entries listed: what scandir saw, nothing opened",
    ("workers/timeline.py", "*"): "writes the PNG timeline where the person asked",
    ("workers/fake_api", "*"): "the API double: no scenario folder",
    ("agents/prompts.py", "*"): "the role prompts baton ships as package data",
    ("agents/simulated.py", "*"): "the simulated model's scripts, shipped with baton",
    ("proving/evaluation/blind.py", "*"): "the simulated blind solver's scripts, shipped with baton",
    ("proving/priority.py", "*"): "/proc and /sys: the scheduler's settings",
    ("proving/sandbox", "*"): "cgroupfs, /proc and the sandbox's own mounts and folders",
    ("proving/processes.py", "*"): "runs inside the sandbox and the export; no scenario folder there",
    ("proving/evaluation/child_main.py", "*"): "runs inside a sample's sandbox, on its own copy",
    ("proving/evaluation/child_runs.py", "*"): "runs inside a sample's sandbox (the gates' runs), on its own copy",
    ("proving/evaluation/fork_server_main.py", "*"): "runs inside the sample server's sandbox",
    ("proving/evaluation/spawned_main.py", "*"): "runs inside a spawned sample's sandbox",
    ("proving/evaluation/fork_server.py", "*"): "the sample server's own temporary folders",
    ("proving/evaluation/child.py", "*"): "the sample's own temporary folder (its outputs read with confined)",
    ("proving/export/runtime", "*"): "runs in the exported task, where baton is not installed",
    ("proving/export/build.py", "_write"): "the export's own folder, where the person asked (tools/ and "
                                          "checkers/ are copied with Folder.copy_tree)",
    ("proving/export/build.py", "_is_export"): "the export's own folder, where the person asked",
    ("proving/export/docker_files.py", "*"): "files of the export's own folder",
    ("proving/export/inspect_child.py", "*"): "Inspect's own temporary folder (the task copied in and its logs "
                                            "moved out with Folder)",
    ("proving/export/inspect_child_main.py", "*"): "runs in Inspect's process, in its own temporary folder",
    ("agents/tools/bash_copy.py", "*"): "Bash's own seed and result folders (the scenario read and written "
                                        "with Folder)",
    ("agents/tools/bash.py", "*"): "Bash's own temporary folders (the scenario read and written with Folder)",
    ("importers/tau2/checkout.py", "*"): "a tau2-bench checkout a person names on the command line, no scenario",
    ("importers/tau2/toolkit.py", "*"): "the checkout's domain code and baton's own bridge modules (package data)",
    ("importers/tau2/bridge", "*"): "runs inside the sandbox, carried into an imported scenario's tools/",
    ("importers/tau2/replay_main.py", "*"): "runs inside the replay's sandbox, on its own temporary folder",
    ("importers/tau2/replay.py", "*"): "the replay's own temporary folder (its result opened O_NOFOLLOW, bounded)",
    ("importers/tau2/scenario.py", "*"): "builds a new scenario in a staging folder of its own, renamed into place "
                                         "once whole (no scenario is there before; it refuses one that appears)",
}


def _allowed(module: str, function: str) -> bool:
    for (where, name), _ in ALLOWED.items():
        if (module == where or module.startswith(where + "/")) and name in ("*", function):
            return True
    return False


def _direct_calls(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, call, enclosing top-level function) of each direct file access."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and function == "":
                inner = child.name
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and not function.count("."):
                inner = f"{function}.{child.name}" if isinstance(node, ast.ClassDef) else function
            if isinstance(child, ast.Call):
                what = _what(child)
                if what:
                    found.append((child.lineno, what, inner))
            visit(child, inner)

    visit(tree, "")
    return found


def _what(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name) and func.id == "open":
        return "open"
    if not isinstance(func, ast.Attribute):
        return None
    receiver = ast.unparse(func.value) if isinstance(func.value, ast.Name | ast.Attribute) else ""
    if func.attr in MODULE_CALLS.get(receiver, ()):
        return f"{receiver}.{func.attr}"
    if receiver in RECEIVERS_THAT_ARE_NOT_PATHS or func.attr not in PATH_METHODS:
        return None
    takes = PATH_METHODS[func.attr]
    if takes is not None and len(call.args) != takes:
        return None  # a Folder method (the path is its argument), or str.replace and the like
    return f".{func.attr}()"


def test_nothing_but_the_one_way_in_touches_files():
    offenders = []
    for package in PACKAGES:
        for path in package_sources(REPO, package):  # a scenario's folder (the example's, a user's) is no package
            module = path.relative_to(REPO).as_posix()
            for line, what, function in _direct_calls(ast.parse(path.read_text(encoding="utf-8"))):
                if not _allowed(module, function.split(".")[-1]) and not _allowed(module, function.split(".")[0]):
                    offenders.append(f"{module}:{line} {what} in {function or 'module level'}")
    assert not offenders, ("these touch files directly; go through scenarios.folder (or confined), or add the "
                           "place to ALLOWED with the reason it is no scenario file:\n" + "\n".join(offenders))


def test_the_scan_finds_what_it_looks_for():
    """The scan itself: each kind of direct access is found, a Folder call is not."""
    source = (
        "def f(p, folder):\n"
        "    open(p)\n    p.read_text()\n    p.glob('*')\n    os.scandir(p)\n    shutil.copytree(p, p)\n"
        "    p.exists()\n    folder.exists(p)\n    folder.read_text(p)\n    folder.glob(p, '*')\n"
        "    'a'.replace('a', 'b')\n"
    )
    found = [what for _, what, _ in _direct_calls(ast.parse(source))]
    assert found == ["open", ".read_text()", ".glob()", "os.scandir", "shutil.copytree", ".exists()"]

"""The file tools' confinement (issue 23): a person's settings and baton's records cannot be written, nothing
outside the folder is reached through a symlink swapped in during a call or through a hard link, and
inputs are bounded."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
from pathlib import Path

import pytest

from agents.tools.base import ToolContext, ToolResult, run_tool
from agents.tools.registry import FILE_TOOLS
from agents.tools.todo import MAX_TODO_CHARS, MAX_TODOS
from agents.tools.write import MAX_FILE_BYTES
from scenarios.journal import Journal

TOOLS = {tool.name: tool for tool in FILE_TOOLS}
SECRET = "outside secret token\n"


def call(ctx: ToolContext, name: str, **tool_input) -> ToolResult:
    return run_tool(TOOLS, name, tool_input, ctx)


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    root = tmp_path / "scenarios" / "s"
    root.mkdir(parents=True)
    (root / "scenario.toml").write_text('name = "s"\ntarget_success_rate = 0.85\n')
    (root / "brief.md").write_text("Build a refund desk.\n")
    (root / "CONVENTIONS.md").write_text("ids are snake_case\n")
    (tmp_path / "scenarios" / "CONVENTIONS.md").write_text("team rules\n")
    out = root / "execution_outputs" / "iteration_1"
    (out / "traces").mkdir(parents=True)
    (out / "report.json").write_text('{"total": 10, "passed": 8}')
    (out / "results.jsonl").write_text("{}\n")
    (out / "traces" / "s1.json").write_text("{}")
    (root / "handoffs" / "iteration_1").mkdir(parents=True)
    return root


# ---- item 2: settings the agents cannot change ---------------------------------------------


@pytest.mark.parametrize("path, owner", [
    ("scenario.toml", "a person's setting"), ("./scenario.toml", "a person's setting"),
    ("brief.md", "a person's setting"), ("CONVENTIONS.md", "a person's setting"),
    ("conventions.md", "a person's setting"),
    ("handoffs/iteration_1/execute_to_init_context.json", "SubmitHandoff"),
    ("handoffs/iteration_1/approval.json", "SubmitHandoff"),
    ("execution_outputs/iteration_1/report.json", "RunEvaluation"),
    ("execution_outputs/iteration_1/results.jsonl", "RunEvaluation"),
    ("execution_outputs/iteration_1/traces/s1.json", "RunEvaluation"),
    ("state/execute/tools.json", "baton only"), ("run.json", "baton only"),
])
def test_what_a_person_or_baton_keeps_cannot_be_written(scenario, path, owner):
    ctx = ToolContext(root=scenario, agent="execute", iteration=1)
    before = {p: p.read_bytes() for p in scenario.rglob("*") if p.is_file()}
    write = call(ctx, "Write", path=path, content='bash_enabled = true\nbash_sandbox = "none"\n')
    edit = call(ctx, "Edit", path=path, old_string="0.85", new_string="0.1")
    for result in (write, edit):
        assert result.status == "error" and owner in result.error, result.error
    assert {p: p.read_bytes() for p in scenario.rglob("*") if p.is_file()} == before
    assert not (scenario / "run.json").exists() and not (scenario / "state").exists()


def test_settings_stay_readable_and_the_rest_writable(scenario):
    ctx = ToolContext(root=scenario, agent="init", iteration=1)
    assert "0.85" in call(ctx, "Read", path="scenario.toml").data["content"]
    assert call(ctx, "Read", path="brief.md").status == "ok"
    for path in ("design/scenario.md", "execution_outputs/iteration_1/tools/tools.py", "notes/brief.md",
                 "execution_outputs/iteration_1/samples/report.json"):
        assert call(ctx, "Write", path=path, content="x\n").status == "ok", path


# ---- item 4: no symlink followed, no hard link, temp files inside ----------------------------


def test_a_hard_link_to_an_outside_file_is_neither_read_nor_written(scenario):
    outside = scenario.parent.parent / "secret.txt"
    outside.write_text(SECRET)
    os.link(outside, scenario / "notes.txt")
    ctx = ToolContext(root=scenario, agent="execute", iteration=1)
    for name, tool_input in [("Read", {"path": "notes.txt"}),
                             ("Write", {"path": "notes.txt", "content": "x"}),
                             ("Edit", {"path": "notes.txt", "old_string": "outside", "new_string": "x"})]:
        result = call(ctx, name, **tool_input)
        assert result.status == "error" and "hard links" in result.error, (name, result)
        assert "secret token" not in result.text()
    grep = call(ctx, "Grep", pattern="secret")
    assert grep.data["total"] == 0 and any("notes.txt" in s and "hard links" in s for s in grep.data["skipped"])
    assert outside.read_text() == SECRET


def test_a_fifo_does_not_hang_a_read(scenario):
    os.mkfifo(scenario / "pipe")
    ctx = ToolContext(root=scenario, agent="execute", iteration=1)
    assert "not a regular file" in call(ctx, "Read", path="pipe").error


def _exchange() -> object:
    """renameat2(RENAME_EXCHANGE) when the kernel and filesystem offer it, else None."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return getattr(libc, "renameat2", None)


def _swapper(root: Path, stop: threading.Event, swaps: list[int]) -> None:
    """Swap `root/d` (a real folder) with `root/x` (a symlink to a folder outside) as fast as possible."""
    renameat2 = _exchange()
    a, b = bytes(root / "d"), bytes(root / "x")
    at_fdcwd, rename_exchange = -100, 2
    while not stop.is_set():
        if renameat2 is not None and renameat2(at_fdcwd, a, at_fdcwd, b, rename_exchange) == 0:
            swaps[0] += 1
            continue
        if renameat2 is not None and ctypes.get_errno() not in (errno.ENOSYS, errno.EINVAL):
            continue
        os.rename(a, root / "tmp_swap")  # no exchange here: two renames, a window with the symlink as d
        os.rename(b, a)
        os.rename(root / "tmp_swap", b)
        swaps[0] += 1


@pytest.mark.parametrize("writer", ["direct", "journal"])
def test_a_folder_swapped_for_a_symlink_during_calls_never_leads_outside(scenario, writer):
    outside = scenario.parent.parent / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(SECRET)
    (scenario / "d").mkdir()
    (scenario / "d" / "f.txt").write_text("inside\n")
    (scenario / "x").symlink_to(outside)
    ctx = ToolContext(root=scenario, agent="execute", iteration=1)
    stop, swaps = threading.Event(), [0]
    thread = threading.Thread(target=_swapper, args=(scenario, stop, swaps), daemon=True)
    thread.start()
    leaks, reads_ok = [], 0
    try:
        for i in range(3000 if writer == "direct" else 1000):  # a journal fsyncs every call: fewer
            if writer == "journal":
                ctx.files = Journal(scenario, scenario / "state" / "execute" / "journal" / f"call{i}")
            read = call(ctx, "Read", path="d/f.txt")
            reads_ok += read.status == "ok"
            results = [read, call(ctx, "Write", path=f"d/new{i % 10}.txt", content="written\n")]
            if i % 20 == 0:
                results += [call(ctx, "Grep", pattern="tok[e]n"), call(ctx, "Glob", pattern="**/*.txt")]
            leaks += [(i, result) for result in results if "secret token" in result.text()]
    finally:
        stop.set()
        thread.join()
    assert swaps[0] > 100 and reads_ok > 0  # the race ran, and some reads met the real folder
    assert leaks == []
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]  # no file written, no temp file left outside
    assert (outside / "f.txt").read_text() == SECRET


# ---- item 5: bounded writes --------------------------------------------------------------------


def test_writes_and_edits_are_bounded(scenario):
    ctx = ToolContext(root=scenario, agent="execute", iteration=1)
    big = call(ctx, "Write", path="big.txt", content="x" * (MAX_FILE_BYTES + 1))
    assert big.status == "error" and "nothing was written" in big.error and not (scenario / "big.txt").exists()
    (scenario / "a.txt").write_text("ab" * 1024)
    blowup = call(ctx, "Edit", path="a.txt", old_string="a", new_string="a" * 8192, replace_all=True)
    assert blowup.status == "error" and f"{MAX_FILE_BYTES:,}" in blowup.error
    assert (scenario / "a.txt").read_text() == "ab" * 1024


def test_the_todo_list_is_bounded(scenario):
    ctx = ToolContext(root=scenario, agent="execute", iteration=1)
    assert call(ctx, "TodoWrite", todos=[{"content": "plan", "status": "pending"}]).status == "ok"
    many = call(ctx, "TodoWrite", todos=[{"content": f"t{i}", "status": "pending"} for i in range(MAX_TODOS + 1)])
    long = call(ctx, "TodoWrite", todos=[{"content": "x" * (MAX_TODO_CHARS + 1), "status": "pending"}])
    assert "over the limit" in many.error and "over the limit" in long.error
    assert ctx.memory["todos"] == [{"content": "plan", "status": "pending"}]  # unchanged

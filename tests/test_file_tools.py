"""The agents' file and shell tools (agents.tools): results, refusals, limits."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from agents.config import ToolSettings
from agents.tools.base import ToolContext, ToolResult, definition, run_tool
from agents.tools.bash import SandboxUnavailable, usable_bwrap
from agents.tools.read import shown_mtime
from agents.tools.registry import FILE_TOOLS
from context.compression import archive_ref
from context.messages import ToolResultBlock, ToolUseBlock
from context.per_tool_compression import compress_result
from context.tool_results import DATA_MODELS

TOOLS = {tool.name: tool for tool in FILE_TOOLS}


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(root=tmp_path, agent="execute", iteration=1)


@pytest.fixture(params=["bwrap", "none"])
def sandbox(request) -> str:
    """Bash's behaviour holds in the bubblewrap sandbox and without it (its confinement:
    tests/test_bash_sandbox.py); the sandbox needs a working bwrap."""
    if request.param == "bwrap":
        try:
            usable_bwrap()
        except SandboxUnavailable as exc:
            pytest.skip(f"no working bubblewrap sandbox here ({exc})")
    return request.param


@pytest.fixture
def bash_ctx(tmp_path: Path, sandbox: str) -> ToolContext:
    return ToolContext(
        root=tmp_path, agent="execute", iteration=1,
        settings=ToolSettings(bash_enabled=True, bash_timeout_s=20, bash_sandbox=sandbox),  # type: ignore[arg-type]
    )


def call(ctx: ToolContext, name: str, **tool_input) -> ToolResult:
    return run_tool(TOOLS, name, tool_input, ctx)


def good(ctx: ToolContext, name: str, **tool_input) -> dict:
    """Run a tool that must succeed; its data must validate against the compression model."""
    result = call(ctx, name, **tool_input)
    assert result.status == "ok", result.error
    DATA_MODELS[name.lower()].model_validate(result.data)
    return result.data


def bad(ctx: ToolContext, name: str, **tool_input) -> str:
    result = call(ctx, name, **tool_input)
    assert result.status == "error", result.data
    assert result.error
    return result.error


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def running(pid: int) -> bool:
    """True while `pid` runs. A killed orphan is a zombie until init reaps it,
    which happens asynchronously, so wait a little for that."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat").read_text() if Path("/proc/self").exists() else "(x) R"
        except (FileNotFoundError, ProcessLookupError):
            return False
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
        time.sleep(0.05)
    return True


def bump_mtime(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


# ---- definitions ---------------------------------------------------------------


def test_every_tool_has_a_definition_and_a_data_model():
    names = [t.name for t in FILE_TOOLS]
    assert names == ["Read", "Write", "Edit", "LS", "Glob", "Grep", "Bash", "TodoWrite"]
    for tool in FILE_TOOLS:
        spec = definition(tool)
        assert spec["input_schema"]["type"] == "object" and len(spec["description"]) > 80
        assert tool.name.lower() in DATA_MODELS
        json.dumps(spec)  # the API gets it as JSON


# ---- Read ----------------------------------------------------------------------


def test_read_numbers_lines_and_records_mtime(ctx, tmp_path):
    path = write(tmp_path, "design/a.md", "alpha\nbeta\ngamma\n")
    data = good(ctx, "Read", path="design/a.md")
    assert data["content"] == "     1\talpha\n     2\tbeta\n     3\tgamma"
    assert (data["path"], data["start_line"], data["end_line"], data["total_lines"]) == ("design/a.md", 1, 3, 3)
    assert data["mtime"] == shown_mtime(path.stat().st_mtime) and data["modified_externally"] is False
    assert ctx.memory["reads"]["design/a.md"] == path.stat().st_mtime


def test_the_mtime_shown_costs_the_same_tokens_however_its_float_ends():
    # Two runs of bench/chaos.py read one file at these two mtimes: as floats their texts were one token
    # apart (a repr drops trailing zeros), which moved a compaction decided at the threshold by one step.
    from context.tokens import count_text

    shown = [shown_mtime(m) for m in (1795548291.6856213, 1795548389.990298, 1795548400.0, 1795548295.510029)]
    assert shown[0] == "2026-11-24T19:24:51.685+00:00"
    assert len({len(s) for s in shown}) == 1 and len({count_text(s) for s in shown}) == 1
    assert len({count_text(repr(m)) for m in (1795548291.6856213, 1795548389.990298)}) == 2  # what it was


def test_read_offset_limit_and_past_end(ctx, tmp_path):
    write(tmp_path, "n.txt", "".join(f"line {i}\n" for i in range(1, 101)))
    data = good(ctx, "Read", path="n.txt", offset=10, limit=3)
    assert data["content"].splitlines() == ["    10\tline 10", "    11\tline 11", "    12\tline 12"]
    assert (data["end_line"], data["total_lines"]) == (12, 100) and "offset=13" in data["note"]
    assert "past the end" in bad(ctx, "Read", path="n.txt", offset=101)
    assert "at least 1" in bad(ctx, "Read", path="n.txt", offset=0)


def test_read_caps_content_and_says_how_to_continue(tmp_path):
    ctx = ToolContext(root=tmp_path, agent="execute", iteration=1, settings=ToolSettings(output_cap_chars=1000))
    write(tmp_path, "big.txt", "x" * 90 + "\n" + ("y" * 90 + "\n") * 200)
    data = good(ctx, "Read", path="big.txt")
    assert len(data["content"]) <= 1000 and data["end_line"] < 200
    assert f"offset={data['end_line'] + 1}" in data["note"]


def test_read_clips_very_long_lines(ctx, tmp_path):
    write(tmp_path, "min.js", "a" * 100_000 + "\nshort\n")
    data = good(ctx, "Read", path="min.js")
    first, second = data["content"].splitlines()
    assert len(first) < 2100 and "clipped" in first and second == "     2\tshort"


def test_read_modified_externally(ctx, tmp_path):
    path = write(tmp_path, "a.txt", "one\n")
    assert good(ctx, "Read", path="a.txt")["modified_externally"] is False
    assert good(ctx, "Read", path="a.txt")["modified_externally"] is False
    path.write_text("two\n")
    bump_mtime(path)  # another process changed it
    assert good(ctx, "Read", path="a.txt")["modified_externally"] is True
    assert good(ctx, "Read", path="a.txt")["modified_externally"] is False  # now seen


def test_own_writes_and_edits_are_not_external(ctx, tmp_path):
    good(ctx, "Write", path="a.txt", content="one\n")
    good(ctx, "Edit", path="a.txt", old_string="one", new_string="two")
    assert good(ctx, "Read", path="a.txt")["modified_externally"] is False
    bump_mtime(tmp_path / "a.txt")
    assert good(ctx, "Read", path="a.txt")["modified_externally"] is True


def test_read_refusals(ctx, tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "bin.dat").write_bytes(b"ELF\x00\x01\x02" * 100)
    assert "LS or Glob" in bad(ctx, "Read", path="nope.md") and "nope.md" in bad(ctx, "Read", path="nope.md")
    assert "LS" in bad(ctx, "Read", path="dir")
    assert "binary" in bad(ctx, "Read", path="bin.dat")
    assert ".." in bad(ctx, "Read", path="../x")
    assert "absolute" in bad(ctx, "Read", path="/etc/passwd")


def test_read_empty_file(ctx, tmp_path):
    write(tmp_path, "empty.txt", "")
    data = good(ctx, "Read", path="empty.txt")
    assert (data["total_lines"], data["content"]) == (0, "") and "empty" in data["note"]


def test_read_range_from_the_middle_of_a_50mb_file(ctx, tmp_path):
    line = "0123456789" * 10  # 100 characters + newline
    blocks = ("".join(f"{i:08d} {line}\n" for i in range(s, s + 10_000)) for s in range(0, 500_000, 10_000))
    with open(tmp_path / "huge.log", "w") as fh:
        fh.writelines(blocks)
    assert (tmp_path / "huge.log").stat().st_size > 50_000_000
    data = good(ctx, "Read", path="huge.log", offset=250_001, limit=5)
    assert data["total_lines"] == 500_000 and data["end_line"] == 250_005
    assert data["content"].splitlines()[0] == f"250001\t00250000 {line}"
    assert len(data["content"].splitlines()) == 5


def test_read_archived_tool_result_expands_json(ctx, tmp_path):
    inner = {"path": "a.py", "content": "     1\timport os\n     2\tprint(1)", "total_lines": 2}
    archived = json.dumps({"status": "ok", "data": inner, "error": None})
    write(tmp_path, archive_ref("execute", "toolu_01"), archived)
    data = good(ctx, "Read", path="state/execute/tool_results/toolu_01.txt")
    lines = data["content"].splitlines()
    assert "     1\timport os" in "\n".join(lines) and len(lines) > 3
    assert any("status" in x for x in lines) and "rendered" in data
    # a plain-text archive is read as it is
    write(tmp_path, archive_ref("execute", "toolu_02"), "plain\ntext\n")
    assert good(ctx, "Read", path="state/execute/tool_results/toolu_02.txt")["total_lines"] == 2


# ---- Write ---------------------------------------------------------------------


def test_write_creates_then_updates(ctx, tmp_path):
    data = good(ctx, "Write", path="design/new/doc.md", content="# Title\nbody\n")
    assert data["created"] is True and data["size"] == len(b"# Title\nbody\n")
    assert data["content_head"] == "# Title\nbody" and data["path"] == "design/new/doc.md"
    assert (tmp_path / "design/new/doc.md").read_text() == "# Title\nbody\n"
    data = good(ctx, "Write", path="design/new/doc.md", content="# Title\nnew body\n")
    assert data["created"] is False and "-body" in data["diff"] and "+new body" in data["diff"]
    assert not list((tmp_path / "design/new").glob(".*.tmp"))  # atomic write left no temp file


def test_write_refuses_state_run_json_and_escapes(ctx, tmp_path):
    assert "state/" in bad(ctx, "Write", path="state/execute/tools.json", content="{}")
    assert "baton" in bad(ctx, "Write", path="run.json", content="{}")
    assert "baton" in bad(ctx, "Write", path="./run.json", content="{}")
    assert ".." in bad(ctx, "Write", path="design/../run.json", content="{}")
    assert ".." in bad(ctx, "Write", path="../x", content="x")
    assert "absolute" in bad(ctx, "Write", path="/etc/passwd", content="x")
    assert not (tmp_path / "run.json").exists() and not (tmp_path / "state").exists()


def test_write_refuses_a_symlink_into_state(ctx, tmp_path):
    (tmp_path / "state" / "execute").mkdir(parents=True)
    (tmp_path / "mem").symlink_to(tmp_path / "state" / "execute")
    assert "state/" in bad(ctx, "Write", path="mem/tools.json", content="{}")


# ---- Edit ----------------------------------------------------------------------


def test_edit_replaces_a_unique_string(ctx, tmp_path):
    write(tmp_path, "a.py", "def f():\n    return 1\n")
    data = good(ctx, "Edit", path="a.py", old_string="return 1", new_string="return 2")
    assert (data["applied"], data["replacements"]) == (True, 1) and "+    return 2" in data["diff"]
    assert (tmp_path / "a.py").read_text() == "def f():\n    return 2\n"


def test_edit_non_unique_and_replace_all(ctx, tmp_path):
    write(tmp_path, "a.py", "x = 1\nx = 1\nx = 1\n")
    message = bad(ctx, "Edit", path="a.py", old_string="x = 1", new_string="x = 2")
    assert "3 times" in message and "replace_all" in message
    assert (tmp_path / "a.py").read_text() == "x = 1\nx = 1\nx = 1\n"
    assert good(ctx, "Edit", path="a.py", old_string="x = 1", new_string="x = 2", replace_all=True)["replacements"] == 3
    assert (tmp_path / "a.py").read_text() == "x = 2\nx = 2\nx = 2\n"


def test_edit_failures(ctx, tmp_path):
    write(tmp_path, "a.py", "hello\n")
    message = bad(ctx, "Edit", path="a.py", old_string="goodbye", new_string="x")
    assert "not found" in message and "Read" in message
    assert "identical" in bad(ctx, "Edit", path="a.py", old_string="hello", new_string="hello")
    assert "not found" in bad(ctx, "Edit", path="missing.py", old_string="a", new_string="b")
    assert "state/" in bad(ctx, "Edit", path="state/init/log.jsonl", old_string="a", new_string="b")
    assert "run.json" in bad(ctx, "Edit", path="run.json", old_string="a", new_string="b")
    assert ".." in bad(ctx, "Edit", path="../a.py", old_string="a", new_string="b")


# ---- LS, Glob, Grep ------------------------------------------------------------


def test_ls_lists_sorted_entries(ctx, tmp_path):
    write(tmp_path, "b.txt", "")
    write(tmp_path, "a/x.txt", "")
    data = good(ctx, "LS")
    assert data == {"path": ".", "entries": ["a/", "b.txt"], "total": 2}
    assert good(ctx, "LS", path="a")["entries"] == ["x.txt"]
    assert "Read" in bad(ctx, "LS", path="b.txt")
    assert "not found" in bad(ctx, "LS", path="zzz")


def test_ls_caps_entries_with_exact_total(ctx, tmp_path):
    for i in range(520):
        (tmp_path / f"f{i:04d}").touch()
    data = good(ctx, "LS", path=".")
    assert len(data["entries"]) == 500 and data["total"] == 520 and data["entries"][0] == "f0000"


def test_glob_matches_recursively(ctx, tmp_path):
    for rel in ["a.py", "pkg/b.py", "pkg/sub/c.py", "pkg/d.md", "notes.md"]:
        write(tmp_path, rel, "")
    assert good(ctx, "Glob", pattern="**/*.py")["matches"] == ["a.py", "pkg/b.py", "pkg/sub/c.py"]
    assert good(ctx, "Glob", pattern="*.py")["matches"] == ["a.py"]
    assert good(ctx, "Glob", pattern="*.{py,md}")["matches"] == ["a.py", "notes.md"]
    data = good(ctx, "Glob", pattern="*.py", path="pkg")
    assert data["matches"] == ["pkg/b.py"] and data["total"] == 1  # relative to the scenario folder
    assert ".." in bad(ctx, "Glob", pattern="../*")
    assert "absolute" in bad(ctx, "Glob", pattern="/etc/*")


def test_glob_caps_matches(ctx, tmp_path):
    for i in range(510):
        (tmp_path / f"s{i:04d}.json").touch()
    data = good(ctx, "Glob", pattern="*.json")
    assert len(data["matches"]) == 500 and data["total"] == 510


def test_grep_finds_matches(ctx, tmp_path):
    write(tmp_path, "a.py", "import os\ndef Foo():\n    pass\n")
    write(tmp_path, "b/c.md", "foo bar\n")
    data = good(ctx, "Grep", pattern=r"foo")
    assert data["matches"] == [{"file": "b/c.md", "line": 1, "text": "foo bar"}] and data["total"] == 1
    data = good(ctx, "Grep", pattern=r"foo", case_insensitive=True)
    assert [(m["file"], m["line"]) for m in data["matches"]] == [("a.py", 2), ("b/c.md", 1)]
    assert good(ctx, "Grep", pattern="foo", glob="*.py", case_insensitive=True)["total"] == 1
    assert good(ctx, "Grep", pattern="pass", path="a.py")["matches"][0]["line"] == 3
    assert "invalid regular expression" in bad(ctx, "Grep", pattern="(unclosed")


def test_grep_caps_truncates_and_skips(ctx, tmp_path):
    write(tmp_path, "many.txt", "hit\n" * 250)
    write(tmp_path, "long.txt", "z" * 5000 + "hit" + "z" * 5000 + "\n")
    (tmp_path / "blob.bin").write_bytes(b"hit\x00" * 10)
    with open(tmp_path / "huge.txt", "wb") as fh:
        fh.truncate(21 * 1024 * 1024)  # sparse: over the 20 MB limit without writing it
    data = good(ctx, "Grep", pattern="hit")
    assert len(data["matches"]) == 200 and data["total"] == 251
    assert any("blob.bin" in s and "binary" in s for s in data["skipped"])
    assert any("huge.txt" in s and "20 MB" in s for s in data["skipped"])
    long_match = good(ctx, "Grep", pattern="hit", path="long.txt")["matches"][0]
    assert len(long_match["text"]) <= 302 and "hit" in long_match["text"]


# ---- symlinks out of the folder -----------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the scenario, linked from inside it as `link` (and a file as `leak.txt`)."""
    scenario = tmp_path / "scenario"
    secret = tmp_path / "outside"
    secret.mkdir()
    scenario.mkdir()
    (secret / "secret.txt").write_text("top secret token\n")
    (scenario / "link").symlink_to(secret)
    (scenario / "leak.txt").symlink_to(secret / "secret.txt")
    write(scenario, "ok.txt", "fine\n")
    return scenario


def test_symlinks_out_of_the_folder_are_refused(outside):
    ctx = ToolContext(root=outside, agent="execute", iteration=1)
    for name, tool_input in [
        ("Read", {"path": "link/secret.txt"}),
        ("Read", {"path": "leak.txt"}),
        ("Write", {"path": "link/new.txt", "content": "x"}),
        ("Write", {"path": "leak.txt", "content": "x"}),
        ("Edit", {"path": "leak.txt", "old_string": "top", "new_string": "x"}),
        ("LS", {"path": "link"}),
        ("Glob", {"pattern": "*", "path": "link"}),
        ("Grep", {"pattern": "secret", "path": "link"}),
        ("Grep", {"pattern": "secret", "path": "leak.txt"}),
    ]:
        assert "symlink" in bad(ctx, name, **tool_input), name
    assert (outside.parent / "outside" / "secret.txt").read_text() == "top secret token\n"
    assert not (outside.parent / "outside" / "new.txt").exists()


def test_walks_do_not_follow_symlinks_out(outside):
    ctx = ToolContext(root=outside, agent="execute", iteration=1)
    assert good(ctx, "Glob", pattern="**/*")["matches"] == ["ok.txt"]
    assert good(ctx, "Glob", pattern="**/*.txt")["matches"] == ["ok.txt"]
    assert good(ctx, "Grep", pattern="secret")["total"] == 0
    assert good(ctx, "LS")["entries"] == ["leak.txt@", "link@", "ok.txt"]  # names only, symlinks never followed


# ---- Bash ----------------------------------------------------------------------


def test_bash_is_disabled_by_default(ctx):
    message = bad(ctx, "Bash", command="echo hi")
    assert "disabled" in message and "[agents.execute]" in message and "BATON_EXECUTE_BASH_ENABLED=1" in message


def test_bash_runs_in_the_folder(bash_ctx, tmp_path):
    write(tmp_path, "here.txt", "")
    data = good(bash_ctx, "Bash", command="ls; echo oops >&2; exit 3")
    assert data["exit_code"] == 3 and "here.txt" in data["stdout"] and data["stderr"] == "oops\n"
    assert data["timed_out"] is False


@pytest.mark.slow  # waits for a real timeout
def test_bash_timeout_kills_the_process_group(tmp_path):
    # Unconfined, where the child's host pid can be seen; in the sandbox: test_bash_sandbox.py
    ctx = ToolContext(
        root=tmp_path, agent="execute", iteration=1,
        settings=ToolSettings(bash_enabled=True, bash_timeout_s=20, bash_sandbox="none"),
    )
    pid_file = tmp_path / "child.pid"
    data = good(ctx, "Bash", command=f"sleep 60 & echo $! > {pid_file}; wait", timeout_s=1)
    assert data["timed_out"] is True and data["exit_code"] is None and "timed out" in data["note"]
    assert not running(int(pid_file.read_text()))  # the sleeping grandchild is gone, not orphaned


def test_bash_caps_huge_output(tmp_path, sandbox):
    ctx = ToolContext(
        root=tmp_path, agent="execute", iteration=1,
        settings=ToolSettings(bash_enabled=True, output_cap_chars=2000, bash_sandbox=sandbox),  # type: ignore[arg-type]
    )
    data = good(ctx, "Bash", command="yes | head -c 20000000; echo done >&2")
    assert data["exit_code"] == 0 and len(data["stdout"]) < 2500
    assert "bytes omitted" in data["stdout"] and data["stdout"].startswith("y\ny\n")
    assert data["stderr"] == "done\n"


@pytest.mark.slow  # waits for a real timeout
def test_bash_endless_output_stays_bounded(tmp_path, sandbox):
    ctx = ToolContext(
        root=tmp_path, agent="execute", iteration=1,
        settings=ToolSettings(bash_enabled=True, output_cap_chars=1000, bash_sandbox=sandbox),  # type: ignore[arg-type]
    )
    data = good(ctx, "Bash", command="yes", timeout_s=1)
    assert data["timed_out"] is True and len(data["stdout"]) < 1500


def test_bash_does_not_see_secrets(tmp_path, monkeypatch):
    # Unconfined, where harmless variables pass; the sandbox passes none (test_bash_sandbox.py)
    ctx = ToolContext(
        root=tmp_path, agent="execute", iteration=1, settings=ToolSettings(bash_enabled=True, bash_sandbox="none")
    )
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-should-not-leak")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_should_not_leak")
    monkeypatch.setenv("BATON_HARMLESS", "visible")
    data = good(ctx, "Bash", command="env")
    assert "should-not-leak" not in data["stdout"] and "should_not_leak" not in data["stdout"]
    assert "BATON_HARMLESS=visible" in data["stdout"]


@pytest.mark.slow  # waits for a real timeout
def test_bash_timeout_is_capped_by_config(tmp_path, sandbox):
    ctx = ToolContext(
        root=tmp_path, agent="execute", iteration=1,
        settings=ToolSettings(bash_enabled=True, bash_timeout_s=1, bash_sandbox=sandbox),  # type: ignore[arg-type]
    )
    assert good(ctx, "Bash", command="sleep 5", timeout_s=100)["timed_out"] is True
    assert "positive" in bad(ctx, "Bash", command="true", timeout_s=-1)


# ---- TodoWrite -----------------------------------------------------------------


def test_todowrite_stores_the_list(ctx):
    todos = [{"content": "write tools", "status": "completed"}, {"content": "write checkers", "status": "in_progress"}]
    assert good(ctx, "TodoWrite", todos=todos)["todos"] == todos
    assert ctx.memory["todos"] == todos
    assert "status" in bad(ctx, "TodoWrite", todos=[{"content": "x", "status": "done"}])
    assert "list" in bad(ctx, "TodoWrite", todos="x")


# ---- the contract with compression -------------------------------------------


def test_results_compress_to_their_facts(bash_ctx, tmp_path):
    write(tmp_path, "design/spec.md", "".join(f"rule {i}\n" for i in range(300)))
    calls = [
        ("Read", {"path": "design/spec.md"}, "design/spec.md"),
        ("Write", {"path": "out/w.md", "content": "x\n" * 3000}, "out/w.md"),
        (
            "Edit",
            {"path": "design/spec.md", "old_string": "rule 7\n", "new_string": "rule seven\n" * 400},
            "design/spec.md",
        ),
        ("LS", {"path": "design"}, "design"),
        ("Glob", {"pattern": "**/*.md"}, "**/*.md"),
        ("Grep", {"pattern": "rule 1"}, "design/spec.md"),
        ("Bash", {"command": f"{sys.executable} -c 'print(\"spam\\n\" * 3000)'"}, "exit code: 0"),
        ("TodoWrite", {"todos": [{"content": "step " * 400, "status": "in_progress"}]}, "TodoWrite"),
    ]
    shrunk = set()
    for i, (name, tool_input, expected) in enumerate(calls):
        result = call(bash_ctx, name, **tool_input)
        assert result.status == "ok", result.error
        use = ToolUseBlock(id=f"toolu_{i}", name=name, input=tool_input)
        block = ToolResultBlock(tool_use_id=use.id, content=result.text())
        ref = archive_ref("execute", use.id)
        compressed = compress_result(use, block, ref, cap_chars=500)
        assert expected in compressed.text, (name, compressed.text)
        if compressed is not block:  # results already smaller than their form stay as they are
            shrunk.add(name)
            assert ref in compressed.text and len(compressed.text) < len(block.text)
            assert '"status"' not in compressed.text, name  # the tool's own form, not the generic one
    assert {"Read", "Edit", "Grep", "Bash", "TodoWrite"} <= shrunk


def test_refusals_are_error_results_not_exceptions(ctx):
    for tool in FILE_TOOLS:
        result = tool.run({"path": "../../etc/passwd", "pattern": "x", "command": "x", "todos": []}, ctx)
        assert isinstance(result, ToolResult)
    assert TOOLS["Read"].run("not a dict", ctx).status == "error"  # type: ignore[arg-type]
    assert "missing required input 'path'" in bad(ctx, "Read")


def test_bash_cut_does_not_split_characters(tmp_path, sandbox):
    ctx = ToolContext(
        root=tmp_path, agent="execute", iteration=1,
        settings=ToolSettings(bash_enabled=True, output_cap_chars=51, bash_sandbox=sandbox),  # type: ignore[arg-type]
    )
    data = good(ctx, "Bash", command=f"{sys.executable} -c \"print('é€😀' * 500)\"")
    assert "bytes omitted" in data["stdout"] and "\ufffd" not in data["stdout"]


@pytest.mark.parametrize("tool, args", [("LS", {"path": "."}), ("Glob", {"pattern": "*"}),
                                        ("Grep", {"pattern": "x"})])
def test_a_file_name_that_is_not_utf8_gives_a_result_that_can_be_stored(ctx, tmp_path, tool, args):
    """A name of bytes that are not UTF-8 (a model can make one with Bash) came back as surrogates, and the
    result could not be encoded when the step stored it: the step failed again on every retry."""
    (tmp_path / os.fsdecode(b"bad\xff.txt")).write_text("x\n")
    text = run_tool(TOOLS, tool, args, ctx).text()
    text.encode("utf-8")  # what storing it does
    assert "bad" in text

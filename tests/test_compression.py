"""Per-tool compression of older tool results and the size cap."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from context.compression import archive_ref, cap_result, footer, is_compressed
from context.messages import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock, parse_message
from context.per_tool_compression import compress_result
from context.tool_results import BashData, ReadData, ToolEnvelope

REF = archive_ref("execute", "toolu_01")
TRAJECTORIES = Path(__file__).resolve().parents[2] / "shared" / "trajectories"
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


def use(name: str, **inp) -> ToolUseBlock:
    return ToolUseBlock(id="toolu_01", name=name, input=inp)


def res(content, is_error: bool = False) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id="toolu_01", content=content, is_error=is_error)


def envelope(data=None, status="ok", error=None) -> str:
    return json.dumps({"status": status, "data": data, "error": error})


def squeeze(tool, result, **kw) -> ToolResultBlock:
    """compress_result plus the invariants every changed result must satisfy."""
    out = compress_result(tool, result, REF, **kw)
    if out is not result:
        assert out.tool_use_id == result.tool_use_id
        assert out.is_error == result.is_error
        assert isinstance(out.content, str)
        assert out.text.endswith(footer(REF))
        assert len(out.text) < len(result.text) or not isinstance(result.content, str)
    return out


# --------------------------------------------------------------------------- archive_ref


def test_archive_ref_sanitises_the_id():
    assert archive_ref("execute", "toolu_01AbC-9") == "state/execute/tool_results/toolu_01AbC-9.txt"
    assert archive_ref("init", "../../etc/pass wd") == "state/init/tool_results/______etc_pass_wd.txt"
    assert archive_ref("init", "") == "state/init/tool_results/_.txt"
    assert archive_ref("../x", "a") == "state/___x/tool_results/a.txt"


# --------------------------------------------------------------------------- baton JSON results


def test_json_read_keeps_path_range_mtime_and_first_lines():
    content = "\n".join(f"line {i}" for i in range(1, 501))
    data = ReadData(path="/s/tools.py", start_line=1, end_line=500, total_lines=900, mtime=1700000000.5,
                    modified_externally=True, content=content)
    out = squeeze(use("Read", path="/s/tools.py"), res(envelope(data.model_dump())))
    assert "Read /s/tools.py: lines 1-500 of 900" in out.text
    assert "mtime: 1700000000.5, modified_externally: true" in out.text
    assert "line 20\n" in out.text and "line 21\n" not in out.text
    short = squeeze(use("read"), res(envelope(data.model_dump())), read_lines=3)
    assert "line 3\n" in short.text and "line 4\n" not in short.text


def test_json_bash_summarises_stdout_and_keeps_stderr_tail():
    stdout = "\n".join(f"out {i}" for i in range(1, 101))
    stderr = "\n".join(f"err {i}" for i in range(1, 51))
    data = BashData(command="pytest -q", exit_code=1, stdout=stdout, stderr=stderr)
    out = squeeze(use("Bash", command="pytest -q"), res(envelope(data.model_dump())))
    text = out.text
    assert text.startswith("$ pytest -q\nexit code: 1\n")
    assert "stdout (100 lines, first 5 and last 5)" in text
    assert (
        "out 5\n" in text
        and "out 6\n" not in text
        and "out 95\n" not in text
        and "out 96\n" in text
        and "out 100\n" in text
    )
    assert "... (90 lines omitted) ..." in text
    assert "stderr (last 20 of 50 lines)" in text and "err 31\n" in text and "err 30\n" not in text


def test_json_bash_timeout():
    data = {"command": "sleep 999", "exit_code": None, "stdout": "x\n" * 300, "stderr": "", "timed_out": True}
    assert "exit code: None (timed out)" in squeeze(use("bash"), res(envelope(data))).text


@pytest.mark.parametrize("tool,key,subject", [("LS", "entries", "path"), ("Glob", "matches", "pattern")])
def test_json_ls_and_glob_count_and_first_ten(tool, key, subject):
    entries = [f"src/module_{i:03d}.py" for i in range(50)]
    data = {subject: "src/**/*.py", key: entries, "total": 50}
    text = squeeze(use(tool), res(envelope(data))).text
    assert f"{tool} src/**/*.py: 50" in text
    assert "src/module_009.py" in text and "src/module_010.py" not in text


def test_json_grep_total_and_first_five_with_file_line():
    matches = [{"file": f"pkg/f{i}.py", "line": i + 1, "text": f"    def target_{i}():"} for i in range(30)]
    text = squeeze(use("Grep"), res(envelope({"pattern": "def target", "matches": matches, "total": 30}))).text
    assert "Grep def target: 30 matches" in text
    assert "pkg/f0.py:1: def target_0():" in text and "pkg/f4.py:5:" in text and "pkg/f5.py" not in text


@pytest.mark.parametrize("tool", ["Edit", "MultiEdit"])
def test_json_edit_keeps_applied_replacements_and_diff_head(tool):
    diff = "\n".join(["--- a/x.py", "+++ b/x.py"] + [f"+added {i}" for i in range(40)])
    data = {"path": "/s/x.py", "applied": True, "replacements": 3, "diff": diff}
    text = squeeze(use(tool), res(envelope(data))).text
    assert "Edit /s/x.py: applied, 3 replacement(s)" in text
    assert "+added 7" in text and "+added 8" not in text  # 2 header lines + 8 = first 10


def test_json_write_created_and_updated():
    body = "\n".join(f"row {i}" for i in range(100))
    created = {"path": "/s/new.py", "created": True, "size": 4096, "diff": "", "content_head": body}
    text = squeeze(use("Write"), res(envelope(created))).text
    assert "Write /s/new.py: created, 4096 bytes" in text and "row 19" in text and "row 20" not in text
    diff = "\n".join(f"-old {i}\n+new {i}" for i in range(50))
    updated = {"path": "/s/old.py", "created": False, "size": 10, "diff": diff, "content_head": body}
    text = squeeze(use("Write"), res(envelope(updated))).text
    assert "Write /s/old.py: updated, 10 bytes" in text and "+new 4" in text and "-old 5" not in text


def test_json_todowrite_one_line_recap():
    todos = [{"content": f"task {i} " + "x" * 80, "status": "completed"} for i in range(5)]
    todos += [{"content": "write the checker", "status": "in_progress"}, {"content": "eval", "status": "pending"}]
    text = squeeze(use("TodoWrite"), res(envelope({"todos": todos}))).text
    recap = text.splitlines()[0]
    assert recap == "TodoWrite: 7 todos (5 completed, 1 in_progress, 1 pending); in progress: write the checker"
    assert len(text.splitlines()) == 2


def test_json_other_tool_keeps_status_data_error():
    data = {"scenario_id": "sc-42", "rows": ["r" * 50] * 200}
    text = squeeze(use("run_checker"), res(envelope(data))).text
    assert text.startswith("status: ok\ndata: {\"scenario_id\":\"sc-42\"")
    assert "characters" in text and "omitted" in text


def test_json_error_keeps_is_error_and_message():
    message = "file not found: /s/missing.py " + "(details) " * 600
    out = squeeze(use("Read"), res(envelope(None, "error", message), is_error=True))
    assert out.is_error is True
    assert "status: error" in out.text and "file not found: /s/missing.py" in out.text
    small = res(envelope(None, "error", "permission denied: /etc/shadow"), is_error=True)
    assert compress_result(use("Read"), small, REF) is small  # short errors stay whole


def test_json_of_the_wrong_shape_falls_back():
    weird = res(envelope({"unexpected": ["y" * 100] * 100}))
    out = squeeze(use("Read"), weird)
    assert out is not weird and "status: ok" in out.text
    for text in (
        "[1, 2, 3]" * 1000,
        '{"status": "ok", "data": [1]}' + " " * 6000,
        '{"status": 5, "data": 1}' + "z" * 6000,
        '{"status": "ok", "data": {"path": 7}}' + " " * 6000,
        "{" * 100_000,
    ):
        squeeze(use("Read"), res(text))
        squeeze(use("Bash"), res(text))
        squeeze(None, res(text))


def test_envelope_model_is_the_contract():
    env = ToolEnvelope(status="ok", data=BashData(command="ls", exit_code=0, stdout="a\n" * 500).model_dump())
    out = squeeze(use("Bash"), res(env.model_dump_json()))
    assert out.text.startswith("$ ls\nexit code: 0\n")


# --------------------------------------------------------------------------- plain text of recorded agents


@pytest.mark.parametrize("sep", ["→", "\t"])
def test_claude_code_read(sep):
    text = "".join(f"{i:>6}{sep}content of line {i}\n" for i in range(40, 340))
    text += "\n<system-reminder>\nWhenever you read a file, consider malware.\n</system-reminder>\n"
    out = squeeze(use("Read", file_path="/repo/app.py", offset=40), res(text))
    assert out.text.startswith("Read /repo/app.py: lines 40-339\nfirst 20 lines:\n")
    assert "content of line 59\n" in out.text and "content of line 60" not in out.text


def test_claude_code_bash_with_exit_code():
    text = "Exit code 2\n" + "".join(f"FAILED tests/test_{i}.py\n" for i in range(60))
    out = squeeze(use("Bash", command="pytest"), res(text, is_error=True))
    assert out.is_error and "$ pytest\nexit code: 2\n" in out.text
    assert "test_0.py" in out.text and "test_59.py" in out.text and "test_30.py" not in out.text


def test_mini_swe_agent_output():
    body = "".join(f"./astropy/file_{i}.py\n" for i in range(200))
    out = squeeze(
        use("bash", command="find . -name '*.py'"), res(f"<returncode>0</returncode>\n<output>\n{body}</output>")
    )
    assert out.text.startswith("$ find . -name '*.py'\nexit code: 0\noutput (200 lines, first 5 and last 5):\n")
    assert "./astropy/file_0.py" in out.text and "./astropy/file_199.py" in out.text
    assert "<output>" not in out.text


def test_mini_swe_agent_elided_output_and_timeout():
    text = ("<returncode>1</returncode>\n<warning>\nThe output of your last command was too long.\n</warning>"
            "<output_head>\n" + "head line\n" * 50 + "</output_head>\n<elided_chars>\n27632 characters elided\n"
            "</elided_chars>\n<output_tail>\n" + "tail line\n" * 49 + "Traceback: boom\n</output_tail>")
    out = squeeze(use("bash", command="pytest"), res(text))
    assert "exit code: 1 (the harness already elided 27632 chars mid-output)" in out.text
    assert out.text.splitlines()[-2] == "Traceback: boom"
    timed = ("The last command <command>pytest</command> timed out and has been killed.\n"
             "The output of the command was:\n <output>\n" + "....\n" * 300 + "</output>\nPlease try another command.")
    assert "exit code: timed out" in squeeze(use("bash", command="pytest"), res(timed)).text


def test_claude_code_grep_content_and_files_modes():
    text = "\n".join(f"lib/app/mod_{i}.ex:{i * 10}:  def handle_event(x) do" for i in range(20))
    out = squeeze(use("Grep", pattern="handle_event", path="lib", output_mode="content"), res(text))
    assert out.text.startswith("Grep handle_event: 20 matches\nfirst 5:\nlib/app/mod_0.ex:0: def handle_event")
    assert "lib/app/mod_4.ex:40:" in out.text and "mod_5.ex" not in out.text
    # one file: "line:text" plus context lines "line-text" and "--" separators
    one = "\n".join(f"{i}:match {i}\n{i + 1}-context\n--" for i in range(0, 300, 3))
    out = squeeze(use("Grep", pattern="match", path="/repo/a.css"), res(one))
    assert "Grep match: 100 matches" in out.text and "/repo/a.css:3: match 3" in out.text
    files = "Found 40 files\n" + "\n".join(f"/repo/lib/file_{i}.ex" for i in range(40))
    out = squeeze(use("Grep", pattern="Ash", output_mode="files_with_matches"), res(files))
    assert "Grep Ash: 40 matches" in out.text and "/repo/lib/file_4.ex" in out.text and "file_5.ex" not in out.text


def test_claude_code_glob_and_ls():
    text = "\n".join(f"/repo/lib/spotter_web/live/view_{i}.ex" for i in range(30))
    out = squeeze(use("Glob", pattern="lib/**/*.ex"), res(text))
    assert out.text.startswith("Glob lib/**/*.ex: 30 entries\nfirst 10:\n/repo/lib/spotter_web/live/view_0.ex")
    assert "view_9.ex" in out.text and "view_10.ex" not in out.text
    tree = "- /repo/\n" + "".join(f"  - file_{i}.py\n" for i in range(40))
    assert "LS /repo: 41 entries" in squeeze(use("LS", path="/repo"), res(tree)).text


def test_claude_code_edit_and_write_confirmations():
    snippet = "".join(f"{i:>6}→code {i}\n" for i in range(1, 60))
    text = ("The file /repo/a.ex has been updated. Here's the result of running `cat -n` on a snippet of the "
            "edited file:\n" + snippet)
    out = squeeze(use("Edit", file_path="/repo/a.ex", old_string="a", new_string="b"), res(text))
    assert out.text.startswith("Edit /repo/a.ex: applied, 1 replacement\n") and "code 10" in out.text
    assert "code 11" not in out.text
    multi = squeeze(use("MultiEdit", file_path="/repo/a.ex", edits=[{}, {}, {}]), res(text))
    assert "applied, 3 edit(s)" in multi.text
    content = "x = 1\n" * 300
    out = squeeze(use("Write", file_path="/repo/a.ex", content=content), res(text))
    assert out.text.startswith("Write /repo/a.ex: updated, 1800 bytes\n")
    created = res("File created successfully at: /repo/b.ex")
    assert compress_result(use("Write", file_path="/repo/b.ex", content=content), created, REF) is created


def test_claude_code_edit_error_keeps_message():
    text = (
        "<tool_use_error>String to replace not found in file.\nString: " + "defp foo do\n" * 200 + "</tool_use_error>"
    )
    out = squeeze(use("Edit", file_path="/repo/otel.ex"), res(text, is_error=True))
    assert out.is_error
    assert "Edit /repo/otel.ex: NOT applied" in out.text and "String to replace not found in file." in out.text


def test_claude_code_todowrite_uses_the_input():
    todos = [{"content": "read spec", "status": "completed", "activeForm": "Reading"},
             {"content": "build compression", "status": "in_progress", "activeForm": "Building"}]
    text = "Todos have been modified successfully. Ensure that you continue to use the todo list " * 3
    out = squeeze(use("TodoWrite", todos=todos), res(text))
    assert out.text.splitlines()[0] == "TodoWrite: 2 todos (1 completed, 1 in_progress); in progress: build compression"


def test_tau_bench_json_keeps_ids_in_the_head():
    flights = [
        {"flight_number": f"HAT{i:03d}", "origin": "JFK", "destination": "SFO", "price": 100 + i} for i in range(80)
    ]
    record = {"reservation_id": "JG7FMM", "user_id": "omar_davis_3817", "flights": flights,
              "payment_history": [{"payment_id": "credit_card_2929732", "amount": 7136}]}
    out = squeeze(use("get_reservation_details", reservation_id="JG7FMM"), res(json.dumps(record)))
    assert out.text.startswith('{"reservation_id": "JG7FMM", "user_id": "omar_davis_3817"')
    assert "credit_card_2929732" in out.text  # the tail survives too
    small = res(json.dumps({"reservation_id": "JG7FMM", "status": "cancelled"}))
    assert compress_result(use("cancel_reservation"), small, REF) is small


# --------------------------------------------------------------------------- general behaviour


def test_deterministic():
    text = "".join(f"{i:>6}→line {i}\n" for i in range(1, 400))
    tool = use("Read", file_path="/a.py")
    first = compress_result(tool, res(text), REF)
    again = compress_result(use("Read", file_path="/a.py"), res(text), REF)
    assert first.text == again.text
    assert first.model_dump_json() == again.model_dump_json()


def test_small_and_empty_results_are_returned_unchanged():
    for tool in (use("Bash", command="true"), use("Read", file_path="/x"), use("whatever"), None):
        for block in (res(""), res("ok"), res("     1→x\n"), res([])):
            assert compress_result(tool, block, REF) is block
            assert cap_result(block, REF) is block


def test_compressing_twice_is_a_no_op():
    once = squeeze(use("Bash", command="ls"), res("f\n" * 500))
    assert is_compressed(once)
    assert compress_result(use("Bash", command="ls"), once, REF) is once


@pytest.mark.slow  # a 50 MB result
def test_fifty_megabytes():
    many_lines = "0123456789abcdef" * 4 + "\n"
    big = many_lines * (50_000_000 // len(many_lines))
    one_line = "x" * 50_000_000
    for text in (big, one_line):
        block = res(text)
        capped = cap_result(block, REF)
        assert len(capped.text) < 2_500 and REF in capped.text
        for tool in (use("Bash", command="cat big"), use("Read", file_path="/big"), use("Grep", pattern="x"),
                     use("Glob", pattern="*"), use("tau_tool"), None):
            out = compress_result(tool, block, REF)
            assert len(out.text) < 10_000 and out.text.endswith(footer(REF))
    wrapped = res(envelope({"command": "yes", "exit_code": 0, "stdout": big, "stderr": big, "timed_out": False}))
    out = compress_result(use("Bash"), wrapped, REF)
    assert len(out.text) < 10_000 and "exit code: 0" in out.text


def test_non_utf8_and_binary_text():
    binary = bytes(range(256)) * 100
    block = res(binary)
    out = squeeze(use("Bash", command="cat /bin/ls"), block)
    out.text.encode("utf-8")  # always encodable
    surrogates = res("bad \ud800 surrogate\n" * 1000)
    out = squeeze(use("Read", file_path="/x"), surrogates)
    out.text.encode("utf-8")
    capped = cap_result(res("\udcff" * 20_000), REF)
    capped.text.encode("utf-8")


def test_list_content_with_images():
    under = res([{"type": "text", "text": "screenshot of the page"}, IMAGE])
    assert cap_result(under, REF) is under  # images kept while under the cap
    over = res([TextBlock(text="a" * 4000), ImageBlock(**IMAGE), TextBlock(text="b" * 4000)])
    capped = cap_result(over, REF)
    assert isinstance(capped.content, str)
    assert capped.text.startswith("a" * 1000 + "\n[...") and capped.text.endswith("b" * 1000)
    assert "1 image(s) dropped" in capped.text and REF in capped.text
    compressed = compress_result(use("screenshot"), under, REF)
    assert isinstance(compressed.content, str) and "1 image(s) omitted" in compressed.text
    assert compressed.text.endswith(footer(REF))


def test_cap_result_marker_counts_and_passthrough():
    text = "".join(f"line {i:05d}\n" for i in range(2000))  # 22,000 chars
    block = res(text, is_error=True)
    capped = cap_result(block, REF)
    assert capped.is_error and capped.tool_use_id == "toolu_01"
    assert capped.text.startswith(text[:1000]) and capped.text.endswith(text[-1000:])
    assert f"[... {len(text) - 2000} characters ({text[1000:-1000].count(chr(10))} line breaks) omitted" in capped.text
    assert REF in capped.text
    assert cap_result(res("x" * 5000), REF).text == "x" * 5000
    assert len(cap_result(res(text), REF, cap_chars=100, head=10, tail=10).text) < 300


# --------------------------------------------------------------------------- recorded trajectories


def _trajectory_pairs():
    for path in sorted(TRAJECTORIES.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                run = json.loads(line)
                previous = None
                for raw in run["messages"]:
                    message = parse_message(raw)
                    if message.role == "user":
                        uses = {u.id: u for u in previous.tool_uses} if previous is not None else {}
                        for result in message.tool_results:
                            yield path.name, uses.get(result.tool_use_id), result
                    previous = message


@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason="shared trajectories not available")
@pytest.mark.slow  # every recorded run
def test_every_recorded_tool_result():
    seen, changed, files = 0, 0, set()
    for name, tool, result in _trajectory_pairs():
        ref = archive_ref("execute", result.tool_use_id)
        out = compress_result(tool, result, ref)
        seen += 1
        files.add(name)
        if out is result:
            continue
        changed += 1
        assert len(out.text) <= len(result.text), (name, result.tool_use_id)
        assert ref in out.text and out.is_error == result.is_error
        assert compress_result(tool, result, ref).text == out.text
        capped = cap_result(result, ref)
        assert capped is result or (ref in capped.text and len(capped.text) < len(result.text))
    assert len(files) == 3 and seen > 2000 and changed > 300


def test_run_evaluation_results_compress_to_totals_and_first_failures():
    data = {
        "iteration": 1,
        "total": 10,
        "passed": 5,
        "failed": 5,
        "success_rate": 0.5,
        "failures_per_layer": {"L1": 2, "L2": 1, "L3": 1, "L4": 1},
        "report_path": "execution_outputs/iteration_1/report.json",
        "failures": [{"sample": f"s{i}", "layer": "L1", "reason": "R2 and R3 overlap " * 40} for i in range(7)],
    }
    use = ToolUseBlock(id="toolu_e", name="RunEvaluation", input={})
    result = ToolResultBlock(tool_use_id="toolu_e", content=json.dumps({"status": "ok", "data": data, "error": None}))
    text = compress_result(use, result, archive_ref("execute", "toolu_e")).text
    assert "5/10 passed" in text and "L1=2" in text and "report.json" in text
    assert "s4 [L1]" in text and "s5 [L1]" not in text and "2 more failures" in text
    assert len(text) < len(result.text) / 3

"""What the loop takes as the truth is out of Bash's reach by any path (issue 30, items 3 and 5).

A command runs on a copy of the scenario folder in the sandbox's own disk (a sized tmpfs); afterwards baton
applies back what the file tools may write, through the tool call's journal, and nothing else: no rename moves
a report, no link or FIFO reaches the folder, no fill goes past the bound. Each attack below worked on the
code before (a read-write bind of the folder with read-only binds over single files), driven as in
tests/test_sandbox_escapes.py by a worker stand-in (tests/escape_driver.py) with secrets in its environment.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from agents.config import ToolSettings
from agents.tools.base import ToolContext, ToolResult
from agents.tools.bash import BashTool
from agents.tools.handoff import SubmitHandoff
from proving.sandbox.bwrap import SandboxUnavailable, usable_bwrap
from scenarios.journal import Journal

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "tests" / "escape_driver.py"
REPORT = json.dumps({"iteration": 1, "total": 10, "passed": 8, "failed": 2, "success_rate": 0.8,
                     "failures_per_layer": {"L1": 1, "L2": 0, "L3": 1, "L4": 0}}) + "\n"
RESULTS = '{"sample": "s1", "passed": false}\n'
FORGED = json.dumps({"iteration": 1, "total": 10, "passed": 10, "failed": 0, "success_rate": 1.0,
                     "failures_per_layer": {"L1": 0, "L2": 0, "L3": 0, "L4": 0}})
CLAIM = {"iteration": 1, "execution_output_dir": "execution_outputs/iteration_1", "success_rate": 1.0,
         "totals": {"samples": 10, "passed": 10, "failed": 0}, "failures_per_layer": {"L1": 0},
         "layer1_problems_summary": [], "recommendation": "done: every sample passes"}

try:
    usable_bwrap()
    NO_BWRAP = ""
except SandboxUnavailable as exc:
    NO_BWRAP = str(exc)
needs_bwrap = pytest.mark.skipif(bool(NO_BWRAP), reason=f"needs a working bubblewrap: {NO_BWRAP}")


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    """scenarios/demo, evaluated once (a report of 8/10, its results and a trace), and scenarios/victim beside it
    with reports of two iterations; a credentials file beside the scenarios folder."""
    scenarios = tmp_path / "scenarios"
    roots = {}
    for name, iterations in (("demo", 1), ("victim", 2)):
        root = scenarios / name
        for n in range(1, iterations + 1):
            out = root / "execution_outputs" / f"iteration_{n}"
            for folder in ("tools", "traces", "samples"):
                (out / folder).mkdir(parents=True)
            (out / "report.json").write_text(REPORT, encoding="utf-8")
            (out / "results.jsonl").write_text(RESULTS, encoding="utf-8")
            (out / "traces" / "s1.json").write_text("{}\n", encoding="utf-8")
            (out / "tools" / "tools.py").write_text("def f():\n    return 1\n", encoding="utf-8")
        (root / "design").mkdir()
        (root / "design" / "spec.md").write_text("# spec\n", encoding="utf-8")
        (root / "handoffs" / "iteration_1").mkdir(parents=True)
        (root / "state").mkdir()
        (root / "scenario.toml").write_text("[agents.execute]\n", encoding="utf-8")
        (root / "run.json").write_text("{}\n", encoding="utf-8")
        roots[name] = root
    secret = tmp_path / "credentials.txt"
    secret.write_text("password=hunter2\n", encoding="utf-8")
    return {**roots, "secret": secret}


def drive(root: Path, command: str) -> dict[str, Any]:
    """Bash run by the worker stand-in; its envelope."""
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-api03-TRUTHtest", "BATON_SAMPLE_SERVER": "1"}
    done = subprocess.run([sys.executable, str(DRIVER), "bash", str(root), command], env=env, capture_output=True,
                          text=True, timeout=180, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: a file's bytes, a link's target, a folder or what else it is."""
    seen: dict[str, bytes | str] = {}
    for here, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(here, name)
            mode = path.lstat().st_mode
            key = path.relative_to(root).as_posix()
            if stat.S_ISLNK(mode):
                seen[key] = f"link -> {os.readlink(path)}"
            elif stat.S_ISDIR(mode):
                seen[key] = "folder"
            elif stat.S_ISREG(mode):
                seen[key] = path.read_bytes()
            else:
                seen[key] = "special"
    return seen


def truth(root: Path) -> dict[str, bytes | str]:
    """What the loop reads as the truth: each iteration's report, results and traces, the handoffs, state/ and
    the settings (a copy elsewhere, such as execution_outputs.old/, decides nothing: Write may write there too)."""
    def decides(parts: list[str]) -> bool:
        if parts[0] == "execution_outputs":
            return len(parts) >= 3 and parts[2] in ("report.json", "results.jsonl", "traces")
        return parts[0] in ("handoffs", "state", "run.json", "scenario.toml", "brief.md")

    return {key: value for key, value in snapshot(root).items() if decides(key.split("/"))}


def not_applied(data: dict[str, Any]) -> dict[str, str]:
    return {item["path"]: item["why"] for item in data.get("not_applied", [])}


# ---- (a) a rename moves no protection ----------------------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize("moved", ["execution_outputs/iteration_1", "execution_outputs"])
def test_a_renamed_folder_cannot_carry_a_report_of_its_own(place, moved):
    """The iteration's folder (or execution_outputs) renamed, a fresh one made with a report of 10/10: the loop
    would have read 1.0 and accepted a handoff claiming it."""
    root = place["demo"]
    before = truth(root)
    reply = drive(root, f"mv {moved} {moved}.old && mkdir -p execution_outputs/iteration_1/traces && "
                        f"echo '{FORGED}' > execution_outputs/iteration_1/report.json && "
                        "echo '{\"passed\": true}' > execution_outputs/iteration_1/results.jsonl && "
                        "echo '{}' > execution_outputs/iteration_1/traces/forged.json && echo done")
    out = root / "execution_outputs" / "iteration_1"
    handoff = SubmitHandoff("execute").run({"payload": CLAIM}, ToolContext(root, "execute", 1))
    assert handoff.status == "error" and "success_rate: claimed 1.0, report.json says 0.8" in (handoff.error or "")
    assert (out / "report.json").read_text(encoding="utf-8") == REPORT
    assert (out / "results.jsonl").read_text(encoding="utf-8") == RESULTS
    assert not (out / "traces" / "forged.json").exists() and (out / "traces" / "s1.json").exists()
    assert truth(root) == before
    assert reply["status"] == "ok" and reply["data"]["stdout"] == "done\n"
    refused = not_applied(reply["data"])
    assert "execution_outputs/iteration_1/report.json" in refused
    assert "RunEvaluation" in refused["execution_outputs/iteration_1/report.json"]


@needs_bwrap
def test_a_handoff_or_a_setting_moved_aside_and_made_anew_is_not_applied(place):
    root = place["demo"]
    before = truth(root)
    reply = drive(root, "mv handoffs h.old; mkdir -p handoffs/iteration_1; "
                        "echo '{}' > handoffs/iteration_1/execute_to_init_context.json; "
                        "mv scenario.toml s.old; printf 'bash_sandbox = \"none\"\\n' > scenario.toml; "
                        "mv run.json r.old; echo '{\"phase\": \"done\"}' > run.json; echo done")
    assert truth(root) == before
    assert not (root / "handoffs" / "iteration_1" / "execute_to_init_context.json").exists()
    assert {"scenario.toml", "run.json", "handoffs/iteration_1/execute_to_init_context.json"} <= set(
        not_applied(reply["data"]))


# ---- (b) a link in the folder turns nothing of baton's into a delete elsewhere -----------------------------


@needs_bwrap
def test_a_linked_execution_outputs_deletes_nothing_of_another_scenario(place):
    victim = snapshot(place["victim"])
    reply = drive(place["demo"], "mv execution_outputs outputs.old && "
                                 "ln -s ../victim/execution_outputs execution_outputs && echo linked")
    assert snapshot(place["victim"]) == victim
    assert reply["status"] == "ok" and reply["data"]["stdout"] == "linked\n"
    assert not (place["demo"] / "execution_outputs").is_symlink()
    assert "symlink" in not_applied(reply["data"])["execution_outputs"]
    # and the next command does no harm either
    drive(place["demo"], "echo again > design/again.md")
    assert snapshot(place["victim"]) == victim


@needs_bwrap
def test_a_link_already_in_the_folder_is_neither_copied_nor_followed(place):
    """A link left by an unconfined command, or by hand: the copy leaves it out, so nothing reaches through it."""
    root = place["demo"]
    os.rename(root / "execution_outputs", root / "outputs.old")
    (root / "execution_outputs").symlink_to("../victim/execution_outputs")
    victim = snapshot(place["victim"])
    reply = drive(root, "ls execution_outputs 2>&1; rm -rf execution_outputs/*; "
                        "mkdir -p execution_outputs/iteration_2 && echo '{}' > execution_outputs/iteration_2/x.json")
    assert snapshot(place["victim"]) == victim
    assert "execution_outputs: a symlink, not copied" in reply["data"]["not_copied"]
    assert "could not be applied" in not_applied(reply["data"])["execution_outputs/iteration_2/x.json"]


# ---- (c) a bound on what a command may write -------------------------------------------------------------------


def run_in(root: Path, command: str, **settings: Any) -> ToolResult:
    ctx = ToolContext(root=root, agent="execute", iteration=1,
                      settings=ToolSettings(bash_enabled=True, bash_timeout_s=60, **settings))
    return BashTool().run({"command": command}, ctx)


@needs_bwrap
def test_a_fill_past_the_disk_bound_fails_the_command_and_fills_nothing(place, tmp_path, monkeypatch):
    host_tmp = tmp_path / "host-tmp"
    host_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(host_tmp))
    root = place["demo"]
    before = snapshot(root)
    result = run_in(root, "echo small > design/small.md; head -c 12M /dev/zero > design/fill.bin; echo rc=$?",
                    bash_disk_mb=4)
    assert not (root / "design" / "fill.bin").exists() and snapshot(root) == before
    assert result.status == "error" and "bash_disk_mb" in (result.error or "") and "4 MB" in (result.error or "")
    assert "No space left on device" in result.data["stderr"]
    assert list(host_tmp.iterdir()) == []  # the copy and what came back are gone too


# ---- (d) no link, FIFO or device a command makes reaches the folder ------------------------------------------


@needs_bwrap
def test_links_and_fifos_a_command_makes_never_reach_the_folder(place):
    root = place["demo"]
    reply = drive(root, "ln -s ../../credentials.txt design/business_rules.md; ln -s /etc/passwd design/passwd; "
                        "rm design/spec.md && ln -s ../../../credentials.txt design/spec.md; mkfifo design/pipe; "
                        "echo real > design/real.md; ln design/real.md design/hard.md; echo done")
    entries = snapshot(root / "design")
    assert entries == {"spec.md": b"# spec\n", "real.md": b"real\n", "hard.md": b"real\n"}
    assert os.stat(root / "design" / "real.md").st_nlink == 1
    refused = not_applied(reply["data"])
    assert "symlink" in refused["design/business_rules.md"] and "FIFO" in refused["design/pipe"]
    assert "symlink" in refused["design/spec.md"] and "design/passwd" in refused


# ---- what is applied, and how ----------------------------------------------------------------------------------


@needs_bwrap
def test_changes_go_through_the_calls_journal_and_a_rollback_undoes_them(place, tmp_path):
    """A crash before the call's result is archived rolls its changes back, Bash's as any tool's."""
    root = place["demo"]
    before = snapshot(root)
    journal = Journal(root, root / "state" / "execute" / "journal" / "toolu_1")
    ctx = ToolContext(root=root, agent="execute", iteration=1, files=journal,
                      settings=ToolSettings(bash_enabled=True))
    result = BashTool().run({"command": "echo new > design/new.md; echo changed > design/spec.md; "
                                        "rm execution_outputs/iteration_1/tools/tools.py"}, ctx)
    assert result.status == "ok", result.error
    assert result.data["applied"] == {"written": ["design/new.md", "design/spec.md"],
                                      "deleted": ["execution_outputs/iteration_1/tools/tools.py"]}
    assert (root / "design" / "spec.md").read_text() == "changed\n"
    assert journal.rollback() == 3
    after = snapshot(root)
    assert {k: v for k, v in after.items() if not k.startswith("state/execute")} == before


@needs_bwrap
def test_deleting_what_decides_the_run_is_not_applied(place):
    root = place["demo"]
    before = truth(root)
    reply = drive(root, "rm -rf execution_outputs/iteration_1 handoffs scenario.toml run.json; rm -rf state/* ; "
                        "ls; echo done")
    assert truth(root) == before
    assert not (root / "execution_outputs" / "iteration_1" / "tools" / "tools.py").exists()  # that one was its own
    refused = not_applied(reply["data"])
    assert {"execution_outputs/iteration_1/report.json", "execution_outputs/iteration_1/results.jsonl",
            "execution_outputs/iteration_1/traces/s1.json", "scenario.toml", "run.json"} <= set(refused)
    assert "deleted or moved away in the sandbox" in refused["run.json"]


@needs_bwrap
def test_a_command_that_kills_every_process_cannot_kill_the_copy_back(place):
    """The script around the command is the sandbox's init: `kill -9 -1` ends everything else, and what the
    command changed is still read back, whole, and applied."""
    root = place["demo"]
    reply = drive(root, "echo x > design/x.md; (sleep 100 &); kill -9 -1; kill -9 1; echo after")
    assert reply["status"] == "ok" and reply["data"]["stdout"] == "after\n"
    assert reply["data"]["applied"] == {"written": ["design/x.md"], "deleted": []}


def test_a_stream_that_does_not_end_as_the_script_ends_it_applies_nothing():
    import io

    from agents.tools.bash_copy import Unreadable, read_back
    for raw, why in ((b"", "ended before"), (b"junk\nbaton-bash ran 100 0 99999\n", "shorter than it says"),
                     (b"\nbaton-bash ran 100 2 0\n", "tar exit status 2")):
        with pytest.raises(Unreadable, match=why):
            read_back(io.BytesIO(raw), len(raw), False, 4)
    with pytest.raises(Unreadable, match="more came back"):
        read_back(io.BytesIO(b""), 0, True, 4)


@needs_bwrap
def test_a_file_made_unreadable_is_still_read_back_not_deleted(place):
    root = place["demo"]
    reply = drive(root, "chmod 000 design/spec.md design; echo done")
    assert reply["status"] == "ok" and reply["data"]["applied"] == {"written": [], "deleted": []}
    assert (root / "design" / "spec.md").read_text() == "# spec\n"


@needs_bwrap
def test_what_the_folder_holds_that_is_not_copied_is_named_and_left_alone(place):
    root = place["demo"]
    (root / "design" / "link.md").symlink_to(place["secret"])
    os.mkfifo(root / "fifo")
    reply = drive(root, "ls design; test -e fifo || echo no-fifo; rm -rf design; echo done")
    assert reply["status"] == "ok" and reply["data"]["stdout"] == "spec.md\nno-fifo\ndone\n"
    assert sorted(reply["data"]["not_copied"]) == ["design/link.md: a symlink, not copied", "fifo: a FIFO, not copied"]
    assert (root / "design" / "link.md").is_symlink() and not (root / "design" / "spec.md").exists()
    assert place["secret"].read_text() == "password=hunter2\n"


# ---- bash_sandbox = "none": the operator's choice, cleaned up without following a link ---------------------------


def test_unconfined_cleanup_never_follows_a_linked_execution_outputs(place):
    victim = snapshot(place["victim"])
    root = place["demo"]
    result = run_in(root, "mv execution_outputs outputs.old && ln -s ../victim/execution_outputs execution_outputs "
                          "&& echo '{}' > scenario.md && rm scenario.toml && echo x > scenario.toml",
                    bash_sandbox="none")
    assert result.status == "ok" and result.data["unconfined"] is True
    assert snapshot(place["victim"]) == victim  # its iteration_2 is new to demo, and still not removed
    assert "removed" not in result.data  # scenario.toml was there before: replacing it is the operator's risk


def test_unconfined_commands_lose_what_they_create_among_baton_files(place):
    root = place["demo"]
    (root / "scenario.toml").unlink()
    result = run_in(root, "echo x > scenario.toml; mkdir -p execution_outputs/iteration_2/traces; "
                          "echo '{}' > execution_outputs/iteration_2/report.json; echo ok > design/ok.md",
                    bash_sandbox="none")
    assert result.data["removed"] == ["execution_outputs/iteration_2/report.json",
                                      "execution_outputs/iteration_2/traces", "scenario.toml"]
    assert not (root / "scenario.toml").exists() and (root / "design" / "ok.md").exists()


@needs_bwrap
def test_what_comes_back_is_bounded_by_the_disk_not_by_names(place, tmp_path, monkeypatch):
    """A sparse file of 100 GB takes no disk and is not applied; sixty names of one 3 MB file come back as one
    file's data (a hard link is applied as a copy), not sixty."""
    root = place["demo"]
    result = run_in(root, "truncate -s 100G design/sparse.bin; head -c 3M /dev/urandom > design/a.bin; "
                          "for i in $(seq 60); do ln design/a.bin design/h$i.bin; done; echo done", bash_disk_mb=8)
    assert result.status == "ok", result.error
    assert result.data["duration_s"] < 20 and not (root / "design" / "sparse.bin").exists()
    assert "over the" in not_applied(result.data)["design/sparse.bin"]
    assert (root / "design" / "h60.bin").read_bytes() == (root / "design" / "a.bin").read_bytes()
    assert os.stat(root / "design" / "h60.bin").st_nlink == 1 and len(result.data["applied"]["written"]) == 31


@needs_bwrap
def test_what_a_command_writes_into_the_changes_pipe_is_ignored(place):
    """The pipe the copy comes back on can be reopened through /proc; what the command sends there comes before
    the real archive and is left out (and a pax header, which baton's tar never writes, would be refused)."""
    root = place["demo"]
    reply = drive(root, "fd=$(tr '\\0' '\\n' < /proc/$PPID/cmdline | tail -3 | head -1); mkdir -p /tmp/f/handoffs; "
                        "echo '{}' > /tmp/f/handoffs/forged.json; echo x > /tmp/f/forged.md; "
                        "tar --format=pax -C /tmp/f -cf /proc/$PPID/fd/$fd . && echo sent; "
                        "echo real > design/real.md")
    assert reply["status"] == "ok" and reply["data"]["stdout"] == "sent\n"
    assert reply["data"]["applied"] == {"written": ["design/real.md"], "deleted": []}
    assert not (root / "forged.md").exists() and not (root / "handoffs" / "forged.json").exists()


def test_a_stream_with_a_pax_header_is_refused(tmp_path):
    import io
    import tarfile

    from agents.tools.bash_copy import Unreadable, read_back
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("./design/x.md")
        info.pax_headers = {"comment": "x" * 100}
        tar.addfile(info, io.BytesIO(b""))
    archive = raw.getvalue()
    stream = io.BytesIO(archive + f"\nbaton-bash ran 100 0 {len(archive)}\n".encode())
    with pytest.raises(Unreadable, match="pax header"):
        read_back(stream, len(stream.getvalue()), False, 4)


@needs_bwrap
def test_a_name_that_is_not_utf8_is_not_applied_and_the_result_stays_text(place):
    """Write cannot name such a file, and a result holding one could not be stored as the step's text."""
    root = place["demo"]
    reply = drive(root, "touch design/$'\\xff'.md; mkdir design/$'\\xfe'; echo x > design/$'\\xfe'/in.md; echo done")
    assert reply["status"] == "ok" and sorted(os.listdir(root / "design")) == ["spec.md"]
    assert set(not_applied(reply["data"])) == {"design/\\xff.md", "design/\\xfe", "design/\\xfe/in.md"}
    json.dumps(reply).encode("utf-8")

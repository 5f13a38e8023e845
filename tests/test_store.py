"""The scenario store: atomic writes, fsynced appends, torn lines, confined paths, run.json."""

from __future__ import annotations

import json
import os

import pytest

from scenarios.folder import Folder
from scenarios.run import RunRecord, load_run, save_run
from scenarios.store import Layout, StoreError, check_name


def test_atomic_write_replaces_whole_files_and_leaves_no_temp(tmp_path):
    path = tmp_path / "a" / "b.json"
    Folder(tmp_path).write_atomic(path, "one")
    Folder(tmp_path).write_atomic(path, "two")
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["b.json"]


def test_torn_last_line_is_reported_ignored_and_healed_by_the_next_append(tmp_path):
    log, folder = tmp_path / "log.jsonl", Folder(tmp_path)
    folder.append_jsonl(log, {"n": 1})
    with open(log, "ab") as fh:
        fh.write(b'{"n": 2, "tru')  # a crash mid-append
    read = folder.read_jsonl(log)
    assert read.records == [{"n": 1}] and read.torn_tail and "line 2" in read.problems[0]
    folder.append_jsonl(log, {"n": 3})
    again = folder.read_jsonl(log)
    assert again.records == [{"n": 1}, {"n": 3}] and not again.torn_tail and len(again.bad_lines) == 1


def test_missing_jsonl_reads_empty(tmp_path):
    assert Folder(tmp_path).read_jsonl(tmp_path / "none.jsonl").records == []


@pytest.mark.parametrize("name", ["../x", "a/b", "", ".hidden", "x" * 65, "a..b", "name with space"])
def test_hostile_names_are_refused(name):
    with pytest.raises(StoreError, match="invalid scenario name"):
        check_name(name)


def test_paths_are_confined(tmp_path):
    (tmp_path / "ok").mkdir()
    os.symlink("/etc", tmp_path / "out")
    folder = Folder(tmp_path)
    folder.write_atomic("ok/new.txt", "x")
    assert (tmp_path / "ok" / "new.txt").read_text() == "x"
    for bad, why in [("../x", "'..'"), ("/etc/passwd", "absolute"), ("out/passwd", "symlink"), ("", "folder")]:
        with pytest.raises(StoreError, match=why):
            folder.read_bytes(bad)


def test_layout_refuses_unknown_agents(tmp_path):
    with pytest.raises(StoreError, match="unknown agent"):
        Layout(tmp_path).log("../../etc")


def test_run_record_round_trip_and_corruption_is_a_clear_error(tmp_path):
    assert load_run(tmp_path) is None
    saved = save_run(tmp_path, RunRecord(scenario="s"))
    assert load_run(tmp_path) == saved
    (tmp_path / "run.json").write_text('{"scenario": "s", "phase": "nonsense"')
    before = (tmp_path / "run.json").read_bytes()
    with pytest.raises(StoreError, match="corrupted.*baton resume"):
        load_run(tmp_path)
    assert (tmp_path / "run.json").read_bytes() == before  # nothing lost
    (tmp_path / "run.json").write_text(json.dumps({"scenario": "s", "phase": "flying"}))
    with pytest.raises(StoreError, match="corrupted"):
        load_run(tmp_path)

"""Bounds wherever a model-written tree or document is walked (issue 39, item 5).

A 3,000-level folder chain in tools/ made `baton evaluate` and `baton export` die with `unexpected
RecursionError` (exit 2); a sample nested 200,000 deep did the same instead of becoming that sample's L4; 60,000
empty files in tools/ cost minutes, because each sample's copy ran before its time limit started. Now a copy is
iterative with bounds on depth, entries and bytes and a deadline, JSON has a nesting bound, and what passes a
bound is the sample's L4 finding naming the bound. The commands run as real processes with a time limit."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from proving.evaluation.child import copy_files
from proving.evaluation.samples import load_samples
from scenarios import trees
from scenarios.folder import Folder
from scenarios.store import StoreError
from tests.test_hostile_folder import baton

DEEP = 3000


_MADE: list[Path] = []


@pytest.fixture(autouse=True)
def _remove_chains():
    """Each chain is removed after its test: pytest's own clean-up of old temporary folders (shutil.rmtree)
    recurses and would fail on it in a later session, this one's or another's."""
    yield
    while _MADE:
        base = _MADE.pop()
        if base.parent.is_dir():
            trees.remove_tree(base.parent, (base.name,))


def chain(base: Path, depth: int = DEEP) -> Path:
    """``base/d/d/.../d`` ``depth`` folders down, made by descriptor (a path that long is past PATH_MAX)."""
    _MADE.append(base / "d")
    base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as fh:
            fh.write("deep\n")
    finally:
        os.close(fd)
    return base


def deep_json(depth: int) -> str:
    return '{"id": "deep", "instruction": ' + "[" * depth + "]" * depth + "}"


# ---- the walks themselves ----------------------------------------------------------------------------------


def test_copying_a_deep_chain_stops_at_the_depth_bound(tmp_path):
    chain(tmp_path / "src" / "tools")
    with pytest.raises(trees.OverBound) as caught:
        trees.copy_tree(tmp_path / "src", ("tools",), tmp_path / "dest")
    assert f"{trees.MAX_DEPTH} folders deep" in str(caught.value)


def test_copying_too_many_entries_stops_at_the_entry_bound(tmp_path):
    tools = tmp_path / "src" / "tools"
    tools.mkdir(parents=True)
    for i in range(trees.MAX_ENTRIES + 1):
        (tools / f"f{i}").touch()
    with pytest.raises(trees.OverBound) as caught:
        trees.copy_tree(tmp_path / "src", ("tools",), tmp_path / "dest")
    assert f"{trees.MAX_ENTRIES:,} files and folders" in str(caught.value)


def test_a_copy_past_its_deadline_stops(tmp_path):
    tools = tmp_path / "src" / "tools"
    tools.mkdir(parents=True)
    (tools / "a.py").write_text("x = 1\n")
    with pytest.raises(trees.OverBound) as caught:
        trees.copy_tree(tmp_path / "src", ("tools",), tmp_path / "dest", deadline=time.monotonic() - 1)
    assert "time limit" in str(caught.value)


def test_removing_a_deep_chain_works(tmp_path):
    chain(tmp_path / "root" / "junk")
    assert trees.remove_tree(tmp_path / "root", ("junk",)) == []
    assert not (tmp_path / "root" / "junk").exists()


def test_the_sample_copy_names_the_bound_as_a_problem(tmp_path):
    out = tmp_path / "root" / "execution_outputs" / "iteration_1"
    chain(out / "tools")
    work = tmp_path / "work"
    work.mkdir()
    _, problem = copy_files(tmp_path / "root", ("execution_outputs", "iteration_1"), work, 64)
    assert problem is not None and f"{trees.MAX_DEPTH} folders deep" in problem


def test_a_deeply_nested_json_file_is_an_error_not_a_crash(tmp_path):
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    folder = Folder(tmp_path)
    with pytest.raises(StoreError) as caught:
        folder.read_json("deep.json", "a record")
    assert "nested deeper than" in str(caught.value)
    assert folder.read_json_or_none("deep.json") is None


def test_a_deeply_nested_sample_is_an_l4_problem(tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "deep.json").write_text(deep_json(200_000))
    (samples / "fine.json").write_text(json.dumps({"id": "fine", "instruction": "x"}))
    loaded = {item.path.name: item for item in load_samples(tmp_path, Path("samples"))}
    problem = loaded["deep.json"].problem or ""
    assert "nested deeper than" in problem and "levels" in problem


def test_nesting_within_the_bound_is_parsed(tmp_path):
    (tmp_path / "ok.json").write_text('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "b": [[[1]]]}')
    assert Folder(tmp_path).read_json("ok.json", "a record")["b"] == [[[1]]]


# ---- the commands ------------------------------------------------------------------------------------------


def evaluated(root: Path) -> list[dict]:
    lines = (root / "execution_outputs" / "iteration_2" / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_evaluate_with_a_deep_chain_in_tools_gives_l4_findings(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path / "scenarios")
    chain(root / "execution_outputs" / "iteration_2" / "tools" / "junk")
    done = baton(root, "evaluate", "refund_desk", "--iteration", "2", "--no-gates", timeout=120)
    text = done.stdout + done.stderr
    assert done.returncode in (0, 1), text
    assert "RecursionError" not in text and "unexpected" not in text
    results = evaluated(root)
    assert results and all(r["layer"] == "L4" and f"{trees.MAX_DEPTH} folders deep" in r["reason"]
                           for r in results), results


def test_evaluate_with_a_deeply_nested_sample_gives_its_l4(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path / "scenarios")
    samples = root / "execution_outputs" / "iteration_2" / "samples"
    (samples / "zz_deep.json").write_text(deep_json(200_000))
    done = baton(root, "evaluate", "refund_desk", "--iteration", "2", "--no-gates", timeout=120)
    text = done.stdout + done.stderr
    assert done.returncode in (0, 1), text
    assert "RecursionError" not in text and "unexpected" not in text
    by_file = {r["file"]: r for r in evaluated(root)}
    deep = by_file["samples/zz_deep.json"]
    assert deep["layer"] == "L4" and "nested deeper than" in deep["reason"]
    assert sum(r["passed"] for r in by_file.values()) == len(by_file) - 1  # the others still ran


def test_evaluate_with_many_files_in_tools_is_bounded(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path / "scenarios")
    junk = root / "execution_outputs" / "iteration_2" / "tools" / "junk"
    junk.mkdir()
    for i in range(trees.MAX_ENTRIES + 100):
        (junk / f"f{i}").touch()
    done = baton(root, "evaluate", "refund_desk", "--iteration", "2", "--no-gates", timeout=240)
    text = done.stdout + done.stderr
    assert done.returncode in (0, 1), text
    results = evaluated(root)
    assert results and all(r["layer"] == "L4" and f"{trees.MAX_ENTRIES:,} files and folders" in r["reason"]
                           for r in results), results


def test_export_with_a_deep_chain_in_tools_says_which_bound(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path / "scenarios")
    chain(root / "execution_outputs" / "iteration_2" / "tools" / "junk")
    out = tmp_path / "export"
    done = baton(root, "export", "refund_desk", "--to", "inspect", "--out", str(out), timeout=120)
    text = done.stdout + done.stderr
    assert "RecursionError" not in text and "unexpected" not in text
    assert done.returncode == 2 and f"{trees.MAX_DEPTH} folders deep" in text, text
    assert not out.exists()


def test_export_with_a_deeply_nested_data_file_says_so(finished_run, tmp_path):
    root = finished_run.copy_to(tmp_path / "scenarios")
    data = root / "execution_outputs" / "iteration_2" / "tools" / "data.json"
    data.write_text('{"orders": {}, "deep": ' + "[" * 200_000 + "]" * 200_000 + "}")
    out = tmp_path / "export"
    done = baton(root, "export", "refund_desk", "--to", "inspect", "--out", str(out), timeout=120)
    text = done.stdout + done.stderr
    assert "RecursionError" not in text and "unexpected" not in text
    assert done.returncode == 2 and "nested deeper than" in text, text

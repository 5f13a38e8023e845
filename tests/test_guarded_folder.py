"""The one way into a scenario folder (scenarios/confined.py, scenarios/folder.py): whatever a model left
where a file should be (a FIFO, a link to /dev/zero or to a secret, a huge sparse file, a hard link), a
read neither hangs, nor follows it, nor reads without bound; a copy takes regular files only and says
what it refused."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from scenarios import confined
from scenarios.folder import Folder
from scenarios.store import StoreError

SECRET = "password hunter2-SECRET"


@pytest.fixture(params=["kernel", "walk"])
def folder(request, tmp_path: Path, monkeypatch) -> Folder:
    """Each test twice: paths resolved by openat2, and by the per-component walk of kernels without it."""
    if request.param == "walk":
        monkeypatch.setattr(confined, "_openat2", None)
    root = tmp_path / "scenario"
    (root / "state").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text(SECRET)
    return Folder(root)


def plant(folder: Folder, rel: str, what: str) -> Path:
    path = folder.root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if what == "fifo":
        os.mkfifo(path)
    elif what == "zero":
        path.symlink_to("/dev/zero")
    elif what == "secret":
        path.symlink_to(folder.root.parent / "secret.txt")
    elif what == "environ":
        path.symlink_to("/proc/self/environ")
    elif what == "dangling":
        path.symlink_to(folder.root / "nowhere")
    elif what == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(10 * 1024**3)
    elif what == "hardlink":
        os.link(folder.root.parent / "secret.txt", path)
    return path


def within(seconds: float, call):
    """Run ``call`` in a thread; fail if it has not returned in ``seconds`` (a hang)."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the read hung"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize("what", ["fifo", "zero", "secret", "environ", "dangling", "hardlink"])
def test_a_planted_file_is_refused_without_hanging_or_following(folder, what):
    plant(folder, "execution_outputs/iteration_1/report.json", what)
    with pytest.raises(StoreError) as caught:
        within(5, lambda: folder.read_json("execution_outputs/iteration_1/report.json", "report.json"))
    assert SECRET not in str(caught.value)
    assert folder.read_json_or_none("execution_outputs/iteration_1/report.json") is None


def test_a_huge_sparse_file_is_refused_by_its_size(folder):
    plant(folder, "run.json", "sparse")
    with pytest.raises(confined.TooLarge):
        within(5, lambda: folder.read_bytes("run.json", limit=1024))


def test_a_linked_parent_folder_is_never_entered(folder, tmp_path):
    other = tmp_path / "other" / "state" / "execute"
    other.mkdir(parents=True)
    (other / "log.jsonl").write_text('{"secret": "theirs"}\n')
    (folder.root / "execution_outputs").symlink_to(tmp_path / "other")
    with pytest.raises(StoreError):
        folder.read_bytes("execution_outputs/state/execute/log.jsonl")
    assert folder.names("execution_outputs") == []
    assert folder.kind("execution_outputs") == "link"
    with pytest.raises(StoreError):
        folder.write_json("execution_outputs/state/execute/x.json", {})
    assert not (other / "x.json").exists()


def test_a_jsonl_append_never_goes_through_a_link(folder, tmp_path):
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    (folder.root / "state" / "events.jsonl").symlink_to(target)
    with pytest.raises(StoreError):
        folder.append_jsonl("state/events.jsonl", {"a": 1})
    assert target.read_text() == ""


def test_a_copy_takes_regular_files_and_names_what_it_refused(folder, tmp_path):
    tools = folder.root / "execution_outputs" / "iteration_1" / "tools"
    tools.mkdir(parents=True)
    (tools / "tools.py").write_text("def f(data):\n    return {}\n")
    (tools / "sub").mkdir()
    (tools / "sub" / "helper.py").write_text("X = 1\n")
    for name, what in (("env.txt", "environ"), ("secret.md", "secret"), ("gone", "dangling"), ("pipe", "fifo"),
                       ("hard.txt", "hardlink")):
        plant(folder, f"execution_outputs/iteration_1/tools/{name}", what)
    (tools / "linked_dir").symlink_to(tmp_path)
    dest = tmp_path / "copy"
    refused = within(10, lambda: folder.copy_tree("execution_outputs/iteration_1/tools", dest))
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == ["sub", "sub/helper.py", "tools.py"]
    assert sorted(r.split(":")[0] for r in refused) == ["env.txt", "gone", "hard.txt", "linked_dir", "pipe",
                                                        "secret.md"]
    assert any("FIFO" in r for r in refused) and any("symlink" in r for r in refused)
    assert not any(SECRET in p.read_text() for p in dest.rglob("*") if p.is_file())


def test_a_copy_stops_at_its_bound(folder, tmp_path):
    tools = folder.root / "tools"
    tools.mkdir()
    for n in range(4):
        (tools / f"f{n}.bin").write_bytes(b"x" * 1000)
    with pytest.raises(confined.TooLarge):
        folder.copy_tree("tools", tmp_path / "copy", limit_bytes=2500)


def test_names_leave_out_links_and_special_files(folder):
    (folder.root / "execution_outputs" / "iteration_1").mkdir(parents=True)
    plant(folder, "execution_outputs/iteration_2", "secret")
    plant(folder, "execution_outputs/iteration_3", "fifo")
    assert folder.names("execution_outputs", "iteration_*") == ["iteration_1"]


def test_remove_tree_removes_links_and_never_enters_them(folder, tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "report.json").write_text("{}")
    traces = folder.root / "execution_outputs" / "iteration_1" / "traces"
    traces.mkdir(parents=True)
    (traces / "a.json").write_text("{}")
    (traces / "link").symlink_to(keep)
    assert folder.remove_tree("execution_outputs/iteration_1/traces") == []
    assert not traces.exists() and (keep / "report.json").exists()


def test_the_kernel_resolves_paths_where_it_can():
    """openat2 is used on this kernel (5.6+); the walk is the fallback elsewhere, tested by the file tools."""
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("openat2 is looked for on x86_64 and aarch64 only")
    assert confined.kernel_resolves()

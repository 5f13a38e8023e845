"""The Bash tool's bubblewrap sandbox (agents/tools/bash.py): what a command can reach,
and what happens when no sandbox can be made.

The tests that run commands in the sandbox need a working `bwrap` and are skipped,
with the reason, where it is missing or cannot create namespaces; the tests of the
refusal and of the settings run everywhere.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest

from agents.config import ConfigError, ToolSettings
from agents.settings_layers import resolve_config
from agents.tools.base import ToolContext, ToolResult
from agents.tools.bash import BashTool
from proving.sandbox.bwrap import SandboxUnavailable, usable_bwrap
from proving.sandbox.bwrap import python_dirs as _python_dirs

BASH = BashTool()
REPO = Path(__file__).resolve().parents[1]


def _bwrap_reason() -> str | None:
    try:
        usable_bwrap()
    except SandboxUnavailable as exc:
        return f"no working bubblewrap sandbox here ({exc}); apt-get install -y bubblewrap to run these tests"
    return None


needs_bwrap = pytest.mark.skipif(_bwrap_reason() is not None, reason=_bwrap_reason() or "")


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    """The scenario folder, with host files next to it that the sandbox must not reach."""
    (tmp_path / "host-secret.txt").write_text("host secret\n", encoding="utf-8")
    folder = tmp_path / "scenario"
    folder.mkdir()
    return folder


def run(folder: Path, command: str, sandbox: str = "bwrap", **settings) -> ToolResult:
    ctx = ToolContext(
        root=folder, agent="execute", iteration=1,
        settings=ToolSettings(bash_enabled=True, bash_sandbox=sandbox, **settings),  # type: ignore[arg-type]
    )
    return BASH.run({"command": command}, ctx)


def ran(folder: Path, command: str, **settings) -> dict:
    result = run(folder, command, **settings)
    assert result.status == "ok", result.error
    return result.data


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker`` (a zombie's is empty)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue  # it ended while we looked
    return found


def gone(marker: str, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---- inside the sandbox ---------------------------------------------------------


@needs_bwrap
def test_runs_in_the_folder_at_a_fixed_path(scenario):
    (scenario / "here.txt").write_text("x", encoding="utf-8")
    data = ran(scenario, "pwd; ls; echo oops >&2; exit 3")
    assert data["exit_code"] == 3 and data["stdout"] == "/scenario\nhere.txt\n" and data["stderr"] == "oops\n"
    assert "unconfined" not in data


@needs_bwrap
def test_etc_is_not_there(scenario):
    data = ran(scenario, "cat /etc/passwd")
    assert data["exit_code"] != 0 and data["stdout"] == "" and "No such file" in data["stderr"]


@needs_bwrap
def test_parent_folder_and_host_paths_are_not_there(scenario, tmp_path):
    host_paths = [tmp_path, REPO / "agents", "/etc/hostname", "/root/.ssh"]
    data = ran(scenario, f"ls -a ..; echo ---; ls -a {' '.join(map(str, host_paths))} 2>&1; true")
    listing, _, missing = data["stdout"].partition("---\n")
    assert "host-secret.txt" not in data["stdout"] and "scenario" in listing.split()
    # Besides the system folders, only the first folder of the path to the Python baton
    # runs on (a venv under /work, /root, /check... is bound read-only so the scenario's
    # code runs with it): the test must not depend on where the checkout lies.
    python_tops = {Path(d).parts[1] for d in _python_dirs()}
    # /seed: baton's copy of the folder that /scenario is filled from, read-only (agents/tools/bash_copy.py)
    assert set(listing.split()) <= {".", "..", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "proc",
                                    "dev", "tmp", "scenario", "seed", *python_tops}
    assert missing.count("No such file") == 4


@needs_bwrap
def test_symlinks_out_of_the_folder_lead_nowhere(scenario, tmp_path):
    (scenario / "absolute").symlink_to(tmp_path / "host-secret.txt")
    (scenario / "relative").symlink_to("../host-secret.txt")
    data = ran(scenario, "cat absolute; cat relative")
    assert "host secret" not in data["stdout"] and data["stderr"].count("No such file") == 2


@needs_bwrap
def test_writes_in_the_folder_reach_the_host(scenario):
    data = ran(scenario, "echo made > new.txt && mkdir -p sub && echo deep > sub/f.txt")
    assert data["exit_code"] == 0
    assert (scenario / "new.txt").read_text() == "made\n" and (scenario / "sub/f.txt").read_text() == "deep\n"


@needs_bwrap
def test_tmp_is_private_and_fresh_each_time(scenario):
    marker = Path("/tmp") / f"baton-sandbox-test-{os.getpid()}"
    marker.write_text("host tmp", encoding="utf-8")
    try:
        first = ran(scenario, f"cat {marker}; echo kept > /tmp/mine")
        second = ran(scenario, "cat /tmp/mine")
    finally:
        marker.unlink()
    assert "host tmp" not in first["stdout"] and "No such file" in first["stderr"]
    assert second["exit_code"] != 0 and "kept" not in second["stdout"]


@needs_bwrap
def test_no_network_not_even_the_hosts_loopback(scenario):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')"
        data = ran(scenario, f"{sys.executable} -c \"{code}\"; echo > /dev/tcp/127.0.0.1/{port} && echo bash-connected")
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()  # nobody ever reached the socket
    assert "connected" not in data["stdout"] and "ConnectionRefusedError" in data["stderr"]


@needs_bwrap
def test_environment_is_scrubbed(scenario, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake-should-not-leak")
    monkeypatch.setenv("BATON_HARMLESS", "visible-on-the-host-only")
    data = ran(scenario, "env")
    assert "should-not-leak" not in data["stdout"] and "visible-on-the-host-only" not in data["stdout"]
    names = {line.split("=", 1)[0] for line in data["stdout"].splitlines()}
    assert names <= {"PATH", "HOME", "LANG", "PWD", "SHLVL", "_"} and "HOME=/tmp" in data["stdout"]


@needs_bwrap
def test_runs_the_python_baton_runs_on(scenario):
    data = ran(scenario, "python -c 'import sys, pydantic; print(sys.prefix)'")
    assert data["exit_code"] == 0, data["stderr"]
    assert data["stdout"].strip() == sys.prefix


@needs_bwrap
def test_no_capabilities_and_no_nested_user_namespaces(scenario):
    if shutil.which("unshare") is None:
        pytest.skip("util-linux's unshare is not installed")
    data = ran(scenario, "grep CapEff /proc/self/status; unshare --user true && echo nested")
    assert data["stdout"].split() == ["CapEff:", "0000000000000000"] and data["stderr"].startswith("unshare: ")


@needs_bwrap
def test_private_tmp_is_capped(scenario):
    data = ran(scenario, "df -B1 --output=size /tmp | tail -1")  # filling it would take 512 MiB of RAM
    assert data["stdout"].strip() == str(512 * 1024 * 1024)


@needs_bwrap
def test_the_folder_is_a_copy_on_a_disk_of_the_configured_size(scenario):
    (scenario / "here.txt").write_text("x", encoding="utf-8")
    data = ran(scenario, "df -B1 --output=size,target /scenario | tail -1; cat /seed/here.txt", bash_disk_mb=16)
    assert data["stdout"].split() == [str(16 * 1024 * 1024), "/scenario", "x"]


@needs_bwrap
def test_a_command_that_times_out_changes_nothing(scenario):
    (scenario / "kept.txt").write_text("kept\n", encoding="utf-8")
    result = run(scenario, "echo new > new.txt; rm kept.txt; sleep 30", bash_timeout_s=1)
    assert result.status == "ok" and result.data["timed_out"] is True
    assert "nothing it changed was applied" in result.data["note"]
    assert not (scenario / "new.txt").exists() and (scenario / "kept.txt").read_text() == "kept\n"


@needs_bwrap
def test_a_folder_too_large_for_the_disk_is_refused_before_anything_runs(scenario):
    (scenario / "big.bin").write_bytes(b"x" * (3 * 1024 * 1024))
    result = run(scenario, "echo ran > ran.txt", bash_disk_mb=2)
    assert result.status == "error" and "does not fit" in result.error and "bash_disk_mb" in result.error
    assert not (scenario / "ran.txt").exists()


@needs_bwrap
def test_output_stays_capped(scenario):
    data = ran(scenario, "yes | head -c 5000000", output_cap_chars=1000)
    assert data["exit_code"] == 0 and len(data["stdout"]) < 1500 and "bytes omitted" in data["stdout"]


@needs_bwrap
def test_timeout_kills_the_whole_sandbox(scenario):
    marker = f"{os.getpid()}.{time.monotonic_ns() % 1000}"  # a unique sleep length to look for
    result = run(scenario, f"sleep 7{marker} & sleep 8{marker}; echo never", bash_timeout_s=1)
    assert result.status == "ok" and result.data["timed_out"] is True and result.data["exit_code"] is None
    assert "never" not in result.data["stdout"]
    assert gone(marker), processes_with(marker)  # bwrap, bash and both sleeps


@needs_bwrap
def test_background_processes_end_with_the_command(scenario):
    marker = f"{os.getpid()}.{time.monotonic_ns() % 1000}"
    started = time.monotonic()
    data = ran(scenario, f"(sleep 90{marker} > /dev/null 2>&1 &); sleep 60{marker} & echo done")
    # It did not wait for either sleep (a bound far below them, which holds on a loaded machine).
    assert data["exit_code"] == 0 and data["stdout"] == "done\n" and time.monotonic() - started < 30
    assert gone(marker), processes_with(marker)


# ---- no sandbox to be had -----------------------------------------------------------


@pytest.fixture
def bin_without_bwrap(tmp_path: Path, monkeypatch) -> Path:
    """PATH with bash and nothing else: bwrap is not found, bash still runs."""
    folder = tmp_path / "bin"
    folder.mkdir()
    bash = shutil.which("bash")
    assert bash is not None
    (folder / "bash").symlink_to(bash)
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setattr("proving.sandbox.bwrap.SYSTEM_BWRAPS", ())  # nor where distributions install it
    return folder


def test_without_bwrap_it_refuses_to_run_unconfined(scenario, bin_without_bwrap):
    result = run(scenario, "echo ran > ran.txt")
    assert result.status == "error" and not (scenario / "ran.txt").exists()
    assert "not installed" in result.error and "apt-get install -y bubblewrap" in result.error
    assert 'bash_sandbox = "none"' in result.error and "BATON_EXECUTE_BASH_SANDBOX=none" in result.error


def test_a_bwrap_that_cannot_make_namespaces_is_refused_too(scenario, bin_without_bwrap):
    fake = bin_without_bwrap / "bwrap"
    fake.write_text("#!/bin/bash\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    result = run(scenario, "echo ran > ran.txt")
    assert result.status == "error" and not (scenario / "ran.txt").exists()
    assert "cannot create a sandbox here: bwrap: No permissions to create new namespace" in result.error


def test_sandbox_none_runs_on_the_host_and_says_so(scenario, bin_without_bwrap, tmp_path):
    data = ran(scenario, f"echo ran > ran.txt; echo $PWD; read -r line < {tmp_path}/host-secret.txt; echo $line",
               sandbox="none")
    assert data["exit_code"] == 0 and (scenario / "ran.txt").read_text() == "ran\n"
    assert data["stdout"] == f"{scenario}\nhost secret\n" and data["unconfined"] is True


def test_descriptions_say_what_is_confined():
    assert "/scenario" in BASH.description and "NO network" in BASH.description
    assert "NOT sandboxed" not in BASH.description
    unconfined = BashTool("none").description
    assert "NOT sandboxed" in unconfined and "/scenario" not in unconfined


# ---- the setting -------------------------------------------------------------------


def test_the_setting_defaults_to_bwrap_and_is_set_like_the_others(tmp_path):
    assert resolve_config("execute", env={}).tools.bash_sandbox == "bwrap"
    toml = tmp_path / "scenario.toml"
    toml.write_text(
        'name = "demo"\n[agents.init]\nbash_sandbox = "none"\n[agents.execute.tools]\nbash_sandbox = "none"\n'
    )
    assert resolve_config("init", scenario_toml=toml, env={}).tools.bash_sandbox == "none"
    assert resolve_config("execute", scenario_toml=toml, env={}).tools.bash_sandbox == "none"
    env = {"BATON_EXECUTE_TOOLS_BASH_SANDBOX": "bwrap"}
    assert resolve_config("execute", scenario_toml=toml, env=env).tools.bash_sandbox == "bwrap"
    assert resolve_config("init", env={"BATON_BASH_SANDBOX": " none "}).tools.bash_sandbox == "none"


def test_the_disk_bound_defaults_to_1024_mb_and_is_set_like_the_others(tmp_path):
    assert resolve_config("execute", env={}).tools.bash_disk_mb == 1024
    toml = tmp_path / "scenario.toml"
    toml.write_text('name = "demo"\n[agents.execute]\nbash_disk_mb = 256\n')
    assert resolve_config("execute", scenario_toml=toml, env={}).tools.bash_disk_mb == 256
    env = {"BATON_EXECUTE_BASH_DISK_MB": "64"}
    assert resolve_config("execute", scenario_toml=toml, env=env).tools.bash_disk_mb == 64
    with pytest.raises(ConfigError, match=r"bash_disk_mb.*BATON_EXECUTE_BASH_DISK_MB"):
        resolve_config("execute", env={"BATON_EXECUTE_BASH_DISK_MB": "0"})


def test_an_unknown_sandbox_is_rejected_with_its_source():
    with pytest.raises(ConfigError, match=r"bash_sandbox.*'off'.*BATON_EXECUTE_BASH_SANDBOX"):
        resolve_config("execute", env={"BATON_EXECUTE_BASH_SANDBOX": "off"})


def test_the_model_is_told_when_bash_is_not_confined():
    from agents.settings_layers import resolve_config
    from agents.tools.registry import tools_for

    def listed(sandbox: str) -> str:
        env = {"BATON_EXECUTE_BASH_ENABLED": "1", "BATON_EXECUTE_BASH_SANDBOX": sandbox}
        return tools_for(resolve_config("execute", env=env))["Bash"].description

    assert "NOT sandboxed" in listed("none") and "NOT sandboxed" not in listed("bwrap")

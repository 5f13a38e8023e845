"""Every command the README and docs/ print runs as printed (issue 38: the README's own commands exited 1).

Commands are read from the documents' shell code blocks and from the README's inline code that starts with
``baton``. The fast tests check each without running it: a ``baton`` command parses (its subcommand, options and
arguments, with click's own parser), a bench script accepts the flags it is given, a pip extra exists, a compose
service exists, an API double's endpoint exists. A line with placeholders (``NAME``, ``<model>``, ``[--epochs
k]``) is a synopsis: its subcommand and options must exist. The slow tests run the README's commands for real,
as a user would after the quick start.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import typer.main
from typer import _click as click  # typer carries its own click (0.29); its commands are of that one

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Programs whose lines are another tool's business (a shell builtin, a system service, Docker's engine,
# which this machine lacks): their presence in a document is not checked here.
EXTERNAL = {"export", "for", "printf", "redis-server", "openssl", "docker", "curl", "inspect", "celery", "AUTH",
            "FLOWER_BASIC_AUTH", "python3", "git", "cd", "apt-get", "redis-cli", "kill", "bash", "rm", "grep", "base64",
            "mktemp"}
PLACEHOLDER = re.compile(r"<[^>]*>|\[[^\]]*\]|\.\.\.|^[A-Z][A-Z_]*$|\|")


@dataclass(frozen=True)
class Command:
    document: str
    line: str

    def __str__(self) -> str:
        return f"{self.document}: {self.line}"


def _blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", text, re.S)


def _lines(block: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", block)  # continuation lines
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()  # a trailing comment
        if line and not line.startswith("#"):
            out.append(line)
    return out


def documented_commands() -> list[Command]:
    found = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(REPO).as_posix()
        for block in _blocks(text):
            for line in _lines(block):
                found += [Command(name, part) for part in _simple_commands(line)]
        if path.name == "README.md":  # the README's inline commands are ones a newcomer types too; a span of
            # two words ("`baton run` dispatches ...") names a command in prose
            found += [Command(name, span) for span in re.findall(r"`(baton [^`]+)`", text) if len(span.split()) > 2]
    return found


def _simple_commands(line: str) -> list[str]:
    """A shell line's simple commands: split at ``&&``, ``;``, ``|``, a subshell's parentheses and a loop's
    keywords, with output redirections and a trailing ``&`` left out."""
    line = re.sub(r"\s\d?>\s*\S+", "", line)
    parts = re.split(r"\s*(?:&&|;|\||\(\s|\s\))\s*", line)
    out = []
    for part in parts:
        part = re.sub(r"^(?:for .* in .*|do|done|then|fi)\b\s*", "", part.strip()).rstrip("&").strip()
        if part and part not in ("(", ")"):
            out.append(part)
    return out


def _words(line: str) -> list[str]:
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value before the program
        words = words[1:]
    return words


def baton_args(words: list[str]) -> list[str] | None:
    """The arguments after ``baton`` (``.venv/bin/baton``, ``docker compose exec SVC baton``), or None."""
    for i, word in enumerate(words):
        if word == "baton" or word.endswith("/bin/baton"):
            return words[i + 1:]
        if word in ("-m",) and i + 1 < len(words) and words[i + 1] == "baton":
            return words[i + 2:]
    return None


@cache
def baton_command() -> click.Command:
    from workers.cli import cli

    command = typer.main.get_command(cli)
    assert hasattr(command, "get_command")
    return command


def _check_baton(args: list[str]) -> str | None:
    """Why ``baton ARGS`` would not parse, or None."""
    group = baton_command()
    synopsis = any(PLACEHOLDER.search(a) for a in args)
    args = [a for a in args if a != "&"]
    # Global options may come before the command (--scenarios-dir DIR, -v).
    while args and args[0].startswith("-"):
        takes_value = args[0] in ("--scenarios-dir", "--log-level")
        args = args[2:] if takes_value else args[1:]
    if not args:
        return None
    name, rest = args[0], args[1:]
    sub = group.get_command(click.Context(group), name)
    if sub is None:
        return f"no command {name!r}"
    if hasattr(sub, "get_command") and rest and not rest[0].startswith("-"):
        inner = sub.get_command(click.Context(sub), rest[0])
        if inner is None:
            return f"no command {name} {rest[0]!r}"
        sub, rest = inner, rest[1:]
    if synopsis:
        known = {opt for param in sub.params for opt in (*param.opts, *param.secondary_opts)}
        for word in rest:
            for option in re.findall(r"(--?[a-z][a-z0-9-]*)", word):
                if option not in known:
                    return f"{name} has no option {option}"
        return None
    try:
        sub.make_context(name, list(rest), resilient_parsing=False)
    except click.exceptions.UsageError as exc:
        return f"{name}: {exc.format_message()}"
    return None


@cache
def _script_help(script: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / script), "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    return done.stdout + done.stderr


def _check_python(words: list[str]) -> str | None:
    if len(words) < 2:
        return None
    if words[1] == "-m":
        module = words[2]
        if module == "pytest":
            for marker in (words[i + 1] for i, w in enumerate(words) if w == "-m" and i > 1):
                if marker.removeprefix("not ").strip() not in ("slow",):
                    return f"pytest marker {marker!r} is not declared"
            return None
        if module == "baton":
            return None  # checked as a baton command
        return None if module in ("agentbreak",) else f"python -m {module}: unknown module"
    script = words[1]
    if not (REPO / script).is_file():
        return f"{script} does not exist"
    shown = _script_help(script)
    for flag in (w.split("=")[0] for w in words[2:] if w.startswith("--")):
        if flag not in shown:
            return f"{script} has no flag {flag}"
    return None


def _check_pip(line: str) -> str | None:
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    for listed in re.findall(r"\.\[([a-z0-9,_-]+)\]", line):
        unknown = set(listed.split(",")) - extras
        if unknown:
            return f"no extra {sorted(unknown)} in pyproject.toml"
    return None


def _compose_services() -> set[str]:
    import yaml

    return set(yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"])


def problem(command: Command) -> str | None:
    line = command.line
    words = _words(line)
    if not words:
        return None
    args = baton_args(words)
    if args is not None:
        if words[0] == "docker" and "exec" in words:
            service = words[words.index("exec") + 1]
            if service not in _compose_services():
                return f"docker-compose.yml has no service {service}"
        return _check_baton(args)
    program = Path(words[0]).name
    if program.startswith("python"):
        if program == "python3" and words[1:3] == ["-m", "venv"]:
            return None
        return _check_python(words)
    if program == "pip":
        return _check_pip(line)
    if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=\$\(", line):
        return None  # a shell variable set from another program's output
    if words[0] == "curl":  # the API double's endpoints, on the port the documents start it on
        for path in re.findall(r"(?:localhost|127\.0\.0\.1):8765(/[a-z_/]*)", line):
            if path.split("/")[1] and f'"{path}' not in _double_routes():
                return f"the API double serves no {path}"
        return None
    if program in EXTERNAL or program.split("=")[0] in EXTERNAL:
        return None
    return f"unknown program {program!r}: check it, or list it in EXTERNAL with why"


@cache
def _double_routes() -> str:
    return "".join(p.read_text(encoding="utf-8") for p in (REPO / "workers" / "fake_api").glob("*.py"))


def test_the_documents_have_commands_to_check() -> None:
    commands = documented_commands()
    assert len(commands) > 40
    assert any(c.document == "README.md" and "baton run refund_desk" in c.line for c in commands)


def test_every_documented_command_parses_as_printed() -> None:
    wrong = [f"{command}\n    -> {why}" for command in documented_commands() if (why := problem(command))]
    assert not wrong, "commands in the documents that would not run as printed:\n" + "\n".join(wrong)


def test_the_check_finds_a_wrong_command() -> None:
    """The check itself: a misspelt option, a missing subcommand, a flag a bench script lacks, an unknown extra."""
    assert problem(Command("x", "baton run refund_desk --auto-aprove"))
    assert problem(Command("x", "baton frobnicate"))
    assert problem(Command("x", "baton try NAME [--epoks k]"))
    assert problem(Command("x", ".venv/bin/python bench/gates_cost.py --no-such-flag"))
    assert problem(Command("x", ".venv/bin/pip install -q -e '.[nonesuch]'"))
    assert problem(Command("x", "docker compose exec nosuchservice baton status"))
    assert problem(Command("x", "baton run refund_desk --auto-approve --profile demo")) is None
    assert problem(Command("x", "baton try NAME [--model M] [--epochs k]")) is None


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    command = next(line for line in ci.splitlines() if line.startswith("python3 -m venv"))
    assert command in readme


# ---- the README's commands, run --------------------------------------------------------------------


@pytest.mark.slow
def test_the_readmes_look_around_commands_run_on_a_finished_run(finished_run, tmp_path: Path) -> None:
    """After the quick start, each inline ``baton`` command of the README, in a folder holding the finished run,
    exits 0 (``baton new mine --from refund_desk`` makes the user's scenario; a brief of one's own is a
    placeholder)."""
    finished_run.copy_to(tmp_path / "scenarios")
    readme = [c.line for c in documented_commands() if c.document == "README.md" and c.line.startswith("baton ")]
    ran = []
    for line in readme:
        args = _words(line)[1:]
        if any(PLACEHOLDER.search(a) for a in args) or args[0] in ("run", "worker", "fake-api", "approve",
                                                                   "reject", "resume"):
            continue  # a synopsis, or a command that starts a run or a service (the quick start ran it)
        done = subprocess.run([sys.executable, "-m", "baton", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=600, env=_env())
        assert done.returncode == 0, f"`{line}` exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        ran.append(line)
    assert {"baton status refund_desk", "baton new mine --from refund_desk"} <= set(ran), ran


def _env() -> dict[str, str]:
    import os

    drop = ("BATON_BROKER_URL", "CELERY_BROKER_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "BATON_SCENARIOS_DIR")
    return {k: v for k, v in os.environ.items() if k not in drop} | {"COLUMNS": "120"}

"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

The compose file is parsed (with PyYAML when it is installed, else with the small
block-YAML reader below, which must agree with PyYAML wherever both run) and
interpolated the way Compose does. Then the very commands it names run on this
machine: its ``redis-server`` command with its password (and its healthcheck), the
three worker commands with its environment, and its Flower command, whose basic
auth is checked over HTTP. Only the host parts are rewritten: the broker's host and
port, Flower's port, and /app (WORKDIR and the scenarios mount) to a temporary
folder. Every process is started in its own session and stopped by its pid.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import pytest

from context.redaction import is_secret_name
from tests.workers_harness import Proc, free_port, wait_for

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
ROLES = ("init", "execute", "compaction")
WORKERS = {f"worker-{role}": role for role in ROLES}
SERVICES = {"redis", "flower", *WORKERS}
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.timeout(180)


# ---- a block-YAML reader (the subset a compose file uses) ---------------------------------
#
# Block mappings and sequences, plain and quoted scalars, one-line flow sequences,
# comments, anchors, aliases and merge keys (<<). No block scalars (| >), no flow
# mappings: the reader refuses what it does not know instead of guessing.


class YamlSubsetError(ValueError):
    pass


class _Line(NamedTuple):
    no: int
    indent: int
    text: str


_KEY = re.compile(
    r"""(?P<key>"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"\[\]{}&*!|>%@`-][^#]*?|-[^\s#][^#]*?):(?:\s+|$)"""
)
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9_]*)")
_FLOAT = re.compile(r"[-+]?(?:[0-9][0-9_]*\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def load_yaml_subset(text: str) -> Any:
    lines = []
    for no, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlSubsetError(f"line {no}: tab in indentation")
        stripped = raw.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        lines.append(_Line(no, len(raw) - len(raw.lstrip(" ")), stripped))
    if not lines:
        return None
    reader = _Reader(lines)
    value, end = reader.block(0, lines[0].indent)
    if end != len(lines):
        raise YamlSubsetError(f"line {lines[end].no}: unexpected indentation")
    return value


class _Reader:
    def __init__(self, lines: list[_Line]):
        self.lines = lines
        self.anchors: dict[str, Any] = {}

    def block(self, i: int, indent: int) -> tuple[Any, int]:
        if self._is_item(self.lines[i].text):
            return self.sequence(i, indent)
        return self.mapping(i, indent)

    @staticmethod
    def _is_item(text: str) -> bool:
        return text == "-" or text.startswith("- ")

    def mapping(self, i: int, indent: int) -> tuple[dict[str, Any], int]:
        own: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        while i < len(self.lines) and self.lines[i].indent == indent and not self._is_item(self.lines[i].text):
            line = self.lines[i]
            match = _KEY.match(line.text)
            if not match:
                raise YamlSubsetError(f"line {line.no}: expected 'key: value', got {line.text!r}")
            key = self._scalar(match["key"].strip(), line)
            anchor, rest = self._anchor(line.text[match.end():].strip(), line)
            i += 1
            if _is_empty(rest):
                nested = i < len(self.lines) and (
                    self.lines[i].indent > indent
                    or (self.lines[i].indent == indent and self._is_item(self.lines[i].text)))
                value, i = self.block(i, self.lines[i].indent) if nested else (None, i)
            else:
                value = self.value(rest, line)
            if anchor:
                self.anchors[anchor] = value
            if key == "<<":
                for source in value if isinstance(value, list) else [value]:
                    if not isinstance(source, dict):
                        raise YamlSubsetError(f"line {line.no}: '<<' needs a mapping")
                    for k, v in source.items():
                        merged.setdefault(k, v)
            elif key in own:
                raise YamlSubsetError(f"line {line.no}: duplicate key {key!r}")
            else:
                own[key] = value
        if i < len(self.lines) and self.lines[i].indent > indent:
            raise YamlSubsetError(f"line {self.lines[i].no}: unexpected indentation")
        return {**merged, **own}, i

    def sequence(self, i: int, indent: int) -> tuple[list[Any], int]:
        items: list[Any] = []
        while i < len(self.lines) and self.lines[i].indent == indent and self._is_item(self.lines[i].text):
            line = self.lines[i]
            rest = line.text[1:].strip()
            if _is_empty(rest):
                i += 1
                nested = i < len(self.lines) and self.lines[i].indent > indent
                value, i = self.block(i, self.lines[i].indent) if nested else (None, i)
            elif _KEY.match(rest) and not rest.startswith(("'", '"', "[")):
                # "- key: value": a mapping whose first line shares the dash's line
                inner = indent + (len(line.text) - len(rest))
                self.lines[i] = _Line(line.no, inner, rest)
                value, i = self.mapping(i, inner)
            else:
                value = self.value(rest, line)
                i += 1
            items.append(value)
        return items, i

    def _anchor(self, rest: str, line: _Line) -> tuple[str | None, str]:
        if not rest.startswith("&"):
            return None, rest
        name, _, rest = rest[1:].partition(" ")
        if not name:
            raise YamlSubsetError(f"line {line.no}: empty anchor")
        return name, rest.strip()

    def value(self, text: str, line: _Line) -> Any:
        if text.startswith("*"):
            name = _strip_comment(text[1:]).strip()
            if name not in self.anchors:
                raise YamlSubsetError(f"line {line.no}: unknown alias *{name}")
            return self.anchors[name]
        if text.startswith("["):
            return self._flow_sequence(text, line)
        if text[0] in "{|>!%@`":
            raise YamlSubsetError(f"line {line.no}: unsupported YAML: {text!r}")
        if text[0] in "'\"":
            quoted, rest = _take_quoted(text, line)
            if not _is_empty(rest):
                raise YamlSubsetError(f"line {line.no}: text after a quoted scalar: {rest!r}")
            return self._scalar(quoted, line)
        return self._scalar(_strip_comment(text).strip(), line)

    def _flow_sequence(self, text: str, line: _Line) -> list[Any]:
        items: list[Any] = []
        rest = text[1:].lstrip()
        while True:
            if rest.startswith("]"):
                if not _is_empty(rest[1:]):
                    raise YamlSubsetError(f"line {line.no}: text after ']'")
                return items
            if rest[:1] in ("'", '"'):
                quoted, rest = _take_quoted(rest, line)
                items.append(self._scalar(quoted, line))
            else:
                match = re.match(r"[^,\]\[{}#]*", rest)
                plain = match.group(0).strip()
                if not plain:
                    raise YamlSubsetError(f"line {line.no}: empty or unsupported flow item in {text!r}")
                items.append(self._scalar(plain, line))
                rest = rest[match.end():]
            rest = rest.lstrip()
            if rest.startswith(","):
                rest = rest[1:].lstrip()
            elif not rest.startswith("]"):
                raise YamlSubsetError(f"line {line.no}: flow sequences must stay on one line: {text!r}")

    @staticmethod
    def _scalar(token: str, line: _Line) -> Any:
        if token[:1] == '"':
            try:
                return json.loads(token)
            except json.JSONDecodeError as exc:
                raise YamlSubsetError(f"line {line.no}: unsupported escape in {token}") from exc
        if token[:1] == "'":
            return token[1:-1].replace("''", "'")
        if token in ("", "~", "null", "Null", "NULL"):
            return None
        if token.lower() in _BOOLS and token in (token.lower(), token.capitalize(), token.upper()):
            return _BOOLS[token.lower()]
        if _INT.fullmatch(token):
            return int(token.replace("_", ""))
        if _FLOAT.fullmatch(token):
            return float(token.replace("_", ""))
        if re.fullmatch(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+", token):
            raise YamlSubsetError(f"line {line.no}: {token!r} is a base-60 number in YAML 1.1: quote it")
        return token


def _take_quoted(text: str, line: _Line) -> tuple[str, str]:
    """The quoted token at the start of ``text`` (quotes included) and what follows it."""
    quote, i = text[0], 1
    while i < len(text):
        if quote == '"' and text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            if quote == "'" and text[i + 1: i + 2] == "'":
                i += 2
                continue
            return text[: i + 1], text[i + 1:]
        i += 1
    raise YamlSubsetError(f"line {line.no}: unterminated quoted scalar")


def _strip_comment(text: str) -> str:
    match = re.search(r"(^|\s)#", text)
    return text[: match.start()] if match else text


def _is_empty(text: str) -> bool:
    return not _strip_comment(text).strip()


def load_compose() -> dict[str, Any]:
    text = COMPOSE.read_text(encoding="utf-8")
    data = load_yaml_subset(text)
    try:
        import yaml  # optional: not a dependency of baton
    except ImportError:
        return data
    assert data == yaml.safe_load(text), "the YAML subset reader and PyYAML disagree on docker-compose.yml"
    return data


# ---- Compose's variable interpolation -------------------------------------------------------


class MissingVariable(LookupError):
    pass


_VAR = re.compile(r"""\$(?:(?P<escaped>\$)
                         |\{(?P<braced>[_A-Za-z][_A-Za-z0-9]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}
                         |(?P<named>[_A-Za-z][_A-Za-z0-9]*))""", re.VERBOSE)


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?error}``, ``${VAR?error}``,
    ``${VAR:+other}``, ``${VAR+other}``, ``$VAR`` and ``$$``, in every string of ``value``."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["named"]
        op, arg, current = match["op"], match["arg"], env.get(name)
        present = current is not None and (current != "" or not (op or "").startswith(":"))
        if op in ("-", ":-"):
            return current if present else arg
        if op in ("?", ":?"):
            if not present:
                raise MissingVariable(f"{name}: {arg}")
            return current
        if op in ("+", ":+"):
            return arg if present else ""
        return current or ""

    return _VAR.sub(one, value)


PASSWORD = "c0ffee15a5ecret9"
FLOWER_PASSWORD = "f10werpa55"
COMPOSE_ENV = {"REDIS_PASSWORD": PASSWORD, "FLOWER_PASSWORD": FLOWER_PASSWORD}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def services(compose) -> dict[str, Any]:
    """The services as Compose runs them: interpolated with the two passwords set and
    nothing else (no ANTHROPIC_API_KEY, FLOWER_USER, ports or uid from this machine)."""
    return interpolate(compose["services"], COMPOSE_ENV)


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


# ---- the YAML reader itself -------------------------------------------------------------------


def test_yaml_subset_reader_reads_what_compose_files_use():
    text = """
x-base: &base   # a comment
  image: "img:1"
  list: [a, 'b c', "d#e"]
svc:
  <<: *base
  image: other      # overrides the merged key
  ports:
  - "127.0.0.1:80:80"
  - ./a:/b
  items:
    - name: one
      n: 1
    - two
  enabled: yes
  empty:
  q: 'it''s'
"""
    assert load_yaml_subset(text) == {
        "x-base": {"image": "img:1", "list": ["a", "b c", "d#e"]},
        "svc": {"image": "other", "list": ["a", "b c", "d#e"], "ports": ["127.0.0.1:80:80", "./a:/b"],
                "items": [{"name": "one", "n": 1}, "two"], "enabled": True, "empty": None, "q": "it's"},
    }
    for bad in ("a: |\n  text\n", "a: {b: 1}\n", "a: 1\n  b: 2\n", "a: 1\na: 2\n", "a: *nope\n", "p: 22:22\n"):
        with pytest.raises(YamlSubsetError):
            load_yaml_subset(bad)


def test_interpolation_follows_compose_rules():
    env = {"SET": "v", "EMPTY": ""}
    assert interpolate("${SET}|${UNSET}|$SET|$$SET", env) == "v||v|$SET"
    assert interpolate("${UNSET:-d}|${EMPTY:-d}|${EMPTY-d}|${SET:-d}", env) == "d|d||v"
    assert interpolate("${SET:+x}|${EMPTY:+x}|${EMPTY+x}", env) == "x||x"
    assert interpolate("${SET:?boom}", env) == "v"
    for missing in ("${UNSET:?boom}", "${EMPTY:?boom}", "${UNSET?boom}"):
        with pytest.raises(MissingVariable):
            interpolate(missing, env)


# ---- the compose file, read ------------------------------------------------------------------


def test_compose_has_redis_three_workers_and_flower(compose):
    assert set(compose["services"]) == SERVICES


def test_compose_refuses_to_start_without_the_passwords(compose):
    for variable in ("REDIS_PASSWORD", "FLOWER_PASSWORD"):
        env = {k: v for k, v in COMPOSE_ENV.items() if k != variable}
        with pytest.raises(MissingVariable, match=variable):
            interpolate(compose["services"], env)


def test_redis_requires_a_password_and_is_published_on_loopback_only(services):
    redis = services["redis"]
    assert redis["image"].startswith("redis:7")
    shell, flag, script = redis["command"]
    assert (shell, flag) == ("sh", "-c")
    # redis-server through the image's entrypoint (which drops to the redis user), its config on stdin
    assert script.startswith("exec docker-entrypoint.sh redis-server ") and "requirepass" in script
    assert " - <<EOF\n" in script, "Redis reads '-' (config from stdin) only as its first or last argument"
    health = redis["healthcheck"]["test"]
    assert health[0] == "CMD-SHELL" and "redis-cli" in health[1] and "REDISCLI_AUTH=" in health[1]
    assert environment(redis)["REDIS_PASSWORD"] == PASSWORD  # what $REDIS_PASSWORD reads in the container
    for port in redis.get("ports", []):
        assert str(port).startswith("127.0.0.1:"), f"Redis published beyond loopback: {port}"


@pytest.mark.parametrize("service", sorted(WORKERS))
def test_worker_service(services, service):
    role = WORKERS[service]
    worker = services[service]
    assert worker["command"] == ["baton", "worker", role, "--concurrency", "1"]  # BATON_<ROLE>_CONCURRENCY unset
    assert worker["build"] and worker["image"] == services["flower"]["image"]
    assert worker["depends_on"] == {"redis": {"condition": "service_healthy"}}
    assert worker["restart"] == "unless-stopped"
    env = environment(worker)
    broker = urlsplit(env["BATON_BROKER_URL"])
    assert (broker.scheme, broker.hostname, broker.port, broker.path) == ("redis", "redis", 6379, "/0")
    assert broker.password == PASSWORD
    assert env["ANTHROPIC_API_KEY"] == ""  # unset here, so the simulated model; never a literal
    scenarios = env["BATON_SCENARIOS_DIR"]
    assert scenarios == "/app/scenarios"
    assert "./scenarios:/app/scenarios" in worker["volumes"]
    user = worker.get("user", "")
    assert user and user.split(":")[0] not in ("0", "root"), "workers must not run as root"


def test_execute_worker_gets_the_longest_stop_grace_period(services):
    def seconds(value: str) -> float:
        units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
        return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(h|ms|us|m|s)", value))

    grace = {role: seconds(services[f"worker-{role}"].get("stop_grace_period", "10s")) for role in ROLES}
    assert grace["execute"] >= max(grace.values()) and grace["execute"] > 10


def test_the_step_workers_may_make_bubblewrap_sandboxes(services):
    # What bwrap needs in a container (docs/deployment.md, "The sandbox in a container"): namespaces
    # (seccomp), mounts (AppArmor), a /proc of its own (unmasked system paths). No more than that: no
    # privileged container, no added capability; the compaction worker runs no model code and keeps the defaults.
    needed = {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"}
    for role in ("init", "execute"):
        worker = services[f"worker-{role}"]
        assert set(worker.get("security_opt", [])) == needed
        assert not worker.get("privileged") and not worker.get("cap_add")
    assert not services["worker-compaction"].get("security_opt")


def test_the_compaction_worker_outweighs_the_step_workers(services):
    # Containers share the CPU by cgroup weight before any niceness inside them counts.
    shares = {role: int(services[f"worker-{role}"].get("cpu_shares", 1024)) for role in ROLES}
    assert shares["compaction"] > shares["init"] and shares["compaction"] > shares["execute"]


def test_anthropic_key_comes_from_the_environment(compose):
    raw = [environment(compose["services"][service]).get("ANTHROPIC_API_KEY") for service in WORKERS]
    for value in raw:
        assert re.fullmatch(r"\$\{ANTHROPIC_API_KEY(:?-)?\}", value or ""), f"not taken from the environment: {value!r}"
    real = interpolate(compose["services"], {**COMPOSE_ENV, "ANTHROPIC_API_KEY": "sk-ant-from-the-shell"})
    assert {environment(real[s])["ANTHROPIC_API_KEY"] for s in WORKERS} == {"sk-ant-from-the-shell"}
    for service in ("flower", "redis"):
        assert "ANTHROPIC_API_KEY" not in environment(real[service])


def test_no_secret_is_written_in_the_files(compose):
    assert "sk-ant" not in COMPOSE.read_text()
    raw = compose["services"]
    for name, service in raw.items():
        for key, value in environment(service).items():
            if is_secret_name(key):
                # only ${VAR} references (user:password joins two of them)
                assert re.fullmatch(r"(?:\$\{\w+(?::?[-?][^}]*)?\}|:)+", value), \
                    f"{name}.{key} is not from the environment"
        broker = environment(service).get("BATON_BROKER_URL")
        if broker is not None:
            assert re.fullmatch(r"redis://:\$\{REDIS_PASSWORD(:\?[^}]*)?\}@redis:6379/0", broker), broker
    assert "$$REDIS_PASSWORD" in raw["redis"]["command"][2]  # expanded by the container's shell, not by Compose
    basic_auth = environment(raw["flower"])["FLOWER_BASIC_AUTH"]
    assert re.fullmatch(r"\$\{FLOWER_USER(:-\w+)?\}:\$\{FLOWER_PASSWORD(:\?[^}]*)?\}", basic_auth)
    # nothing secret is baked into the image: no ENV or ARG named like a secret
    dockerfile = DOCKERFILE.read_text()
    assert "sk-ant" not in dockerfile
    for instruction in re.sub(r"\\\n", " ", dockerfile).splitlines():
        op, _, args = instruction.strip().partition(" ")
        if op in ("ENV", "ARG"):
            names = re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)(?==|\s|$)", args)
            baked = [n for n in names if is_secret_name(n)]
            assert not baked, f"the Dockerfile bakes {op} {baked}"


def test_flower_has_basic_auth_on_port_5555(services, compose):
    flower = services["flower"]
    command = flower["command"]
    assert command[:4] == ["celery", "-A", "workers.app", "flower"]
    assert "--port=5555" in command
    assert environment(flower)["FLOWER_BASIC_AUTH"] == f"admin:{FLOWER_PASSWORD}"  # FLOWER_USER defaults to admin
    assert any(str(p).endswith("5555:5555") for p in flower["ports"])
    renamed = interpolate(compose["services"], {**COMPOSE_ENV, "FLOWER_USER": "ops"})["flower"]
    assert environment(renamed)["FLOWER_BASIC_AUTH"] == f"ops:{FLOWER_PASSWORD}"
    # Flower reads every FLOWER_* variable as an option and refuses names it does not know
    from flower.options import options

    flower_env = {name: value for name, value in environment(flower).items() if name.startswith("FLOWER_")}
    known = set(options._options)  # tornado's option names, with dashes
    assert all(name.removeprefix("FLOWER_").lower().replace("_", "-") in known for name in flower_env), flower_env
    assert {"args", "kwargs", "result"} <= set(flower_env["FLOWER_TASKS_COLUMNS"].split(","))
    assert urlsplit(environment(flower)["BATON_BROKER_URL"]).password == PASSWORD
    assert flower["depends_on"] == {"redis": {"condition": "service_healthy"}}


def test_no_password_on_any_command_line(services):
    """`ps` on the host and `docker inspect` show commands: the passwords reach the processes
    by their environment only (Redis's as configuration on its standard input)."""
    for name, service in services.items():
        shown = [service.get("command") or [], (service.get("healthcheck") or {}).get("test") or []]
        for argv in shown:
            text = " ".join(argv) if isinstance(argv, list) else str(argv)
            for secret in (PASSWORD, FLOWER_PASSWORD):
                assert secret not in text, f"{name}: a password on its command line: {text}"


def test_docker_compose_itself_accepts_the_file_and_puts_no_password_on_a_command_line(tmp_path):
    """`docker-compose config` (Compose 1.x, no engine needed) validates and interpolates the file."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    yaml = pytest.importorskip("yaml")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), **COMPOSE_ENV}
    argv = [binary, "--project-directory", str(REPO), "-f", str(COMPOSE), "config"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(done.stdout)["services"]
    assert set(config) == SERVICES
    for name, service in config.items():
        shown = " ".join([*service.get("command", []), *service.get("healthcheck", {}).get("test", [])])
        assert PASSWORD not in shown and FLOWER_PASSWORD not in shown, f"{name}: {shown}"
    assert config["flower"]["environment"]["FLOWER_BASIC_AUTH"] == f"admin:{FLOWER_PASSWORD}"
    missing = subprocess.run(argv, env={k: v for k, v in env.items() if k != "FLOWER_PASSWORD"},
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode != 0 and "FLOWER_PASSWORD" in missing.stderr


def test_dockerfile_builds_a_non_root_image_of_the_project():
    text = DOCKERFILE.read_text()
    instructions = [line.split(None, 1) for line in re.sub(r"\\\n", " ", text).splitlines()
                    if line.strip() and not line.lstrip().startswith("#")]
    assert instructions[0] == ["FROM", "python:3.11-slim"]
    workdirs = [arg.strip() for op, arg in instructions if op == "WORKDIR"]
    users = [arg.strip() for op, arg in instructions if op == "USER"]
    assert workdirs[-1] == "/app"
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert instructions[-1] == ["CMD", '["baton", "--help"]']
    assert re.search(r"pip install \.(\s|$)", text)
    # every top-level package the wheel is built from (setup.py finds them with their subpackages; the
    # example is package data inside them) and the prompts/ folder setup.py maps to baton.prompts are
    # copied in and let through the .dockerignore allowlist
    setup_py = ast.parse((REPO / "setup.py").read_text())
    include = next(k.value for k in ast.walk(setup_py) if isinstance(k, ast.keyword) and k.arg == "include")
    packages = sorted({pattern.rstrip("*").split(".")[0] for pattern in ast.literal_eval(include)} | {"prompts"})
    copied = {arg.split()[0] for op, arg in instructions if op == "COPY"}
    ignore = DOCKERIGNORE.read_text().splitlines()
    assert ignore[[line.strip() for line in ignore].index("*")] == "*", ".dockerignore must be an allowlist"
    for folder in packages:
        assert folder in copied, f"the Dockerfile does not copy {folder}/"
        assert f"!{folder}/" in ignore or f"!{folder}/*.py" in ignore, f".dockerignore drops {folder}/"


# ---- the compose commands, run on this machine ------------------------------------------------


def _command(argv: list[str]) -> list[str]:
    """A compose command with its program taken from this venv (as installed in the image)."""
    program = VENV_BIN / argv[0]
    if argv[0] == "baton" and not program.exists():
        # Until the `baton` entry point is installed, run the command it wraps.
        assert argv[1] == "worker", argv
        role = argv[2]
        warnings.warn("`baton` is not installed in this venv: ran `celery -A workers.app worker` "
                      "with the arguments `baton worker` passes", stacklevel=2)
        return [str(VENV_BIN / "celery"), "-A", "workers.app", "worker", "-Q", role, "-n", f"{role}@%h",
                "-c", "1", "-E", "--loglevel=INFO"]
    return [str(program if program.exists() else argv[0]), *argv[1:]]


def _process_env(service: dict[str, Any], broker_url: str, app_dir: Path) -> dict[str, str]:
    """The service's environment from compose, with the host parts rewritten, plus what the
    image sets; nothing else is inherited (no API key, no FLOWER_* options)."""
    env = environment(service)
    if "BATON_BROKER_URL" in env:
        env["BATON_BROKER_URL"] = broker_url
    if "BATON_SCENARIOS_DIR" in env:
        env["BATON_SCENARIOS_DIR"] = str(app_dir / Path(env["BATON_SCENARIOS_DIR"]).relative_to("/app"))
    return {
        "PATH": os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "/usr/bin:/bin")]),
        "HOME": str(app_dir.parent / "home"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLCONFIGDIR": str(app_dir.parent / "matplotlib"),
        **env,
    }


def _start(name: str, argv: list[str], env: dict[str, str], cwd: Path, logs: Path) -> Proc:
    logfile = logs / f"{name}.log"
    with logfile.open("ab") as out:
        popen = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    return Proc(name, popen, logfile)


class Deployment(NamedTuple):
    port: int
    broker_url: str  # the compose's BATON_BROKER_URL with the host and port rewritten
    app_dir: Path  # stands for /app: the working directory, with scenarios/ inside
    logs: Path


@pytest.fixture(scope="module")
def deployment(services, tmp_path_factory):
    """The compose's redis-server command on a free loopback port (its password kept)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    base = tmp_path_factory.mktemp("deployment")
    logs, app_dir, data = base / "logs", base / "app", base / "redis-data"
    for folder in (logs, app_dir / "scenarios", base / "home", data):
        folder.mkdir(parents=True)
    port = free_port()
    shell, flag, script = services["redis"]["command"]
    # No image entrypoint here: the local binary, with the host options before the final "-" (stdin).
    host_options = f"--port {port} --bind 127.0.0.1 --dir {shlex.quote(str(data))} --save ''"
    script = script.replace("docker-entrypoint.sh redis-server", shlex.quote(binary), 1)
    script = script.replace(" - <<EOF", f" {host_options} - <<EOF", 1)
    env = {**environment(services["redis"]), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = _start("redis", [shell, flag, script], env, data, logs)
    try:
        def answers() -> bool:
            if not proc.running():
                pytest.fail(f"redis-server exited with {proc.popen.returncode}\n{proc.tail()}")
            return _redis_ping(port, PASSWORD) == "PONG"

        wait_for(answers, "redis-server to answer PING", timeout=20, interval=0.1, diagnose=proc.tail)
        # the shell exec'd redis-server (so it gets docker stop's SIGTERM), and `ps` shows no password
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace")
        assert "redis-server" in cmdline and PASSWORD not in cmdline, cmdline
        broker = urlsplit(environment(services["worker-init"])["BATON_BROKER_URL"])
        local = broker._replace(netloc=f":{broker.password}@127.0.0.1:{port}").geturl()
        yield Deployment(port, local, app_dir, logs)
    finally:
        proc.stop(grace=5)


def _redis_ping(port: int, password: str | None) -> str:
    argv = ["redis-cli", "-h", "127.0.0.1", "-p", str(port), "ping"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if password is not None:
        env["REDISCLI_AUTH"] = password
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=10, check=False)
    return done.stdout.strip()


def _healthcheck(services, port: int, password: str) -> int:
    """Run the compose's healthcheck as Docker would (sh -c, in the redis container's
    environment), pointed at the private port."""
    test = services["redis"]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL"
    script = test[1].replace("redis-cli", f"redis-cli -h 127.0.0.1 -p {port}", 1)
    env = {**environment(services["redis"]), "REDIS_PASSWORD": password,
           "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, timeout=10, check=False).returncode


@pytest.mark.slow  # a real redis-server, workers and Flower
def test_redis_refuses_clients_without_the_password(deployment, services):
    assert _redis_ping(deployment.port, None).startswith("NOAUTH")
    assert _redis_ping(deployment.port, PASSWORD) == "PONG"
    assert _healthcheck(services, deployment.port, PASSWORD) == 0
    assert _healthcheck(services, deployment.port, "wrong") != 0


@pytest.mark.slow  # a real redis-server, workers and Flower
def test_worker_commands_start_and_consume_their_queues(deployment, services):
    from workers.app import make_app

    procs = {}
    try:
        for service, role in WORKERS.items():
            env = _process_env(services[service], deployment.broker_url, deployment.app_dir)
            procs[role] = _start(service, _command(services[service]["command"]), env, deployment.app_dir,
                                 deployment.logs)

        def diagnose() -> str:
            return "\n".join(f"--- {p.name} ({'running' if p.running() else p.popen.returncode})\n{p.tail(2500)}"
                             for p in procs.values())

        app = make_app(deployment.broker_url)
        try:
            def ready() -> dict[str, str] | None:
                dead = [p.name for p in procs.values() if not p.running()]
                if dead:
                    pytest.fail(f"{dead} exited before it was ready\n{diagnose()}")
                names = [name for reply in app.control.ping(timeout=0.5) for name in reply]
                found = {role: name for role in ROLES for name in names if name.startswith(f"{role}@")}
                return found if len(found) == len(ROLES) else None

            names = wait_for(ready, "the three workers to answer ping", timeout=60, interval=0.2, diagnose=diagnose)
            inspect = app.control.inspect(destination=list(names.values()), timeout=2)

            def replies(method: str) -> dict[str, Any] | None:
                answer = getattr(inspect, method)() or {}
                return answer if set(answer) >= set(names.values()) else None

            queues = wait_for(lambda: replies("active_queues"), "active_queues replies", timeout=30, diagnose=diagnose)
            stats = wait_for(lambda: replies("stats"), "stats replies", timeout=30, diagnose=diagnose)
            for role, name in names.items():
                assert [q["name"] for q in queues[name]] == [role], f"{name} consumes {queues.get(name)}"
                assert stats[name]["pool"]["max-concurrency"] == 1, f"{name}: {stats[name]['pool']}"
        finally:
            app.close()
        # docker stop sends SIGTERM: each worker must shut down (warm) well within its grace period
        for proc in procs.values():
            os.killpg(proc.pid, signal.SIGTERM)
        for role, proc in procs.items():
            try:
                proc.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker {role} ignored SIGTERM for 30 s\n{proc.tail()}")
    finally:
        for proc in procs.values():
            proc.stop(grace=5)


@pytest.mark.slow  # a real redis-server, workers and Flower
def test_flower_command_requires_basic_auth(deployment, services):
    flower = services["flower"]
    port = free_port()
    argv = [arg.replace("--port=5555", f"--port={port}") for arg in _command(flower["command"])]
    argv.append("--address=127.0.0.1")  # this machine only; in compose the port mapping decides
    env = _process_env(flower, deployment.broker_url, deployment.app_dir)
    user_pass = env["FLOWER_BASIC_AUTH"]
    base = f"http://127.0.0.1:{port}"
    proc = _start("flower", argv, env, deployment.app_dir, deployment.logs)
    try:
        def status(credentials: str | None, path: str = "/api/workers") -> int | None:
            if not proc.running():
                pytest.fail(f"flower exited with {proc.popen.returncode}\n{proc.tail()}")
            request = urllib.request.Request(base + path)
            if credentials is not None:
                request.add_header("Authorization", "Basic " + base64.b64encode(credentials.encode()).decode())
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    body = response.read()
                    if path.startswith("/api/"):
                        json.loads(body)
                    return response.status
            except urllib.error.HTTPError as exc:
                return exc.code
            except OSError:
                return None  # not listening yet

        assert wait_for(lambda: status(None), "flower to listen", timeout=45, interval=0.2, diagnose=proc.tail) == 401
        assert status("admin:wrong") == 401
        assert status(None, "/") == 401 and status(None, "/api/tasks") == 401
        assert status(user_pass) == 200
        assert status(user_pass, "/api/tasks") == 200
        assert user_pass == f"admin:{FLOWER_PASSWORD}"
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace")
        assert "flower" in cmdline and FLOWER_PASSWORD not in cmdline, cmdline
    finally:
        proc.stop(grace=10)

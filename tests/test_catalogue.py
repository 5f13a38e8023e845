"""Model lines resolved through the Models API, pinned in run.json for the life of a run."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from agents.catalogue import CatalogueEntry, CatalogueError, apply_pin, resolve
from agents.config import AgentConfig
from agents.disk import AgentDisk
from agents.models import ModelRequest, ModelResponse
from scenarios.run import load_run
from tests.agent_run import started_example
from workers.cli import cli
from workers.loop import Team


def _model(id: str, line: str | None, lifecycle: str = "active", created: str = "2026-01-01", window: int = 1_000_000,
           output: int = 64_000, retires: str | None = None) -> dict:
    return {"type": "model", "id": id, "display_name": id, "line": line, "lifecycle": lifecycle,
            "created_at": f"{created}T00:00:00Z", "max_input_tokens": window, "max_tokens": output,
            "retires_at": f"{retires}T00:00:00Z" if retires else None,
            "deprecated_at": "2026-05-01T00:00:00Z" if lifecycle != "active" else None}


CATALOGUE = [
    _model("claude-opus-5-5", "opus", created="2026-09-01", output=128_000),
    _model("claude-opus-4-6", "opus", created="2026-02-01"),
    _model("claude-sonnet-5-5", "sonnet", created="2026-09-15"),
    _model("claude-sonnet-4-6", "sonnet", created="2026-02-15"),
    _model("claude-sonnet-4-5", "sonnet", "deprecated", created="2025-09-29", window=200_000, retires="2026-11-30"),
    _model("claude-opus-4-1", "opus", "retired", created="2025-08-05", window=200_000, retires="2026-06-05"),
    _model("claude-haiku-5-5", "haiku", created="2026-10-01", window=200_000),
]
ENTRIES = [CatalogueEntry.model_validate(m) for m in CATALOGUE]


# ---- resolution ---------------------------------------------------------------------


@pytest.mark.parametrize("asked, expected", [("opus", "claude-opus-5-5"), ("sonnet", "claude-sonnet-5-5"),
                                             ("haiku", "claude-haiku-5-5"), ("claude-opus-4-6", "claude-opus-4-6")])
def test_a_line_means_its_newest_active_model_and_an_id_itself(asked, expected):
    pin = resolve(asked, ENTRIES)
    assert pin.id == expected and pin.asked == asked and pin.lifecycle == "active" and pin.warning is None


def test_a_deprecated_model_is_pinned_with_its_retirement_date():
    pin = resolve("claude-sonnet-4-5", ENTRIES)
    assert pin.lifecycle == "deprecated" and pin.retires_at == "2026-11-30"
    assert "retires on 2026-11-30" in pin.warning and "'sonnet'" in pin.warning


def test_a_retired_model_is_refused_with_its_date_naming_the_lines_current_model():
    with pytest.raises(CatalogueError, match=r"claude-opus-4-1 was retired on 2026-06-05 and can no longer be called; "
                                             r"set model = 'claude-opus-5-5' \(the opus line's current model\) or "
                                             r"model = 'opus'"):
        resolve("claude-opus-4-1", ENTRIES)


def test_an_unknown_model_is_refused_listing_the_current_ones():
    with pytest.raises(CatalogueError, match=r"unknown model 'claude-sonnet-4'.*sonnet → claude-sonnet-5-5"):
        resolve("claude-sonnet-4", ENTRIES)


def test_a_line_without_an_active_model_is_refused():
    entries = [e for e in ENTRIES if e.id != "claude-haiku-5-5"]
    entries.append(CatalogueEntry(id="claude-haiku-4-5", line="haiku", lifecycle="deprecated",
                                  created_at=datetime(2025, 10, 1)))
    with pytest.raises(CatalogueError, match="the haiku line has no active model"):
        resolve("haiku", entries)


def test_the_window_is_capped_at_the_models_with_the_threshold_scaled():
    execute = AgentConfig(role="execute")  # 1M / 700K
    pinned = apply_pin(execute, resolve("claude-sonnet-4-5", ENTRIES))  # a 200K model
    assert (pinned.context.window, pinned.context.threshold) == (200_000, 140_000)
    assert pinned.model.name == "claude-sonnet-4-5" and pinned.model.max_output_tokens == 64_000
    init = apply_pin(AgentConfig(role="init"), resolve("opus", ENTRIES))  # 200K working window on a 1M model
    assert (init.context.window, init.context.threshold) == (200_000, 150_000)
    assert init.model.name == "claude-opus-5-5" and init.model.max_output_tokens == 128_000


def test_output_per_step_is_capped_at_the_models_limit():
    config = AgentConfig(role="init", max_tokens=32_000)
    small = CatalogueEntry(id="claude-x", line="x", created_at=datetime(2026, 1, 1), max_input_tokens=200_000,
                           max_tokens=16_000)
    assert apply_pin(config, resolve("x", [small])).context.max_tokens == 16_000


# ---- through the real SDK, over HTTP, pinned in run.json -----------------------------------------


class _Catalogue(BaseHTTPRequestHandler):
    models: list[dict] = CATALOGUE
    calls: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).calls.append(self.path)
        # SDK 2.x sends the key as a bearer token; older clients as x-api-key.
        if self.headers.get("authorization") != "Bearer test-key" and self.headers.get("x-api-key") != "test-key":
            return self._send(401, {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}})
        if self.path.startswith("/v1/models"):
            # As the API: retired models only when the lifecycle filter asks for them.
            asked = parse_qs(urlsplit(self.path).query).get("lifecycle[]") or ["active", "deprecated"]
            listed = [m for m in self.models if m["lifecycle"] in asked]
            ids = [m["id"] for m in listed] or [None]
            return self._send(200, {"data": listed, "has_more": False, "first_id": ids[0], "last_id": ids[-1]})
        self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def catalogue_url() -> Iterator[str]:
    _Catalogue.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Catalogue)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _RealLabel:
    """A model that says it is the real API: only its label matters for pinning."""

    label = "anthropic"

    def create(self, request: ModelRequest) -> ModelResponse:  # pragma: no cover - no step runs here
        raise AssertionError("no step should run")


def test_a_run_resolves_its_lines_once_and_keeps_them(tmp_path, catalogue_url):
    root = started_example(tmp_path)
    env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": catalogue_url}
    team = Team(root, model=_RealLabel(), env=env)
    assert team["init"].config.model.name == "claude-opus-5-5"
    assert team["execute"].config.model.name == "claude-sonnet-5-5"
    pins = load_run(root).models
    assert pins["init"]["id"] == "claude-opus-5-5" and pins["execute"]["asked"] == "sonnet"
    asked = len(_Catalogue.calls)
    # A newer sonnet appears: the running scenario keeps its pinned model and asks nothing.
    _Catalogue.models = [*CATALOGUE, _model("claude-sonnet-6", "sonnet", created="2026-11-20")]
    try:
        again = Team(root, model=_RealLabel(), env=env)
    finally:
        _Catalogue.models = CATALOGUE
    assert again["execute"].config.model.name == "claude-sonnet-5-5"
    # All it asks is whether a pinned model has retired since.
    assert _Catalogue.calls[asked:] == ["/v1/models?lifecycle%5B%5D=retired"]


def test_a_deprecated_model_warns_in_the_events_and_status(tmp_path, catalogue_url):
    root = started_example(tmp_path, '\n[agents.execute]\nmodel = "claude-sonnet-4-5"\n')
    env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": catalogue_url}
    team = Team(root, model=_RealLabel(), env=env)
    assert team["execute"].config.context.window == 200_000  # the model's real window
    warnings = [e for e in AgentDisk.load(root, "execute").events if e.kind == "warning"]
    assert len(warnings) == 1 and "retires on 2026-11-30" in warnings[0].reason
    shown = CliRunner().invoke(cli, ["--scenarios-dir", str(root.parent), "status", root.name], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "claude-sonnet-4-5 (deprecated, retires 2026-11-30)" in shown.output and "claude-opus-5-5" in shown.output


def test_a_retired_model_stops_the_run_before_any_step(tmp_path, catalogue_url):
    root = started_example(tmp_path, '\n[agents.init]\nmodel = "claude-opus-4-1"\n')
    env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": catalogue_url}
    with pytest.raises(CatalogueError, match="claude-opus-4-1 was retired on 2026-06-05.*'claude-opus-5-5'"):
        Team(root, model=_RealLabel(), env=env)
    assert load_run(root).models == {} and not (root / "state" / "init" / "log.jsonl").exists()


def test_offline_nothing_is_resolved(tmp_path):
    root = started_example(tmp_path)
    team = Team(root, env={})
    assert team["init"].config.model.name == "opus" and load_run(root).models == {}

"""The HTTP side of the double: routes, headers, JSON in and out (stdlib ``ThreadingHTTPServer``).

| route | what |
|---|---|
| ``POST /v1/messages`` | checked (``rules``), maybe faulted (``faults``), answered (``answer``), cache-accounted, |
| | then held back by the injected delay (``latency``) |
| ``POST /v1/messages/count_tokens`` | ``{"input_tokens": N}``, the same count |
| ``GET /v1/models``, ``GET /v1/models/{id}`` | the catalogue (``catalogue``) |
| ``POST /faults``, ``GET /faults``, ``DELETE /faults`` | queue, list, clear model faults |
| ``GET /stats`` | counts (``stats``) |
| ``POST /clock``, ``GET /clock`` | move the cache's clock forward, read it (``clock``) |

A message request with ``compaction`` is a compaction request (``compaction``); a compaction block sent
back is checked and adopted first (``compaction_block``); ``context_management`` edits what the model
reads, bills and caches after the prefix check (``editing``).

``/v1/`` routes need a key and ``anthropic-version``. The key is an ``x-api-key`` header
or, as SDK 2.x sends it, ``Authorization: Bearer <key>``; any value will do (the double
checks presence only). It is never logged, stored or echoed.

Each request has its own thread (``ThreadingHTTPServer``), so a reply held back by
``latency`` or a ``hang`` fault never holds up another request. What the threads share is
locked where it changes: ``Stats``, ``PromptCache``, ``FaultQueue`` and the jitter RNG of
``Latency``; the catalogue is read-only once built and the simulated model keeps no
per-request state (its script plays from the conversation each request carries).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import ValidationError

from agents.simulated import SUMMARY_ASK, SimulatedModel
from workers.fake_api import compaction, editing
from workers.fake_api.answer import answer, prewarmed
from workers.fake_api.cache import PromptCache
from workers.fake_api.catalogue import Catalogue, CatalogueError
from workers.fake_api.clock import ClockMove, MovableClock
from workers.fake_api.compaction_block import adopt, as_read
from workers.fake_api.faults import FaultError, FaultOrder, FaultQueue, apply
from workers.fake_api.latency import Latency
from workers.fake_api.rules import ApiError, CheckedRequest, check, invalid
from workers.fake_api.stats import Stats
from workers.fake_api.thinking import (
    BINDING_BETA,
    Checked,
    Start,
    cache_settings,
    check_parameters,
    preserves_thinking,
    sign_reply,
)
from workers.fake_api.thinking import check as check_thinking

log = logging.getLogger(__name__)
DEFAULT_HANG_S = 30.0
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)  # an api_error fault's retry-after, x-should-retry


@dataclass
class FakeApi:
    """The double's state and its routes, free of HTTP plumbing (the handler below does that)."""

    catalogue: Catalogue = field(default_factory=Catalogue)
    cache: PromptCache = field(default_factory=PromptCache)
    faults: FaultQueue = field(default_factory=FaultQueue)
    stats: Stats = field(default_factory=Stats)
    model: SimulatedModel = field(default_factory=SimulatedModel)
    hang_s: float = DEFAULT_HANG_S
    latency: Latency = field(default_factory=Latency)  # none by default
    sleep: Callable[[float], None] = time.sleep
    serial: itertools.count = field(default_factory=itertools.count, repr=False)  # replies signed so far
    clock: MovableClock = field(init=False, repr=False)  # the cache's clock, which POST /clock moves

    def __post_init__(self) -> None:
        # Wrap the cache's own clock (a test may have given it one): /clock moves time on from there.
        self.clock = MovableClock(self.cache.clock)
        self.cache.clock = self.clock

    def handle(self, method: str, url: str, headers: dict[str, str], body: bytes) -> Reply:
        parts = urlsplit(url)
        path, query = parts.path.rstrip("/") or "/", parse_qs(parts.query)
        endpoint = f"{method} {'/v1/models/{id}' if path.startswith('/v1/models/') else path}"
        self.stats.request(endpoint)
        try:
            if path.startswith("/v1/"):
                _check_headers(headers)
            return self._route(method, path, query, headers, body)
        except ApiError as err:
            self.stats.error(err.status, err.error_type)
            return Reply(err.status, err.body(), err.headers if isinstance(err, FaultError) else {})
        except Exception as err:  # a bug of the double: answer as the API does, keep serving
            log.exception("the fake API failed on %s %s", method, path)
            self.stats.error(500, "api_error")
            return Reply(500, ApiError(500, "api_error", f"the fake API failed: {type(err).__name__}").body())

    def _route(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str],
               body: bytes) -> Reply:
        if (method, path) == ("POST", "/v1/messages"):
            return self.messages(body, headers)
        if (method, path) == ("POST", "/v1/messages/count_tokens"):
            return self.count_tokens(body, headers)
        if (method, path) == ("GET", "/v1/models"):
            return Reply(200, self.models_page(query))
        if method == "GET" and path.startswith("/v1/models/"):
            entry = self.catalogue.get(unquote(path.removeprefix("/v1/models/")))
            if entry is None:
                raise ApiError(404, "not_found_error", f"model: {unquote(path.removeprefix('/v1/models/'))}")
            return Reply(200, entry.api())
        if path == "/faults" and method in ("GET", "POST", "DELETE"):
            return self.fault_control(method, body)
        if (method, path) == ("GET", "/stats"):
            return Reply(200, self.stats.snapshot())
        if path == "/clock" and method in ("GET", "POST"):
            if method == "POST":
                self.clock.advance(_valid(ClockMove, body).advance_s)
            return Reply(200, self.clock.state())
        raise ApiError(404, "not_found_error", f"no route {method} {path} in the fake API")

    def messages(self, body: bytes, headers: dict[str, str]) -> Reply:
        raw = _json(body)
        betas = _betas(headers)
        compacting = compaction.requested(raw, betas)
        raw, start = adopt(raw, betas)
        edits = editing.requested(raw, betas)
        checked = check(raw, self.catalogue, fits=edits is None)
        raw, bound = self._bind_thinking(raw, checked.model.id, betas, start=start)
        if bound.dropped:  # the dropped blocks are neither read nor billed
            checked = check(raw, self.catalogue, fits=edits is None)
        # baton's summary calls ask for <compact_summary>: /stats reports their cache use apart.
        purpose = "summary" if SUMMARY_ASK in json.dumps(raw["messages"][-1:]) else "step"
        self.stats.model(checked.model.id)
        fault = self._fault(body, compacting is not None)
        if compacting is not None:
            return self._compact(compacting, checked, raw, bound, fault)
        applied = None
        if edits is not None:  # after the prefix check: the client sent its history unchanged
            raw, applied = editing.apply(edits, raw, self._count, checked.model.id)
            self.stats.editing_use(applied)
            checked = check(raw, self.catalogue)  # what the model reads, is billed and cached
        self.stats.system(checked.system_messages)
        use = self.cache.account(checked.pieces, cache_settings(raw, checked.model.id))
        if checked.body.max_tokens == 0:  # a pre-warm: the prefix is written (and billed), nothing is sampled
            message = prewarmed(checked, use)
        else:
            message = answer(self.model, _as_read(checked) if start else checked, betas, use)
        if preserves_thinking(checked.model.id) and message["content"]:
            message["content"], thinking_tokens = sign_reply(
                message["content"], bound, checked.model.id, raw.get("thinking") or {}, next(self.serial))
            message["usage"]["output_tokens"] += thinking_tokens  # thinking is billed as output
            kinds = [b["type"] for b in message["content"]]
            self.stats.thinking_use(produced=kinds.count("thinking"),
                                    redacted_produced=kinds.count("redacted_thinking"))
        if BINDING_BETA in betas:  # listed on every reply when the beta header is sent, empty when nothing changed
            message["input_transformations"] = bound.dropped
        if applied is not None:  # on every reply that asked for editing, empty when no edit cleared anything
            message["context_management"] = {"applied_edits": applied}
        max_tokens = checked.body.max_tokens or 0
        if fault is not None:
            message = apply(fault.fault, message, max_tokens)
        elif message["usage"]["output_tokens"] > max_tokens:
            message = apply("max_tokens_cut", message, max_tokens)  # the limit is real: a longer reply stops at it
        self.stats.usage(use, message["usage"]["output_tokens"], message["stop_reason"], purpose)
        self.wait(checked.model.id, message["usage"]["output_tokens"])
        return Reply(200, message)

    def count_tokens(self, body: bytes, headers: dict[str, str]) -> Reply:
        """The request's input tokens: a compaction block applied, ``compaction`` ignored ("accepts this
        parameter and ignores it"), ``context_management`` applied with the count before it as well."""
        raw, betas = _json(body), _betas(headers)
        raw, start = adopt(raw, betas)
        edits = editing.requested(raw, betas)
        checked = check(raw, self.catalogue, counting_only=True)
        # count_tokens runs the same prefix check, with the same 400 (platform docs, "Token counting")
        raw, bound = self._bind_thinking(raw, checked.model.id, betas, count=False, start=start)
        if bound.dropped:  # the dropped blocks are not counted
            checked = check(raw, self.catalogue, counting_only=True)
        self.stats.model(checked.model.id)
        if edits is None:
            return Reply(200, {"input_tokens": checked.input_tokens})
        edited, _ = editing.apply(edits, raw, self._count, checked.model.id)
        return Reply(200, {"input_tokens": self._count(edited),
                           "context_management": {"original_input_tokens": checked.input_tokens}})

    def _count(self, raw: dict[str, Any]) -> int:
        return check(raw, self.catalogue, counting_only=True).input_tokens

    def _fault(self, body: bytes, compacting: bool) -> FaultOrder | None:
        """The fault queued for this request, if any; a hang waits here and an api_error is raised here."""
        fault = self.faults.take(body.decode("utf-8", errors="replace"), compaction=compacting)
        if fault is None:
            return None
        self.stats.fault(fault.fault)
        if fault.fault == "hang":
            self.sleep(self.hang_s if fault.hang_s is None else fault.hang_s)
        if fault.fault == "api_error":
            raise fault.error()
        return fault

    def _compact(self, config: compaction.CompactionConfig, checked: CheckedRequest, raw: dict[str, Any],
                 bound: Checked, fault: FaultOrder | None) -> Reply:
        self.stats.compaction_use(requests=1)
        if fault is not None and fault.fault == "compaction_refused":
            raise compaction.unsupported(checked.model.id)
        empty = (fault.stop_reason or "end_turn") if fault is not None and fault.fault == "compaction_empty" else None
        done = compaction.compact(config, checked, raw, bound, self.model, self.cache,
                                  cache_settings(raw, checked.model.id), next(self.serial), empty)
        self.stats.compaction_use(blocks=int(done.produced), empty=int(not done.produced))
        self.stats.usage(done.use, done.output_tokens, done.message["stop_reason"], "compaction")
        self.wait(checked.model.id, done.output_tokens)
        return Reply(200, done.message)

    def _bind_thinking(self, raw: dict[str, Any], model_id: str, betas: list[str], count: bool = True,
                       start: Start | None = None):
        """The thinking parameter checked, and the prefix check run on every thinking block sent back: the
        request as the model will read it (dropped blocks removed) and what was kept and dropped. ``start``:
        where the check starts when a compaction block stands first."""
        check_parameters(raw, model_id, betas)
        try:
            bound = check_thinking(raw, model_id, betas, start)
        except ApiError:
            self.stats.thinking_use(refused=1)
            if count and start is not None:
                self.stats.compaction_use(blocks_sent_back=1, thinking_refused=1)
            raise
        if count:
            self.stats.thinking_use(sent_back=bound.sent, redacted_sent_back=bound.redacted_sent, valid=bound.kept,
                                    dropped=len(bound.dropped))
            if start is not None:  # all thinking after a block is in kept turns or was produced since
                self.stats.compaction_use(blocks_sent_back=1, thinking_sent=bound.sent, thinking_valid=bound.kept,
                                          thinking_dropped=len(bound.dropped))
        return ({**raw, "messages": bound.messages} if bound.dropped else raw), bound

    def wait(self, model_id: str, output_tokens: int) -> None:
        """Hold the reply as a real model would (``latency``): time to first token, then the output's time.

        Only message replies wait, after the answer is ready, so the wait is all injected delay, none of it work.
        """
        if not self.latency.active:
            return
        delay = self.latency.delay(model_id, output_tokens)
        self.stats.hold(+1)
        try:
            self.sleep(delay.total_s)
        finally:
            self.stats.hold(-1)
        self.stats.delay(model_id, delay)

    def models_page(self, query: dict[str, list[str]]) -> dict[str, Any]:
        def one(name: str) -> str | None:
            return query[name][-1] if name in query else None

        try:
            limit = int(one("limit") or 20)
        except ValueError:
            raise invalid(f"limit: must be an integer, got {one('limit')!r}") from None
        lifecycles = query.get("lifecycle[]", []) + query.get("lifecycle", [])
        try:
            return self.catalogue.page(limit=limit, after_id=one("after_id"), before_id=one("before_id"),
                                       lifecycles=lifecycles or None)
        except CatalogueError as err:
            raise invalid(str(err)) from None

    def fault_control(self, method: str, body: bytes) -> Reply:
        if method == "POST":
            self.faults.add(_valid(FaultOrder, body))
        elif method == "DELETE":
            self.faults.clear()
        return Reply(200, {"pending": self.faults.pending()})


def _as_read(checked: CheckedRequest) -> CheckedRequest:
    """The request with its compaction block as the model reads it: the summary where the block stands."""
    return replace(checked, body=checked.body.model_copy(update={"messages": as_read(checked.body.messages)}))


def _valid(model: Any, body: bytes) -> Any:
    """A control route's body as ``model`` (pydantic), or the API's 400 naming the field."""
    try:
        return model.model_validate(_json(body))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise invalid(f"{where}: {first['msg']}") from None


def _betas(headers: dict[str, str]) -> list[str]:
    return [b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()]


def _check_headers(headers: dict[str, str]) -> None:
    bearer = headers.get("authorization", "")
    if not headers.get("x-api-key") and not (bearer.lower().startswith("bearer ") and bearer[7:].strip()):
        raise ApiError(401, "authentication_error",
                       "an API key is required: send it as x-api-key or Authorization: Bearer")
    if not headers.get("anthropic-version"):
        raise invalid("anthropic-version: header is required")


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError as err:
        raise invalid(f"There was an error parsing the body of your request: {err}") from None


# ---- HTTP ------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    server: _Server

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True  # the unread body must not be taken for the next request
            self._send(Reply(413, ApiError(413, "request_too_large", "Request exceeds the maximum size").body()))
            return
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self.server.api.handle(method, self.path, headers, body)
        self._send(reply)

    def _send(self, reply: Reply) -> None:
        data = json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", f"req_fake_{next(self.server.request_ids):08d}")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            log.info("the client left before the answer to %s", self.path)  # e.g. it timed out on a hang

    def log_message(self, format: str, *args: Any) -> None:
        # The request line only (method, path, status): never a header, so never the key.
        log.debug("%s %s", self.address_string(), format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's listen backlog is 5: a benchmark opening 50 connections at once saw some reset
    # ("Connection reset by peer") before the accept loop took them. Each accepted one gets its own thread.
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], api: FakeApi) -> None:
        super().__init__(address, _Handler)
        self.api = api
        self.request_ids = itertools.count(1)


@dataclass
class Running:
    """A server serving in a background thread (tests, embedded demos)."""

    server: _Server
    thread: threading.Thread

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def make_server(api: FakeApi, host: str = "127.0.0.1", port: int = 0) -> _Server:
    return _Server((host, port), api)


def start(api: FakeApi, host: str = "127.0.0.1", port: int = 0) -> Running:
    server = make_server(api, host, port)
    # A short poll: stop() (tests) returns within 50 ms instead of the default half second.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-api", daemon=True)
    thread.start()
    return Running(server, thread)

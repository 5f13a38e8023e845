"""An independent preserved-thinking check in front of ``baton fake-api`` (issue 38): a proxy that re-signs every
thinking block the double returns with a signature several times longer than the double's, and turns every fifth
into a ``redacted_thinking`` block whose ``data`` is as long. Real signatures and redacted blocks come in many
sizes (the API's ``signature`` and ``data`` are opaque: the encrypted thinking, checked when sent back), so baton
must neither bill them by their bytes nor fail to fit the window because of them.

On the way in the proxy maps each of its blocks back to the double's original, so the double's own check (the
HMAC seal over the block's prefix, ``workers.fake_api.thinking``) still passes exactly when baton sent the block
back unchanged and in place: a block baton edited, or one the proxy never issued, goes to the double as it is and
fails there. It counts what it issued and what came back.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIGNED = ("thinking", "redacted_thinking")
PREFIX = "PRX"  # the proxy's signatures start so; the double's are base64 of JSON ("eyJ...")


@dataclass
class Resigner:
    """The proxy's state: the double's block behind each signature it issued, and what it saw."""

    upstream: str
    factor: int = 6  # the proxy's signatures are this many times longer than the double's
    redact_every: int = 5  # every fifth thinking block comes back as redacted_thinking
    originals: dict[str, dict[str, Any]] = field(default_factory=dict)
    issued: int = 0
    redacted: int = 0
    mapped_back: int = 0
    longest: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _token(self, block: dict[str, Any]) -> str:
        original = str(block.get("signature") or block.get("data") or "")
        size = max(len(original), 64) * self.factor
        seed = hashlib.sha256(f"{self.issued}|{original}".encode()).digest()
        filler = b""
        while len(filler) * 4 < size * 3:
            seed = hashlib.sha256(seed).digest()
            filler += seed
        return PREFIX + base64.b64encode(filler).decode()[:size]

    def outgoing(self, content: list[Any]) -> list[Any]:
        """A reply's content with every signed block re-issued under the proxy's own, longer signature."""
        out = []
        for block in content:
            if not (isinstance(block, dict) and block.get("type") in SIGNED):
                out.append(block)
                continue
            with self.lock:
                self.issued += 1
                token = self._token(block)
                self.originals[token] = block
                self.longest = max(self.longest, len(token))
                if block["type"] == "thinking" and self.issued % self.redact_every == 0:
                    self.redacted += 1
                    out.append({"type": "redacted_thinking", "data": token})
                elif block["type"] == "thinking":
                    out.append({**block, "signature": token})
                else:
                    out.append({"type": "redacted_thinking", "data": token})
        return out

    def incoming(self, body: dict[str, Any]) -> dict[str, Any]:
        """A request with each block the proxy issued put back as the double wrote it."""
        for message in body.get("messages") or []:
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for k, block in enumerate(content):
                if not (isinstance(block, dict) and block.get("type") in SIGNED):
                    continue
                token = block.get("signature") if block["type"] == "thinking" else block.get("data")
                original = self.originals.get(str(token))
                if original is None:
                    continue  # not one of the proxy's: the double judges it as it is
                if block["type"] == "thinking" and block.get("thinking") != original.get("thinking"):
                    continue  # an edited text: the double refuses it, as the API would
                extra = {"cache_control": block["cache_control"]} if "cache_control" in block else {}
                content[k] = {**original, **extra}
                with self.lock:
                    self.mapped_back += 1
        return body


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def do_GET(self) -> None:
        self._relay("GET")

    def do_POST(self) -> None:
        self._relay("POST")

    def do_DELETE(self) -> None:
        self._relay("DELETE")

    def _relay(self, method: str) -> None:
        resigner = self.server.resigner
        length = int(self.headers.get("content-length") or 0)
        data = self.rfile.read(length) if length else None
        path = self.path.split("?")[0]
        if data and method == "POST" and path in ("/v1/messages", "/v1/messages/count_tokens"):
            data = json.dumps(resigner.incoming(json.loads(data))).encode()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        request = urllib.request.Request(resigner.upstream + self.path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                status, body, reply_headers = response.status, response.read(), dict(response.headers.items())
        except urllib.error.HTTPError as err:
            status, body, reply_headers = err.code, err.read(), dict(err.headers.items())
        if status == 200 and method == "POST" and path == "/v1/messages":
            reply = json.loads(body)
            reply["content"] = resigner.outgoing(reply.get("content") or [])
            body = json.dumps(reply).encode()
        self.send_response(status)
        for name, value in reply_headers.items():
            if name.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request lines would carry nothing a test reads


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, resigner: Resigner) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.resigner = resigner


@contextmanager
def resigning(upstream: str, **options: Any) -> Iterator[tuple[str, Resigner]]:
    """The proxy in front of ``upstream`` for the ``with`` block: (its URL, its state)."""
    resigner = Resigner(upstream.rstrip("/"), **options)
    server = _ProxyServer(resigner)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="resigning-proxy", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}", resigner
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

"""OpenTelemetry traces of a run, off unless the standard variables ask for them (docs/deployment.md, "Tracing").

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or ``OTEL_TRACES_EXPORTER``)
is set; off with ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. Off, every function here returns
at once and no OpenTelemetry package is imported: the SDK lives in ``agents.otel`` alone, loaded on first use.
Set but without the ``[otel]`` extra installed, one warning says so and the run goes on untraced.

The spans follow the GenAI semantic conventions (``gen_ai.*``). Prompts, replies and tool content are recorded
only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` opts in, and then redacted.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from context.redaction import redact

if TYPE_CHECKING:
    from agents.models import ModelRequest, ModelResponse
    from agents.otel import Backend
    from context.messages import Usage

ENABLING = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CAPTURE_ON = {"true", "1", "yes", "span_only", "span_and_event"}  # the boolean and the newer mode names
CAPTURE_CHARS = 100_000  # one captured attribute at most; a whole context can be far larger
PROVIDER = "anthropic"
Carrier = dict[str, str]  # a trace context as headers (traceparent, tracestate): Celery's, or on disk
log = logging.getLogger(__name__)


class Span:
    """What baton's code does with a span; this one, used when tracing is off, does nothing."""

    def set(self, attributes: Mapping[str, Any]) -> None:
        pass

    def fail(self, reason: str) -> None:
        pass


NOOP = Span()
_backend: Backend | None = None
_decided = False


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces (the standard OTEL_* variables only)."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(env.get(name, "").strip() for name in ENABLING)


def backend() -> Backend | None:
    """The tracer, set up on first use when the environment asks for one; None when tracing is off."""
    global _backend, _decided
    if not _decided:
        _decided = True
        _backend = _load() if wanted() else None
    return _backend


def _load() -> Backend | None:
    try:
        from agents.otel import Backend, ExporterError, provider_from_env
    except ImportError as exc:
        log.warning("baton: OTEL_* tracing variables are set but OpenTelemetry is not installed (%s); running "
                    "untraced. Install it with `pip install 'baton[otel]'`", exc)
        return None
    try:
        return Backend(provider_from_env())
    except ExporterError as exc:
        log.warning("baton: %s; running untraced", exc)
        return None


def use(provider: Any | None) -> None:
    """Trace to ``provider`` (a TracerProvider; tests give one with an in-memory exporter), or None: decide
    from the environment again on next use."""
    global _backend, _decided
    if provider is None:
        _backend, _decided = None, False
        return
    from agents.otel import Backend

    _backend, _decided = Backend(provider), True


def on() -> bool:
    return backend() is not None


@contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None, parent: Carrier | None = None) -> Iterator[Span]:
    """A span around the block, a child of ``parent`` (headers) or of the current span."""
    tracer = backend()
    if tracer is None:
        yield NOOP
        return
    with tracer.span(name, attributes or {}, parent) as live:
        yield live


def mark(name: str, attributes: Mapping[str, Any], parent: Carrier | None = None) -> Carrier:
    """A span that ends at once (a run, an iteration: no process lives as long); its context as headers."""
    tracer = backend()
    return tracer.mark(name, attributes, parent) if tracer else {}


def carrier() -> Carrier:
    """The current span's context as headers, to send with a task; empty when off."""
    tracer = backend()
    return tracer.carrier() if tracer else {}


@contextmanager
def attached(parent: Carrier | None) -> Iterator[None]:
    """Make ``parent`` (headers a task came with) the current context inside the block."""
    tracer = backend()
    if tracer is None or not parent:
        yield
        return
    with tracer.attached(parent):
        yield


def flush() -> None:
    """Send what is buffered (a prefork worker child ends without atexit; `baton run` embedded at its end)."""
    tracer = backend()
    if tracer is not None:
        tracer.flush()


def capturing(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get(CAPTURE_ENV, "").strip().lower() in CAPTURE_ON


def captured(value: Any) -> str:
    """Content as a span may hold it: JSON, redacted, cut to CAPTURE_CHARS."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return redact(text)[:CAPTURE_CHARS]


# ---- the GenAI spans: a model call, a tool call ----------------------------------------------------


@contextmanager
def chat(request: ModelRequest, label: str) -> Iterator[Span]:
    """A span around one model call (``chat <model>``); ``reply`` adds what the answer said."""
    if backend() is None:
        yield NOOP
        return
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDER, "gen_ai.system": PROVIDER,
        "gen_ai.request.model": request.model, "gen_ai.request.max_tokens": request.max_tokens,
        "gen_ai.request.temperature": request.temperature, "baton.request.purpose": request.purpose,
        "baton.model": label, "openinference.span.kind": "LLM",
    }
    if capturing():
        attributes["gen_ai.input.messages"] = captured(request.messages)
        attributes["gen_ai.system_instructions"] = captured(request.system or "")
    with span(f"chat {request.model}", attributes) as live:
        yield live


def reply(live: Span, response: ModelResponse, *, cost: Callable[[Usage], float | None] | None = None,
          tokens: int | None = None, threshold: int | None = None) -> None:
    """The answer's attributes on a ``chat`` span: model, tokens (input counts the cache too), stop reason, and
    what ``cost`` (``Agent.cost``, asked only when tracing is on) says the call cost."""
    if live is NOOP:
        return
    usage = response.usage
    cost_usd = cost(usage) if cost is not None else None
    attributes: dict[str, Any] = {
        "gen_ai.response.model": response.model or None, "gen_ai.response.id": response.id or None,
        "gen_ai.response.finish_reasons": [response.stop_reason] if response.stop_reason else None,
        "gen_ai.usage.input_tokens": usage.total_input, "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
        "baton.cost_usd": cost_usd, "baton.context.tokens": tokens, "baton.context.threshold": threshold,
    }
    if capturing():
        attributes["gen_ai.output.messages"] = captured([b.model_dump(mode="json") for b in response.content])
    live.set(attributes)


@contextmanager
def tool_call(name: str, call_id: str, arguments: Mapping[str, Any]) -> Iterator[Span]:
    """A span around one tool call (``execute_tool <name>``); its content only when capture is on."""
    if backend() is None:
        yield NOOP
        return
    attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                  "gen_ai.tool.call.id": call_id, "openinference.span.kind": "TOOL"}
    if capturing():
        attributes["gen_ai.tool.call.arguments"] = captured(dict(arguments))
    with span(f"execute_tool {name}", attributes) as live:
        yield live


def tool_result(live: Span, status: str | None, archive: str, text: str) -> None:
    if live is NOOP:
        return
    live.set({"baton.tool.status": status, "baton.tool.archive": archive,
              "gen_ai.tool.call.result": captured(text) if capturing() else None})
    if status == "error":
        live.fail("the tool returned an error")

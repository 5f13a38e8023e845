"""OpenTelemetry traces (agents/tracing.py, workers/task_trace.py; docs/deployment.md, "Tracing").

Off by default with nothing imported; on, the example's run is one trace with every step, model call,
tool call and compaction under the right parent; a resumed run continues it; content only on opt-in,
redacted; the extra missing means one warning and an untraced run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agents import tracing
from tests.agent_run import copy_example
from tests.trace_checks import check_run_tree, content_keys, from_sdk
from workers.embedded import run_embedded
from workers.loop import Team, resume, start

REPO = Path(__file__).resolve().parent.parent
SECRET = "sk-ant-api03-" + "Zq7" * 30  # a key-shaped string planted in the conventions; no span may carry it


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "ANTHROPIC_API_KEY"}
    return env | extra


def _run_in_fresh_interpreter(tmp_path: Path, code: str, env: dict[str, str], prelude: str = ""
                              ) -> subprocess.CompletedProcess:
    """Six tasks of the example in a new interpreter; ``code`` runs after them."""
    script = prelude + textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from scenarios.run import copy_scenario
        from workers.embedded import run_embedded
        from workers.loop import Team, start
        root = copy_scenario(Path({str(REPO / 'scenarios' / 'refund_desk')!r}), Path({str(tmp_path)!r}) / "refund_desk")
        print("RAN", run_embedded(start(root, auto_approve=True), Team(root, profile="demo", env={{}}), max_tasks=6))
    """) + textwrap.dedent(code)
    env = env | {"BATON_SCENARIOS_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def test_with_nothing_set_no_opentelemetry_module_is_imported(tmp_path):
    done = _run_in_fresh_interpreter(tmp_path, """
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry") or m == "agents.otel")
        print("LOADED", loaded)
        assert not (root / "state" / "trace").exists()
    """, _clean_env())
    assert done.returncode == 0, done.stderr
    assert "RAN 6" in done.stdout and "LOADED []" in done.stdout, done.stdout


def test_variable_set_without_the_extra_warns_once_and_runs_untraced(tmp_path):
    # The [otel] packages made unimportable in that interpreter, as when the extra is not installed.
    done = _run_in_fresh_interpreter(tmp_path, """
        assert not (root / "state" / "trace").exists()
    """, _clean_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9"),
        prelude="import sys; sys.modules['opentelemetry'] = None\n")
    assert done.returncode == 0, done.stderr
    assert "RAN 6" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if "OpenTelemetry is not installed" in line]
    assert len(warnings) == 1, done.stderr
    assert "pip install 'baton[otel]'" in warnings[0] and "running untraced" in warnings[0]


def test_only_the_standard_variables_turn_tracing_on():
    assert not tracing.wanted({})
    assert not tracing.wanted({"BATON_TRACE": "1", "OTEL_SERVICE_NAME": "x"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not tracing.wanted({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})


# ---- with the SDK's in-memory exporter --------------------------------------------------------------


@pytest.fixture
def exporter(monkeypatch):
    sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="the [otel] extra (opentelemetry-sdk) is not installed")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    memory = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.use(provider)
    yield memory
    tracing.use(None)
    provider.shutdown()


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("BATON_SCENARIOS_DIR", str(tmp_path))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return copy_example(tmp_path)


def _team(root: Path) -> Team:
    return Team(root, profile="demo", env={})


@pytest.mark.slow  # a whole simulated run
def test_the_example_run_is_one_trace_with_every_step_call_and_compaction(exporter, root):
    run_embedded(start(root, auto_approve=True), _team(root))
    assert json.loads((root / "run.json").read_text())["status"] == "succeeded"
    spans = from_sdk(exporter.get_finished_spans())
    kinds = check_run_tree(spans, root)
    assert kinds["compactions"], "the demo profile compacts: no compaction span"
    assert {t.attributes["gen_ai.tool.name"] for t in kinds["tools"]} >= {"Read", "Write", "SubmitHandoff"}
    assert not content_keys(spans), "content recorded without the opt-in"
    trace_id = spans[0].trace_id
    assert json.loads((root / "state" / "trace" / "run.json").read_text())["traceparent"].split("-")[1] == trace_id


def test_a_resumed_run_continues_its_trace(exporter, root):
    run_embedded(start(root, auto_approve=True), _team(root), max_tasks=4)
    first = from_sdk(exporter.get_finished_spans())
    exporter.clear()
    tracing.use(None)  # as a new process would: nothing in memory but what is on disk
    exporter_again = exporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter_again))
    tracing.use(provider)
    run_embedded(resume(root), _team(root), max_tasks=4)
    second = from_sdk(exporter.get_finished_spans())
    assert second and {s.trace_id for s in second} == {first[0].trace_id}
    assert not [s for s in second if s.name.startswith(("run ", "iteration "))], "the run's spans were made again"
    iteration = next(s for s in first if s.name == "iteration 1")
    assert {s.parent_id for s in second if s.attributes.get("baton.task") == "step"} == {iteration.span_id}


def test_content_only_on_opt_in_and_then_redacted(exporter, root, monkeypatch):
    # The system prompt carries the conventions: a key pasted there must not reach a span as it is.
    (root / "CONVENTIONS.md").write_text(f"Name files in snake_case. The sandbox key is {SECRET}.\n")
    monkeypatch.setenv(tracing.CAPTURE_ENV, "true")
    run_embedded(start(root, auto_approve=True), _team(root), max_tasks=6)
    spans = from_sdk(exporter.get_finished_spans())
    assert {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result"} <= content_keys(spans)
    everything = json.dumps([s.attributes for s in spans], default=str)
    assert "The sandbox key is" in everything, "the system prompt is not in any span"
    assert SECRET not in everything and "<REDACTED>" in everything


# ---- across the three workers, exported over OTLP/HTTP --------------------------------------------


@pytest.fixture
def receiver():
    pytest.importorskip("opentelemetry.proto", reason="the [otel] extra (the OTLP exporter) is not installed")
    from tests.otlp_receiver import OtlpReceiver

    server = OtlpReceiver()
    yield server
    server.stop()


@pytest.mark.slow  # real Celery workers and a private redis-server
@pytest.mark.timeout(300)
def test_on_three_workers_the_run_is_one_trace_and_a_compaction_is_the_child_of_its_step(redis_server, receiver,
                                                                                            request, tmp_path):
    from tests.workers_harness import Cluster, wait_for

    cluster = Cluster(redis_server.url, tmp_path)
    request.addfinalizer(cluster.stop_all)
    # Only the standard variables (a short batch delay, so the spans arrive while the test waits).
    cluster.env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "baton-test",
                    "OTEL_BSP_SCHEDULE_DELAY": "200"}
    cluster.workers()
    cluster.start_run()  # this process has no OTEL_* set: the first step hangs from its iteration on disk
    cluster.wait_done()
    # The last task's spans leave after it wrote run.json: wait until the tree is whole.
    def whole():
        try:
            return check_run_tree(list(receiver.spans), cluster.root)
        except (AssertionError, KeyError):
            return None

    try:
        kinds = wait_for(whole, "every span of the run to arrive", timeout=30)
    except AssertionError:
        check_run_tree(list(receiver.spans), cluster.root)  # fails with what is missing
        raise
    spans = list(receiver.spans)
    assert kinds["compactions"], "the demo profile compacts: no compaction span"
    assert receiver.services == {"baton-test"}
    assert not content_keys(spans)


def test_a_chat_span_carries_the_gen_ai_attributes_and_the_cost(exporter):
    from agents.models import ModelRequest, ModelResponse
    from context.messages import TextBlock, Usage

    request = ModelRequest(model="claude-sonnet-4-5", max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    usage = Usage(input_tokens=10, output_tokens=5, cache_creation_input_tokens=20, cache_read_input_tokens=300)
    response = ModelResponse(id="msg_1", model="claude-sonnet-4-5-20250929", content=[TextBlock(text="hello")],
                             stop_reason="end_turn", usage=usage)
    seen: list[Usage] = []
    with tracing.chat(request, "claude-sonnet-4-5") as call:
        tracing.reply(call, response, cost=lambda u: seen.append(u) or 0.0125, tokens=900, threshold=1000)
    (span,) = exporter.get_finished_spans()
    assert span.name == "chat claude-sonnet-4-5" and seen == [usage]
    assert {k: span.attributes[k] for k in (
        "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
        "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens", "baton.cost_usd", "baton.context.tokens",
        "baton.context.threshold")} == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5", "gen_ai.response.model": "claude-sonnet-4-5-20250929",
        "gen_ai.usage.input_tokens": 330,
        "gen_ai.usage.output_tokens": 5, "gen_ai.usage.cache_read.input_tokens": 300,
        "gen_ai.usage.cache_creation.input_tokens": 20, "baton.cost_usd": 0.0125, "baton.context.tokens": 900,
        "baton.context.threshold": 1000}
    assert tuple(span.attributes["gen_ai.response.finish_reasons"]) == ("end_turn",)
    assert not content_keys(from_sdk([span]))


def test_a_failed_model_call_is_an_error_span(exporter):
    from agents.models import ModelError, ModelRequest

    request = ModelRequest(model="claude-sonnet-4-5", max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ModelError), tracing.chat(request, "claude-sonnet-4-5"):
        raise ModelError("overloaded")
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code.name == "ERROR" and "overloaded" in span.status.description

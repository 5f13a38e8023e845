"""The durable step on the real SDK path (HTTP-level mock), and backend selection."""

from __future__ import annotations

import json

import httpx2

from agents.agent import Agent
from agents.anthropic_model import AnthropicModel
from agents.backends import model_for
from agents.compaction_task import run_compaction
from agents.config import AgentConfig
from agents.disk import AgentDisk, open_turn
from agents.openings import init_opening
from agents.simulated import SimulatedModel
from agents.step import run_step
from tests.agent_run import agents, assert_log_consistent, copy_example

KEY = "sk-ant-api03-" + "k" * 60


def _message(content: list[dict], stop: str, usage: dict) -> dict:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-4-5-20251101",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 48, "service_tier": "standard", **usage},
    }


class Api:
    """Messages calls take the next body; token counts (an agent's first call asks one) answer ``counted``."""

    def __init__(self, *bodies: dict, counted: int = 5_000):
        self.bodies, self.requests, self.counts, self.counted = list(bodies), [], [], counted

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/v1/messages/count_tokens":
            self.counts.append(request)
            return httpx2.Response(200, json={"input_tokens": self.counted}, headers={"request-id": "req_c"})
        self.requests.append(request)
        status = 200 if self.bodies[0].get("type") == "message" else 429
        return httpx2.Response(
            status,
            json=self.bodies.pop(0),
            headers={"content-type": "application/json", "request-id": "req_1", "retry-after": "0"},
        )


def _agent(root, role: str, api: Api) -> Agent:
    base = agents(root)[role]
    model = AnthropicModel(
        api_key=KEY, http_client=httpx2.Client(transport=httpx2.MockTransport(api)), sleep=lambda s: None
    )
    return Agent(base.config, model)


def test_a_step_through_the_sdk_persists_the_response_and_runs_its_tools(tmp_path):
    root = copy_example(tmp_path)
    read = {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "Read", "input": {"path": "brief.md"}}
    api = Api(
        {
            "type": "error",
            "error": {
                "type": "rate_limit_error",
                "message": "Number of request tokens has exceeded your per-minute rate limit",
            },
        },
        _message(
            [{"type": "text", "text": "I'll start by reading the brief."}, read],
            "tool_use",
            {"cache_creation_input_tokens": 4100, "cache_read_input_tokens": 0},
        ),
    )
    agent = _agent(root, "init", api)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    out = run_step(root, agent)
    assert out.status == "continue" and out.model == "anthropic"
    assert len(api.requests) == 2  # the 429 was retried

    body = json.loads(api.requests[-1].content)
    assert body["model"] == agent.config.model.name and body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert {t["name"] for t in body["tools"]} >= {
        "Read",
        "Write",
        "Edit",
        "LS",
        "Glob",
        "Grep",
        "TodoWrite",
        "SubmitHandoff",
    }
    assert "Bash" not in {t["name"] for t in body["tools"]} and "RunEvaluation" not in {
        t["name"] for t in body["tools"]
    }
    # The role's thinking, named on every request, with drop_block as a safety net and the display that
    # returns the notes between tool calls (agents/thinking.py); exactly the betas those need.
    assert body["thinking"] == {"type": "adaptive", "display": "updates",
                                "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    assert body["output_config"] == {"effort": "high"}
    assert api.requests[-1].headers["anthropic-beta"] == (
        "thinking-binding-controls-2026-08-01,thinking-display-updates-2026-08-18")
    assert KEY not in json.dumps(body)

    disk = assert_log_consistent(root, "init")
    result = disk.messages()[-1].tool_results[0]
    assert result.tool_use_id == read["id"] and "refund" in result.text.lower()
    step_event = [e for e in disk.events if e.kind == "step"][-1]
    assert step_event.usage["cache_creation_input_tokens"] == 4100 and step_event.model == "anthropic"
    assert KEY not in (root / "state/init/log.jsonl").read_text() + (root / "state/init/events.jsonl").read_text()


def test_execute_with_a_1m_window_sends_no_context_beta(tmp_path):
    # The 1M beta is retired; today's models have their windows natively (agents/catalogue.py).
    root = copy_example(tmp_path)
    api = Api(_message([{"type": "tool_use", "id": "toolu_01", "name": "LS", "input": {}}], "tool_use", {}))
    base = agents(root, profile="default")["execute"].config
    model = AnthropicModel(
        api_key=KEY, http_client=httpx2.Client(transport=httpx2.MockTransport(api)), sleep=lambda s: None
    )
    open_turn(root, "execute", 1, "Iteration: 1\nScenario: refund_desk\n\nStart.", key="iteration-1")
    assert run_step(root, Agent(base, model)).status == "continue"
    assert "context-1m" not in api.requests[0].headers.get("anthropic-beta", "")


def test_compaction_through_the_sdk_keeps_the_steps_settings(tmp_path):
    root = copy_example(tmp_path)
    summary = {
        "current_design_summary": {
            "unified_scenario_design": "refund desk",
            "business_rules_key_points": ["R1"],
            "format_specifications": "see design/format_spec.md",
        },
        "execute_feedback_summary": {
            "execution_output_dir": None,
            "total_failure_samples": 0,
            "layer1_problems_summary": [],
        },
        "analysis_conclusions": [],
        "pending_actions": ["write design"],
        "key_paths": {"brief": "brief.md"},
    }
    api = Api(
        _message(
            [{"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"path": "brief.md"}}], "tool_use", {}
        ),
        _message(
            [{"type": "text", "text": f"<compact_summary>{json.dumps(summary)}</compact_summary>"}],
            "end_turn",
            {"cache_read_input_tokens": 4000},
        ),
    )
    agent = _agent(root, "init", api)
    open_turn(root, "init", 1, init_opening(root.name, 1), key="iteration-1")
    run_step(root, agent)
    outcome = run_compaction(root, agent, force=True)
    assert outcome.status == "compacted" and not outcome.fallback
    body, step_body = json.loads(api.requests[-1].content), json.loads(api.requests[-2].content)
    assert body["max_tokens"] == agent.config.model.summary_max_tokens
    # Same tools, tool_choice, thinking and effort as the step: any change would invalidate the cached messages.
    for field in ("tools", "tool_choice", "thinking", "output_config"):
        assert body.get(field) == step_body.get(field), field
    assert api.requests[-1].headers["anthropic-beta"] == api.requests[-2].headers["anthropic-beta"]
    assert "<compact_summary>" in json.dumps(body["messages"][-1])
    # The breakpoints the step request had on its messages (context.compaction.SummaryRequest): a cache read.
    assert json.dumps(body["messages"]).count('"cache_control"') >= 1
    assert AgentDisk.load(root, "init").compaction().summary["pending_actions"] == ["write design"]


def test_backend_auto_picks_by_api_key():
    init = AgentConfig(role="init")
    assert isinstance(model_for(init, env={}), SimulatedModel)
    assert isinstance(model_for(init, env={"ANTHROPIC_API_KEY": KEY}), AnthropicModel)
    assert KEY not in repr(model_for(init, env={"ANTHROPIC_API_KEY": KEY}))

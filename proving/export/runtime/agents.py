"""The agents an exported task can run besides the model under test, by name (``inspect eval task.py -T
agent=NAME``), and runs of several of them over the samples in one eval (``-T runs=FILE``).

- ``model``: the model under test (Inspect's ``generate()``); the task's default. On a conversational sample it
  talks with the simulated user the task names (``conversation.py``).
- ``refuse_all``: refuses every request. It calls the scenario's tool that records a refusal or an escalation
  (a name with refus, deny, declin, reject, escalat, transfer_to, human or handoff) once, with arguments taken
  from the sample, and says it refuses; with no such tool it only says so.
- ``reckless``: acts without checking. It calls every tool that changes the data once, with the arguments
  another sample gives it and the ids this sample's request names.
- ``script``: the calls listed in the run (``actions``): a trajectory one mistake away from a sample's
  expected one, say.

The deterministic ones call the tools as a model's calls are made (``execute_tools`` on an assistant message),
so the tools, the sandbox and the scorer are the task's own. A ``runs`` file lists ``{"id", "sample", "agent",
"actions"?}``: each run is scored against its ``sample``. Other agents register in ``AGENTS``.

The choice of calls (``refusal_calls``, ``reckless_calls``) is plain Python on the scenario's samples and tools.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .users import SCRIPTED

# The same patterns as baton's coverage gate (proving/evaluation/coverage.py): tools whose calls only look,
# and tools that record a refusal or an escalation.
LOOKING = re.compile(r"^(get|list|find|search|lookup|look_up|check|read|view|show|fetch|query|describe)_")
# An escalation hands the request on, to a supervisor or a human (tau2-bench's transfer_to_human_agents).
REFUSING = re.compile(r"refus|deny|denied|declin|reject|escalat|transfer_to|human|hand_?off")
REFUSAL = re.compile(r"refus|deny|denied|declin|reject")  # of those, the ones that record a refusal
REFUSAL_TEXT = "I am sorry, but I cannot do that: the policy does not allow it."
IDENTIFIER = re.compile(r"^(?=.*\d)[A-Za-z]*[-_]?[A-Za-z0-9-_]*$")  # O1001, C-7: names, not words
WORDS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
MODEL = "model"


def refusing_tool(tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The tool that records a refusal (preferred) or an escalation, None when the scenario has none."""
    named = [t for t in tools if REFUSING.search(t["name"])]
    named.sort(key=lambda t: (not REFUSAL.search(t["name"]), t["name"]))
    return named[0] if named else None


def changing_tools(samples: list[dict[str, Any]]) -> list[str]:
    """The tools the samples' expected actions use to change the data (every used tool that does not only look)."""
    used = [a["tool"] for s in samples for a in s.get("actions", []) if isinstance(a, Mapping) and "tool" in a]
    return [t for t in dict.fromkeys(used) if not LOOKING.match(t)]


def _values(samples: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Every value the expected actions give each parameter name, in the samples' order."""
    seen: dict[str, list[Any]] = {}
    for sample in samples:
        for action in sample.get("actions", []):
            for key, value in (action.get("args") or {}).items():
                if value not in seen.setdefault(key, []):
                    seen[key].append(value)
    return seen


def _named(sample: dict[str, Any], value: Any) -> bool:
    return isinstance(value, str) and value in WORDS.findall(_request(sample))


def _request(sample: dict[str, Any]) -> str:
    """What the request tells an agent: the instruction and, in a conversation, every fact the user gives when
    asked (a floor agent is taken to have asked for all of them: a floor that never learns the order id would
    pass nothing and prove nothing)."""
    user = sample.get("user")
    facts = user.get("facts") if isinstance(user, dict) else None
    told = " ".join(str(v) for v in facts.values()) if isinstance(facts, dict) else ""
    return f"{sample.get('instruction', '')} {told}"


def _own(sample: dict[str, Any], name: str, pool: dict[str, list[Any]]) -> Any:
    """The value of parameter ``name`` this sample's request names (one the samples give that parameter), else
    None. Never one of its expected actions: a floor agent knows what the model under test knows."""
    return next((value for value in pool.get(name, []) if _named(sample, value)), None)


def refusal_calls(tools: list[dict[str, Any]], samples: list[dict[str, Any]],
                  sample: dict[str, Any]) -> list[dict[str, Any]]:
    """refuse_all's calls for ``sample``: the refusing tool once, each parameter filled with an id the request
    names, else the first value the other samples give it, else a refusal's text; none when the scenario has no
    such tool."""
    tool = refusing_tool(tools)
    if tool is None:
        return []
    named = _values(samples)  # what the request itself names may be used (the model under test reads it too)
    # Else what other samples give, never this one's: its own expected actions hold its answer (the rule it
    # refuses by), which an agent that refuses everything cannot know.
    pool = _values([s for s in samples if s.get("id") != sample.get("id")])
    properties = (tool.get("parameters") or {}).get("properties") or {}
    required = set((tool.get("parameters") or {}).get("required") or [])
    args: dict[str, Any] = {}
    for name, schema in properties.items():
        value = _own(sample, name, named)
        if value is None:  # an id or a number the samples give it; never their free text (a note's words)
            value = next((v for v in pool.get(name, []) if not isinstance(v, str) or IDENTIFIER.match(v)), None)
        if value is None and (schema or {}).get("type", "string") == "string":
            value = REFUSAL_TEXT
        if value is not None:
            args[name] = value
        elif name in required:
            args[name] = 0
    return [{"tool": tool["name"], "args": args}]


def reckless_calls(samples: list[dict[str, Any]], sample: dict[str, Any]) -> list[dict[str, Any]]:
    """reckless's calls for ``sample``: every state-changing tool once, with the arguments of its call in the next
    other sample that makes one (ids and amounts of another request), the ids this sample's request names put in
    for the parameters of the same name. A call that comes out as one of this sample's expected ones keeps the
    other sample's values (the agent is to be wrong)."""
    index = next((i for i, s in enumerate(samples) if s.get("id") == sample.get("id")), -1)
    others = samples[index + 1:] + samples[:max(index, 0)] if index >= 0 else samples
    pool = _values(samples)
    expected = [(a.get("tool"), a.get("args") or {}) for a in sample.get("actions", [])]
    calls = []
    for tool in changing_tools(samples):
        theirs = next((dict(a.get("args") or {}) for s in others for a in s.get("actions", [])
                       if a.get("tool") == tool), None)
        if theirs is None:
            continue
        mixed = {k: _own(sample, k, pool) or v for k, v in theirs.items()}
        calls.append({"tool": tool, "args": theirs if (tool, mixed) in expected else mixed})
    return calls


def load_runs(path: str | Path) -> list[dict[str, Any]]:
    runs = json.loads(Path(path).read_text(encoding="utf-8"))
    return runs["runs"] if isinstance(runs, dict) else runs


# What follows needs Inspect; the functions above do not.
def solver_for(agent: str, scenario: Any, user: str = SCRIPTED) -> Any:
    """The solver that ends the task's chain: it runs each sample's agent (its metadata's ``baton_agent``, from a
    runs file, else ``agent``); for the model under test, ``generate()``, or on a conversational sample a
    conversation with ``user`` (``scripted`` or an Inspect model string)."""
    if agent not in AGENTS:
        raise ValueError(f"no agent {agent!r}: the agents are {', '.join(sorted(AGENTS))}")
    if not user.strip():
        raise ValueError("-T user= names the user simulator: scripted, or an Inspect model string")
    return dispatch(agent, scenario, user)


def dispatch(default: str, scenario: Any, user: str = SCRIPTED) -> Any:
    from inspect_ai.solver import Generate, TaskState, solver

    from . import conversation

    @solver(name="baton_agent")
    def chosen() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            name = str(state.metadata.get("baton_agent") or default)
            sample = _sample_of(scenario, state)
            if name == MODEL and conversation.conversational(sample):
                return await conversation.converse(sample, state, generate, user)
            return await AGENTS[name](scenario, state, generate)

        return solve

    return chosen()


async def _generate(scenario: Any, state: Any, generate: Any) -> Any:
    return await generate(state)


async def call_all(state: Any, calls: list[dict[str, Any]], closing: str | None = None) -> Any:
    """Make ``calls`` one after another as a model's tool calls, through the task's tools; then say ``closing``."""
    from inspect_ai.model import ChatMessageAssistant, execute_tools
    from inspect_ai.tool import ToolCall

    for number, call in enumerate(calls, 1):
        asked = ChatMessageAssistant(content="", tool_calls=[
            ToolCall(id=f"baton_{number}", function=call["tool"], arguments=dict(call.get("args") or {}))])
        state.messages.append(asked)
        done = await execute_tools(state.messages, state.tools)
        state.messages.extend(done.messages)
    if closing:
        state.messages.append(ChatMessageAssistant(content=closing))
    return state


def _sample_of(scenario: Any, state: Any) -> dict[str, Any]:
    return scenario.sample(state.metadata.get("baton_id", state.sample_id))


async def _refuse_all(scenario: Any, state: Any, generate: Any) -> Any:
    calls = refusal_calls(scenario.tools, scenario.samples, _sample_of(scenario, state))
    return await call_all(state, calls, REFUSAL_TEXT)


async def _reckless(scenario: Any, state: Any, generate: Any) -> Any:
    return await call_all(state, reckless_calls(scenario.samples, _sample_of(scenario, state)), "Done.")


async def _script(scenario: Any, state: Any, generate: Any) -> Any:
    return await call_all(state, list(state.metadata.get("baton_actions") or []), "Done.")


Agent = Callable[[Any, Any, Any], Any]
AGENTS: dict[str, Agent] = {
    MODEL: _generate,  # the model under test
    "do_nothing": _generate,  # with Inspect's mockllm/model: a fixed text, no tool call
    "refuse_all": _refuse_all,
    "reckless": _reckless,
    "script": _script,
}


def dataset(scenario: Any, runs: str | None) -> list[Any]:
    """The task's samples: one per scenario sample, or one per run of a ``runs`` file."""
    from inspect_ai.dataset import Sample

    if runs is None:
        return [Sample(input=s["instruction"], id=s["id"], metadata={"rules": s.get("rules", []), "baton_id": s["id"]})
                for s in scenario.samples]
    samples = []
    for run in load_runs(runs):
        original = scenario.sample(run["sample"])
        samples.append(Sample(input=original["instruction"], id=run["id"], metadata={
            "rules": original.get("rules", []), "baton_id": original["id"], "baton_agent": run.get("agent"),
            "baton_actions": run.get("actions", [])}))
    return samples

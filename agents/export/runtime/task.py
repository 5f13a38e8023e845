"""An Inspect AI task exported by baton: run it with

    inspect eval task.py --model <provider/model>

The model under test gets the scenario's policy as its system message and the
scenario's tools; each sample starts from its own copy of tools/data.json, every tool
call runs in a child process with time and memory limits, and the scorer judges the
final data and the calls as baton's evaluation does (baton_runtime/session.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # baton_runtime/ sits beside this file

import anyio  # noqa: E402 - after the path is set
from baton_runtime.offline_tokens import provide_o200k  # noqa: E402
from baton_runtime.session import Scenario, call_tool, judge  # noqa: E402
from inspect_ai import Task, task  # noqa: E402
from inspect_ai.dataset import MemoryDataset, Sample  # noqa: E402
from inspect_ai.model import ChatMessageSystem  # noqa: E402
from inspect_ai.scorer import Score, Target, accuracy, scorer, stderr  # noqa: E402
from inspect_ai.solver import Generate, TaskState, generate, solver, use_tools  # noqa: E402
from inspect_ai.tool import Tool, ToolDef, ToolError, ToolParams  # noqa: E402
from inspect_ai.util import store  # noqa: E402

SCENARIO = Scenario.load(HERE)
DATA, CALLS = "baton:data", "baton:calls"  # per-sample store keys: the data now, the calls made
MESSAGE_LIMIT = 60  # a model that loops on tools ends here, and the sample is scored as it stands

provide_o200k()  # Inspect counts tokens with it; offline it cannot download it


def _data() -> dict[str, Any]:
    data = store().get(DATA)
    return SCENARIO.initial_data() if data is None else data


def scenario_tool(spec: dict[str, Any]) -> Tool:
    name = spec["name"]

    async def execute(**args: Any) -> str:
        result = await anyio.to_thread.run_sync(call_tool, SCENARIO, name, args, _data())
        calls = store().get(CALLS, [])
        store().set(CALLS, [*calls, {"tool": name, "args": args, "output": result.output, "error": result.error}])
        if result.error is not None:
            raise ToolError(result.error)
        store().set(DATA, result.data)
        return json.dumps(result.output, ensure_ascii=False)

    return ToolDef(execute, name=name, description=spec["description"],
                   parameters=ToolParams.model_validate(spec["parameters"])).as_tool()


@solver
def policy_message():  # noqa: ANN201 - Inspect's decorator types it
    """The policy as the system message (not system_message(): it would read braces in
    the policy as template fields)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.messages.insert(0, ChatMessageSystem(content=SCENARIO.policy))
        return state

    return solve


@scorer(metrics=[accuracy(), stderr()])
def baton_scorer():  # noqa: ANN201
    async def score(state: TaskState, target: Target) -> Score:
        sample = SCENARIO.sample(state.sample_id)
        calls, final = store().get(CALLS, []), _data()
        verdict = await anyio.to_thread.run_sync(judge, SCENARIO, sample, calls, final)
        return Score(value=1.0 if verdict.passed else 0.0, explanation=verdict.explanation,
                     metadata={"differences": verdict.differences, "checkers": verdict.checkers,
                               "tool_calls": len(calls)})

    return score


# The name is written here as a literal by `baton export`: Inspect reads it from the source.
@task(name="scenario")
def scenario() -> Task:
    samples = [Sample(input=s["instruction"], id=s["id"], metadata={"rules": s.get("rules", []), "baton_id": s["id"]})
               for s in SCENARIO.samples]
    return Task(
        dataset=MemoryDataset(samples, name=SCENARIO.name),
        solver=[policy_message(), use_tools([scenario_tool(t) for t in SCENARIO.tools]), generate()],
        scorer=baton_scorer(),
        message_limit=MESSAGE_LIMIT,
    )

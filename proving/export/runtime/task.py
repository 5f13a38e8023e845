"""An Inspect AI task exported by baton: run it with

    inspect eval task.py --model <provider/model>

The model under test gets the scenario's policy as its system message and the
scenario's tools; each sample starts from its own copy of tools/data.json, and the scorer
judges the final data and the calls as baton's evaluation does (baton_runtime/session.py).
A conversational sample is a conversation with a simulated user (baton_runtime/conversation.py):
``-T user=scripted`` (the default, deterministic and offline) or ``-T user=<provider/model>``.

Every tool call and every judgement runs through Inspect's sandbox: ``sandbox().exec`` of
``baton_runtime/box.py``, which runs the scenario's code in a child process with time and
memory limits. The task's own sandbox is ``baton_bwrap`` (baton_runtime/sandbox.py, bubblewrap);
``inspect eval task.py --sandbox docker`` runs the same in a container built from compose.yaml
and the Dockerfile beside this file. Each sample's log says where its calls ran.
"""

from __future__ import annotations

import json
import sys
import weakref
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # baton_runtime/ sits beside this file

from baton_runtime import agents, communicate, conversation, session  # noqa: E402 - after the path is set
from baton_runtime.box import FRAME_BYTES  # noqa: E402
from baton_runtime.offline_tokens import provide_o200k  # noqa: E402
from baton_runtime.sandbox import EXPORT_ROOT, NAME  # noqa: E402 - and registers the sandbox NAME
from baton_runtime.session import Ran, Scenario  # noqa: E402
from inspect_ai import Task, task  # noqa: E402
from inspect_ai.dataset import MemoryDataset  # noqa: E402
from inspect_ai.log import transcript  # noqa: E402
from inspect_ai.model import ChatMessageSystem  # noqa: E402
from inspect_ai.scorer import Score, Target, accuracy, scorer, stderr  # noqa: E402
from inspect_ai.solver import Generate, TaskState, solver, use_tools  # noqa: E402
from inspect_ai.tool import Tool, ToolDef, ToolError, ToolParams  # noqa: E402
from inspect_ai.util import SandboxEnvironment, override_sandbox_output_limit, sandbox, store  # noqa: E402

SCENARIO = Scenario.load(HERE)
CALLS, WHERE = "baton:calls", "baton:sandbox"  # per-sample store keys
MESSAGE_LIMIT = 60  # a model that loops on tools ends here, and the sample is scored as it stands
DOCKER_NOTE = ("Tool calls and the judge ran in Inspect's docker sandbox (with the export's compose.yaml: no "
               "network, no capabilities, a read-only system, bounded /work and /tmp).")

provide_o200k()  # Inspect counts tokens with it; offline it cannot download it


# Each sample's data, by the sample's own sandbox environment (every provider makes one per sample): not in
# Inspect's store, which is copied and compared around every tool call for the transcript (seconds a call with
# a benchmark's megabytes of data, and the log would hold a copy after each call). It goes with the sample.
_DATA: weakref.WeakKeyDictionary[SandboxEnvironment, dict[str, Any]] = weakref.WeakKeyDictionary()


def _data() -> dict[str, Any]:
    data = _DATA.get(_environment())
    return SCENARIO.initial_data() if data is None else data


def _environment() -> SandboxEnvironment:
    return sandbox().as_type(SandboxEnvironment)  # the provider's own object, not Inspect's proxy of it


def confinement() -> dict[str, Any]:
    """Where this sample's calls run: the sandbox's name, whether it confines them (None: the provider's
    business), and in plain words."""
    inner = sandbox().as_type(SandboxEnvironment)  # the provider's own object, not Inspect's proxy of it
    said = getattr(inner, "baton_confinement", None)
    if isinstance(said, dict):
        return dict(said)
    kind = type(inner).__name__
    if kind == "LocalSandboxEnvironment":
        return {"name": "local", "confined": False,
                "note": "UNCONFINED: Inspect's local sandbox ran every tool call and the judge on this machine, "
                        "as the user running Inspect (each with an empty environment, in a process group of its "
                        "own). Leave out --sandbox to use the export's bubblewrap sandbox, or use --sandbox docker."}
    if kind == "DockerSandboxEnvironment":
        return {"name": "docker", "confined": True, "note": DOCKER_NOTE}
    return {"name": kind, "confined": None, "note": f"Tool calls and the judge ran in the {kind} sandbox, "
                                                     "confined as that provider confines them."}


def _root() -> str:
    """Where box.py finds the export inside the sandbox: /export, unless the sandbox runs on this machine."""
    inner = sandbox().as_type(SandboxEnvironment)
    if type(inner).__name__ == "LocalSandboxEnvironment":
        return str(HERE)
    return str(getattr(inner, "export_root", EXPORT_ROOT))


async def in_sandbox(request: bytes) -> Ran:
    """Run one box request in this sample's sandbox and read its frame."""
    try:
        with override_sandbox_output_limit(FRAME_BYTES + 65536, "exec"):  # the box bounds its frame
            done = await sandbox().exec(["python3", "-I", "-B", f"{_root()}/baton_runtime/box.py"],
                                        input=request, timeout=session.exec_timeout(SCENARIO),
                                        timeout_retry=False)
    except TimeoutError:
        return session.timed_out_in_box(SCENARIO)
    return session.ran_from_box(done.returncode, done.stdout, done.stderr)


def scenario_tool(spec: dict[str, Any]) -> Tool:
    name = spec["name"]

    async def execute(**args: Any) -> str:
        ran = await in_sandbox(session.call_request(SCENARIO, name, args, _data()))
        result = session.call_result(SCENARIO, name, ran)
        calls = store().get(CALLS, [])
        store().set(CALLS, [*calls, {"tool": name, "args": args, "output": result.output, "error": result.error}])
        if result.error is not None:
            raise ToolError(result.error)
        _DATA[_environment()] = result.data
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


@solver
def say_where_calls_run():  # noqa: ANN201
    """The sample's log says where its tool calls and its judge run: in its metadata, in the transcript,
    and (by the scorer) in the score's metadata. Plainly when that is UNCONFINED."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        where = confinement()
        store().set(WHERE, where)
        state.metadata["sandbox"] = where
        transcript().info(where["note"], source=f"sandbox {where['name']}")
        return state

    return solve


# With conversational samples, the agent's own figures beside the plain accuracy: trials the user simulator
# spoiled are counted apart (conversation.py).
CONVERSATIONAL = any(conversation.conversational(s) for s in SCENARIO.samples)
METRICS = [accuracy(), stderr(), *([conversation.agent_accuracy(), conversation.simulator_faults()]
                                   if CONVERSATIONAL else [])]


@scorer(metrics=METRICS)
def baton_scorer():  # noqa: ANN201
    async def score(state: TaskState, target: Target) -> Score:
        sample = SCENARIO.sample(state.metadata.get("baton_id", state.sample_id))  # a run's own sample
        calls, final = store().get(CALLS, []), _data()
        ran = await in_sandbox(session.judge_request(SCENARIO, sample, calls, final))
        verdict = session.judgement(SCENARIO, sample, calls, final, ran)
        metadata = {"differences": verdict.differences, "checkers": verdict.checkers,
                    "tool_calls": len(calls), "sandbox": store().get(WHERE) or confinement()}
        explanation = verdict.explanation
        # What the agent had to tell the user (tau2's communicate_info), read in its messages; nl_assertions shown only.
        unsaid = communicate.unsaid(sample.get("communicate_info") or [],
                                    [m.text for m in state.messages if m.role == "assistant"])
        if unsaid:
            metadata["communicate_info_unsaid"] = unsaid
            explanation = f"failed: {communicate.explanation(unsaid)}\n{explanation}"
        if sample.get("nl_assertions"):
            metadata["nl_assertions_not_scored"] = sample["nl_assertions"]
        said = store().get(conversation.RECORD)
        if said and conversation.conversational(sample):  # the value stays the judge's; the fault is said beside it
            metadata |= conversation.verdict(sample, said)
            if metadata[conversation.FAULT]:
                explanation += f"\nthe user simulator's fault, not the agent's: {metadata[conversation.FAULT]}"
        return Score(value=1.0 if verdict.passed and not unsaid else 0.0, explanation=explanation, metadata=metadata)

    return score


# The name is written here as a literal by `baton export`: Inspect reads it from the source.
# -T agent=NAME runs another agent than the model under test, -T runs=FILE several (baton_runtime/agents.py);
# -T user=MODEL plays the user of conversational samples with an Inspect model, -T user=scripted with the scripted
# user; without it, the scenario's own setting at export ([proving] user_simulator, scripted unless set).
@task(name="scenario")
def scenario(agent: str = agents.MODEL, runs: str | None = None, user: str | None = None) -> Task:
    samples = agents.dataset(SCENARIO, runs)
    user = SCENARIO.user_simulator if user is None else user
    if CONVERSATIONAL:
        conversation.check_model(user)
    return Task(
        dataset=MemoryDataset(samples, name=SCENARIO.name),
        solver=[say_where_calls_run(), policy_message(), use_tools([scenario_tool(t) for t in SCENARIO.tools]),
                agents.solver_for(agent, SCENARIO, user)],
        scorer=baton_scorer(),
        message_limit=MESSAGE_LIMIT + conversation.extra_messages(SCENARIO.samples),
        # The export's own sandbox, told which export to bind; `inspect eval task.py --sandbox docker` replaces it.
        sandbox=(NAME, str(HERE)),
    )

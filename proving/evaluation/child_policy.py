"""The policy gate's work on one sample, in the sample's confined process (``child_main.py``'s mode "policy"; the
worker's side is ``policy_gate.py``). Standard library only, no baton imports: loaded by path beside
``child_main.py``, like ``child_runs.py``, in the sample server's sandbox.

``design/policy.py`` is model-written code, so it runs only here, as the tools do. Its text comes in the job
(the worker read it through the scenario folder's one way in); it defines ``decide(data, tool, args)``: None when
the policy allows the call on that data, else the id of the rule that denies it, and may name in
``TOOLS_ENFORCE`` the rules the tools themselves must refuse (every rule when it names none).

- The sample's expected actions are replayed in turn; before each, ``decide`` is asked on a copy of the data as
  the actions before it left it: a denial is a policy violation of the gold.
- Each candidate call (the worker's choice: another sample's state-changing call put on this sample's ids) is
  asked of ``decide`` on a copy of the initial data; one it denies by a rule the tools enforce is then made, on
  another copy: whether the tool refused it (its output, or what it raised) and whether the data changed go back.
"""

from __future__ import annotations

import copy
import json
import types
from typing import Any

OUTPUT_CHARS = 2000


def _policy(source: str) -> types.ModuleType:
    module = types.ModuleType("baton_policy")
    module.__file__ = "design/policy.py"
    exec(compile(source, "design/policy.py", "exec"), module.__dict__)  # noqa: S102 - confined, as the tools are
    if not callable(getattr(module, "decide", None)):
        raise ValueError("design/policy.py defines no decide(data, tool, args)")
    return module


def _ask(decide: Any, data: Any, tool: str, args: dict[str, Any]) -> str | None:
    verdict = decide(copy.deepcopy(data), tool, copy.deepcopy(args))
    if verdict is None or verdict is False:
        return None
    return str(verdict)[:200]


def _made(tools: dict[str, Any], data: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
    before = json.dumps(data, sort_keys=True, default=str)
    try:
        output = tools[call["tool"]](data, **copy.deepcopy(call.get("args") or {}))
        raised = None
    except MemoryError:
        raise
    except BaseException as exc:  # noqa: BLE001 - whatever the tool raises is its answer
        output, raised = None, f"{type(exc).__name__}: {exc}"[:OUTPUT_CHARS]
    try:
        shown = json.loads(json.dumps(output, default=str))
    except (TypeError, ValueError):
        shown = str(output)[:OUTPUT_CHARS]
    return {"output": shown, "raised": raised, "changed": json.dumps(data, sort_keys=True, default=str) != before}


def run(job: dict[str, Any], cm: Any) -> int:
    """child_main's mode "policy"."""
    runner = cm.Runner(job)
    result: dict[str, Any] = {"completed": False, "violations": [], "denied": [], "problem": None}
    try:
        policy = _policy(str(job.get("policy_source") or ""))
    except MemoryError:
        raise
    except BaseException as exc:  # noqa: BLE001 - the policy's own defect, said as such
        result["problem"] = f"design/policy.py failed to load: {type(exc).__name__}: {exc}"[:OUTPUT_CHARS]
        cm.write_json(job["result_path"], result)
        return 0
    tools = runner.load_tools()
    data = runner.load_data() if tools is not None else None
    if tools is None or data is None:
        result["problem"] = str((runner.result.get("error") or {}).get("message") or "the tools did not load")
        cm.write_json(job["result_path"], result)
        return 0
    initial = copy.deepcopy(data)
    enforced = getattr(policy, "TOOLS_ENFORCE", None)
    enforced = {str(r) for r in enforced} if isinstance(enforced, set | list | tuple | frozenset) else None
    try:
        for index, action in enumerate(runner.sample.get("actions", [])):
            if action.get("tool") not in tools:
                break
            rule = _ask(policy.decide, data, action["tool"], action.get("args") or {})
            if rule is not None:
                result["violations"].append({"action": index, "rule": rule})
            _made(tools, data, action)
        for number, call in enumerate(job.get("candidates") or []):
            if call.get("tool") not in tools:
                continue
            rule = _ask(policy.decide, initial, call["tool"], call.get("args") or {})
            if rule is None or (enforced is not None and rule not in enforced):
                continue
            result["denied"].append({"candidate": number, "rule": rule, **_made(tools, copy.deepcopy(initial), call)})
    except MemoryError:
        raise
    except BaseException as exc:  # noqa: BLE001 - decide() raised: the policy's defect
        result["problem"] = f"design/policy.py's decide raised {type(exc).__name__}: {exc}"[:OUTPUT_CHARS]
    result["completed"] = result["problem"] is None
    cm.write_json(job["result_path"], result)
    return 0

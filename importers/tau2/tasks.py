"""A tau2 task as a baton sample (docs/import.md, "What maps to what").

- ``id``: ``task_<tau2 id>``; ``instruction``: the user's reason for calling (the conversation's opening);
- ``user``: the persona (tau2's, or a plain one), the task instructions as the goal, the known info as a fact the
  user gives when asked who they are, the unknown info as a withheld fact (what the user says when asked for it);
- ``actions``: the agent's expected actions (those that fail in tau2's own replay, changing nothing, are left out
  and named); ``expected_state``: what they change, by replay (``replay.py``);
- ``communicate_info``: scored on the agent's messages as tau2 scores it; ``nl_assertions``: kept, not scored.

A task this cannot carry faithfully (a state of its own to start from, actions of the user's, a reward basis baton
cannot score) is not made a sample: ``skipped`` says why, and the import's report names it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from importers.tau2.checkout import Task

STOP_WHEN = ["anything else"]  # what an agent says when it has done what was asked ("Is there anything else...?")
MAX_TURNS = 30
IDENTITY_WORDS = ["name", "zip code", "email", "user id", "verify your identity", "phone number", "customer id",
                  "authenticate"]  # how an agent asks for the known info (who the user is), for the scripted user
SCORED = {"DB", "COMMUNICATE"}  # the reward basis baton scores as tau2 does; NL_ASSERTION tau2 leaves to a judge
FILE_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
WORDS = re.compile(r"\w{3}")  # unknown info of fewer letters (tau2 has ".") says nothing the user could hold back


@dataclass
class Converted:
    sample: dict[str, Any] | None
    skipped: str | None = None  # why no sample was made
    notes: list[str] = field(default_factory=list)  # what the report says of this task
    outputs: list[Any] = field(default_factory=list)  # the kept actions' outputs in the replay
    failing: bool = False  # an expected action fails in the domain's own code


def sample_id(task: Task) -> str:
    return f"task_{task.id}"


def file_name(task: Task) -> str:
    return FILE_SAFE.sub("_", sample_id(task))[:180] + ".json"


def agent_actions(task: Task) -> list[dict[str, Any]]:
    criteria = task.evaluation_criteria
    return [{"tool": a.name, "args": a.arguments} for a in (criteria.actions or []) if a.requestor == "assistant"] \
        if criteria else []


def why_not(task: Task, tools: set[str]) -> str | None:
    """Why the task cannot be a faithful sample, or None."""
    state = task.initial_state or {}
    if any(state.get(k) for k in ("initialization_data", "initialization_actions", "message_history")):
        return ("it starts from a state of its own (initial_state: " + ", ".join(k for k in ("initialization_data",
                "initialization_actions", "message_history") if state.get(k)) + "); every baton sample starts "
                "from tools/data.json")
    criteria = task.evaluation_criteria
    if criteria is None:
        return "it has no evaluation_criteria (tau2 gives every run reward 1)"
    users = [a.name for a in criteria.actions or [] if a.requestor != "assistant"]
    if users:
        return f"its expected actions include the user's own ({', '.join(sorted(set(users)))}), on the user's device"
    unscorable = sorted(set(criteria.reward_basis) - SCORED - {"NL_ASSERTION"})
    if unscorable:
        return f"its reward rests on {', '.join(unscorable)}, which baton does not score"
    unknown = sorted({a["tool"] for a in agent_actions(task)} - tools)
    if unknown:
        return f"its expected actions call {', '.join(unknown)}, which the domain's toolkit does not define"
    return None


def convert(task: Task, domain: str, replayed: dict[str, Any], tools: set[str]) -> Converted:
    reason = why_not(task, tools)
    if reason is not None:
        return Converted(None, skipped=reason)
    criteria = task.evaluation_criteria
    assert criteria is not None  # why_not refused a task without
    notes: list[str] = []
    actions = agent_actions(task)
    failed = {f["action"]: f for f in replayed.get("failed", [])}
    kept, outputs = [], []
    replay_outputs = replayed.get("outputs") or [None] * len(actions)
    for index, action in enumerate(actions):
        fault = failed.get(index)
        if fault is None or fault["changed"]:
            kept.append(action)
            outputs.append(replay_outputs[index] if index < len(replay_outputs) else None)
        if fault is not None:
            what = "kept (it changed the data before failing)" if fault["changed"] else "left out (it changed nothing)"
            notes.append(f"expected action {index} {action['tool']}({_args(action['args'])}) fails in the domain's "
                         f"own code: {fault['message']}; tau2's replay goes on past it; {what}")
    unknown = None if isinstance(task.user_scenario.instructions, str) else task.user_scenario.instructions.unknown_info
    if unknown and not WORDS.search(unknown):
        notes.append(f"its unknown_info {unknown!r} holds no words: left out of the user part")
    if "NL_ASSERTION" in criteria.reward_basis:
        notes.append("its reward basis includes NL_ASSERTION (a model judge in tau2): baton keeps the assertions "
                     "and does not score them")
    sample: dict[str, Any] = {
        "id": sample_id(task),
        "instruction": _opening(task),
        "actions": kept,
        "expected_state": replayed.get("expected_state", {}),
        "user": _user(task, domain),
        "description": _description(task, domain),
    }
    if "COMMUNICATE" in criteria.reward_basis and criteria.communicate_info:
        sample["communicate_info"] = list(criteria.communicate_info)
    elif criteria.communicate_info:
        notes.append("communicate_info is given but not in its reward basis: kept as nl_assertions, not scored")
    nl = list(criteria.nl_assertions or [])
    if criteria.communicate_info and "communicate_info" not in sample:
        nl += [f"The agent tells the user: {info}" for info in criteria.communicate_info]
    if nl:
        sample["nl_assertions"] = nl
    if notes:
        sample["notes"] = " ".join(notes)
    return Converted(sample, notes=notes, outputs=outputs, failing=bool(failed))


def lookups_omitted(sample: dict[str, Any], gap: str) -> str:
    """Mark ``sample`` as one whose expected actions leave out the lookups that reveal the ids they pass (tau2's
    gold lists what matters to the state); the note for the report, from reachable.py's ``gap``."""
    sample["lookups_omitted"] = True
    needs = gap.split(" needs ", 1)[-1].split(", which", 1)[0]
    return (f"its expected actions pass an id that neither the user nor an earlier expected action gives ({needs}): "
            "tau2's gold leaves out the lookups an agent makes to find it, so baton's reachability check is not "
            "applied to it (lookups_omitted)")


def _args(args: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return text if len(text) <= 120 else text[:117] + "..."


def _opening(task: Task) -> str:
    instructions = task.user_scenario.instructions
    return instructions if isinstance(instructions, str) else instructions.reason_for_call


def _user(task: Task, domain: str) -> dict[str, Any]:
    scenario = task.user_scenario
    instructions = scenario.instructions
    persona = scenario.persona or f"A customer of the {domain} service (tau2-bench task {task.id})."
    if isinstance(instructions, str):
        return {"persona": persona, "goal": instructions, "stop_when": STOP_WHEN, "max_turns": MAX_TURNS}
    user: dict[str, Any] = {"persona": persona, "goal": instructions.task_instructions, "facts": {},
                            "stop_when": STOP_WHEN, "max_turns": MAX_TURNS}
    if instructions.known_info:
        user["facts"]["known_info"] = instructions.known_info
        user["asked_by"] = {"known_info": IDENTITY_WORDS}
    if instructions.unknown_info and WORDS.search(instructions.unknown_info):
        user["facts"]["unknown_info"] = instructions.unknown_info
        user["withheld"] = ["unknown_info"]
    return user


def _description(task: Task, domain: str) -> str:
    parts = [f"tau2-bench {domain} task {task.id}."]
    for key, value in (task.description or {}).items():
        if value:
            parts.append(f"{key.replace('_', ' ').capitalize()}: {value}")
    return " ".join(parts)

"""The simulated model as a BLIND solver: the model under test of an exported task, played offline.

It sees what any model under test sees, and nothing else: the policy (the system message), the tools' names,
the sample's instruction (the first user message; in a conversation, what the user says after it too) and the
results of its own calls. What to do with them is
a blind script, ``scenarios/_simulations/blind/<name>.py``, one per example scenario, chosen by the task it is
shown (``matches(policy, tools)``), never by a sample's id: it has no sample, expected action or checker to
read. A script provides::

    matches(policy: str, tools: set[str]) -> bool
    decide(policy: str, instruction: str, seen: [(tool, args, output)]) -> (text, [(tool, args)])

and an answer with no calls ends the sample. A task no script matches gets no answer here (``None``): the
solver gate then says it has no solver model rather than pretending to solve it.

Two ways reach it: the Inspect provider ``baton/simulated`` (proving/evaluation/blind_model.py, registered in
the process that runs the gates), and ``baton fake-api`` (workers/fake_api/answer.py), which answers a Messages
API request whose system message is an exported task's policy with ``anthropic_reply``. Every text it writes
starts with ``[simulated]``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from scenarios.script_files import import_script

LABEL = "[simulated]"
MODEL = "baton/simulated"  # the Inspect model string of the blind solver
POLICY_OPENING = "You are the agent in the scenario "  # proving.export.build.policy_text's first words
Seen = list[tuple[str, dict[str, Any], Any]]


@dataclass
class BlindReply:
    text: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def scripts_folder() -> Path:
    # Shipped with baton (package data), outside every scenario folder: no agent lists or reads it.
    return Path(str(files("scenarios"))) / "_simulations" / "blind"


def known_scripts() -> list[str]:
    return sorted(p.stem for p in scripts_folder().glob("*.py") if re.fullmatch(r"[A-Za-z0-9_]+", p.stem))


_loaded: dict[str, Any] = {}


def load_script(name: str) -> Any:
    if name not in _loaded:
        _loaded[name] = import_script(f"baton_blind_solver_{name}", scripts_folder() / f"{name}.py")
    return _loaded[name]


def script_for(policy: str, tools: set[str]) -> str | None:
    """The blind script that plays this task (its policy and tools), None when none does."""
    for name in known_scripts():
        if load_script(name).matches(policy, tools):
            return name
    return None


def reply(policy: str, instruction: str, tools: set[str], seen: Seen) -> BlindReply | None:
    """The blind solver's next turn, None when it has no script for this task."""
    name = script_for(policy, tools)
    if name is None:
        return None
    text, calls = load_script(name).decide(policy, instruction, seen)
    return BlindReply(f"{LABEL} {text}", [(tool, dict(args)) for tool, args in calls if tool in tools])


def parse_output(text: str, error: bool = False) -> Any:
    """A tool result as the script reads it: the JSON the tool returned, or ``{"error": text}``."""
    if error:
        return {"error": text}
    try:
        return json.loads(text)
    except ValueError:
        return {"error": text}


def call_id(conversation: str, index: int) -> str:
    """A deterministic tool-use id, unique within the conversation (the same request gets the same reply)."""
    return "toolu_sim" + hashlib.sha256(f"{conversation}#{index}".encode()).hexdigest()[:20]


# ---- the Messages API side (baton fake-api) ----------------------------------------------------------


def text_of(content: Any) -> str:
    """A Messages API content (or system): a text, or its text blocks' texts joined (the simulated user's too)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")


def anthropic_reply(system: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
                    ) -> dict[str, Any] | None:
    """The content and stop reason of the blind solver's answer to a Messages API request, or None when the
    request is not an exported task's (its system message is no export policy) or no script plays it."""
    policy = text_of(system)
    if not policy.startswith(POLICY_OPENING) or not messages:
        return None
    # What the user said: the opening, and in a conversation its later messages (tool results are not said).
    instruction = "\n".join(text_of(m.get("content")) for m in messages if m.get("role") == "user")
    uses: dict[str, tuple[str, dict[str, Any]]] = {}
    seen: Seen = []
    for message in messages:
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                uses[block.get("id", "")] = (block.get("name", ""), dict(block.get("input") or {}))
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in uses:
                tool, args = uses[block["tool_use_id"]]
                seen.append((tool, args, parse_output(text_of(block.get("content")), bool(block.get("is_error")))))
    names = {t.get("name", "") for t in tools or [] if isinstance(t, dict)}
    answer = reply(policy, instruction, names, seen)
    if answer is None:
        return None
    conversation = json.dumps(messages, sort_keys=True, default=str)
    content: list[dict[str, Any]] = [{"type": "text", "text": answer.text}]
    content += [{"type": "tool_use", "id": call_id(conversation, i), "name": tool, "input": args}
                for i, (tool, args) in enumerate(answer.calls)]
    return {"content": content, "stop_reason": "tool_use" if answer.calls else "end_turn"}

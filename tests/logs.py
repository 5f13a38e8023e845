"""Shared test data: hypothesis strategies for messy agent logs, and the recorded trajectories."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from hypothesis import strategies as st

from context.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, parse_message

# The recorded runs live beside the repository and must not be copied into it (their README);
# a fresh clone replays synthetic runs of the same format (tests/synthetic_trajectories.py).
TRAJECTORIES = Path(__file__).resolve().parents[2] / "shared" / "trajectories"
NO_SHARED_TRAJECTORIES = f"the full trajectories are not at {TRAJECTORIES} (a checkout without ../shared)"
TOOLS = ["Read", "Bash", "Grep", "LS", "Edit", "Write", "TodoWrite", "lookup"]


def load_trajectories(name: str, folder: Path = TRAJECTORIES) -> list[dict]:
    with gzip.open(folder / f"{name}.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def trajectory_messages(run: dict) -> list[Message]:
    return [parse_message(m) for m in run["messages"]]


words = st.text(alphabet="abcdefghij klmnop/._-0123456789\n", min_size=1, max_size=60)
# messy_log's building blocks, built once: a strategy made afresh inside every draw is validated and
# inspected again each time, which cost more CPU than drawing the log itself (the draws are the same).
_KINDS = st.sampled_from(["round", "step", "step", "step", "step", "orphan", "dup_user", "dup_assistant", "empty"])
_TOOL_NAMES = st.sampled_from(TOOLS)
_ROLES = st.sampled_from(["user", "assistant"])
_CALLS = st.integers(0, 3)
_ANSWERED = st.integers(0, 9)
_REPEATS = st.integers(1, 30)
_FLIP = st.booleans()


@st.composite
def messy_log(draw, max_events: int = 40) -> list[Message]:
    """A log as real agents leave them: rounds, parallel tool calls, interrupted
    calls, orphan results, same-role neighbours, empty messages."""
    msgs: list[Message] = []
    counter = 0
    for _ in range(draw(st.integers(1, max_events))):
        kind = draw(_KINDS)
        if kind == "round":
            msgs.append(Message(role="user", content=[TextBlock(text=draw(words))]))
        elif kind == "step":
            n_calls = draw(_CALLS)
            uses = []
            for _ in range(n_calls):
                counter += 1
                name = draw(_TOOL_NAMES)
                uses.append(
                    ToolUseBlock(
                        id=f"toolu_{counter:05d}", name=name, input={"path": f"src/f{counter}.py", "command": "ls"}
                    )
                )
            text = [TextBlock(text=draw(words))] if draw(_FLIP) or not uses else []
            msgs.append(Message(role="assistant", content=text + uses))
            answered = [u for u in uses if draw(_ANSWERED) > 0]  # ~10% interrupted
            if answered:
                results = [
                    ToolResultBlock(
                        tool_use_id=u.id, content=draw(words) * draw(_REPEATS), is_error=draw(_FLIP)
                    )
                    for u in answered
                ]
                if draw(_FLIP):
                    results.reverse()
                msgs.append(Message(role="user", content=results))
        elif kind == "orphan":
            msgs.append(Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_ghost", content="lost")]))
        elif kind == "dup_user":
            msgs.append(Message(role="user", content=[TextBlock(text="also: " + draw(words))]))
        elif kind == "dup_assistant":
            msgs.append(Message(role="assistant", content=[TextBlock(text="note " + draw(words))]))
        else:
            msgs.append(Message(role=draw(_ROLES), content=[]))
    return msgs

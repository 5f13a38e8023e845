"""Synthetic agent runs in the format of ``../shared/trajectories`` (its README), for a fresh clone.

The recorded runs must not be copied into the project (their README says so), so
the always-on tests replay runs written here instead: the same schema, the same
three shapes (Claude Code with per-call ``usage`` and a tool call interrupted
without a result; mini-swe-agent's one bash command a step with large outputs;
tau-bench's many user turns with small JSON results), deterministic, made up.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

WORDS = ("refund order customer policy window final sale damaged vip escalate amount total item status "
         "check return value config path error retry cache token handler request response").split()


def _text(rng: random.Random, lines: int, width: int = 10) -> str:
    return "\n".join(f"{n:>5}\t" + " ".join(rng.choice(WORDS) for _ in range(width)) for n in range(1, lines + 1))


def _use(tool_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def _result(tool_id: str, content: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content}


def _run(name: str, index: int, system: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": f"{name}-synthetic-{index}", "source": "tests/synthetic_trajectories.py", "model": "synthetic",
            "license": "MIT", "system": system, "messages": messages, "meta": {"synthetic": True}}


def claude_code(rng: random.Random, index: int, steps: int = 70) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Fix the refund rule."}]}]
    seen = 3_000
    for step in range(steps):
        tool_id = f"toolu_{index}_{step}"
        name, tool_input = rng.choice([("Read", {"file_path": f"src/{rng.choice(WORDS)}.py"}),
                                       ("Bash", {"command": "pytest -q"}), ("Grep", {"pattern": "refund"})])
        seen += 700
        usage = {"input_tokens": 5, "cache_creation_input_tokens": 700, "cache_read_input_tokens": seen,
                 "output_tokens": 80}
        text = {"type": "text", "text": f"Step {step}: looking at {tool_input}."}
        messages.append({"role": "assistant", "content": [text, _use(tool_id, name, tool_input)], "usage": usage})
        if step == steps // 2:  # the user interrupts: the call never gets its result
            messages.append({"role": "user", "content": [{"type": "text", "text": "Stop, check the tests first."}]})
            continue
        messages.append({"role": "user", "content": [_result(tool_id, _text(rng, rng.randint(20, 60)))]})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "Done."}]})
    return _run("claude-code", index, "You are Claude Code.", messages)


def mini_swe_agent(rng: random.Random, index: int, steps: int = 30) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Solve the issue."}]}]
    for step in range(steps):
        tool_id = f"bash_{index}_{step}"
        command = f"grep -rn {rng.choice(WORDS)} src | head -{rng.randint(20, 80)}"
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "THOUGHT: search."},
                                                          _use(tool_id, "bash", {"command": command})]})
        output = "<returncode>0</returncode>\n<output>\n" + _text(rng, rng.randint(10, 50), 14) + "\n</output>"
        messages.append({"role": "user", "content": [_result(tool_id, output)]})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "COMPLETE_TASK_AND_SUBMIT"}]})
    return _run("mini-swe-agent", index, "You are a helpful assistant that can run bash.", messages)


def tau_bench(rng: random.Random, index: int, turns: int = 9) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        ask = f"Customer: about order O{1000 + turn}, " + " ".join(rng.choice(WORDS) for _ in range(25))
        messages.append({"role": "user", "content": [{"type": "text", "text": ask}]})
        for call in range(2):
            tool_id = f"call_{index}_{turn}_{call}"
            messages.append({"role": "assistant", "content": [
                _use(tool_id, "get_order_details", {"order_id": f"O{1000 + turn}"})]})
            order = {"order_id": f"O{1000 + turn}", "items": [{"name": rng.choice(WORDS), "price": rng.randint(5, 900)}
                                                               for _ in range(4)], "status": rng.choice(WORDS)}
            messages.append({"role": "user", "content": [_result(tool_id, json.dumps(order))]})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "Agent: here is what I found."}]})
    return _run("tau-bench-airline", index, "You are an airline support agent. Follow the policy.", messages)


SHAPES = {"claude-code": claude_code, "mini-swe-agent": mini_swe_agent, "tau-bench-airline": tau_bench}


def write_synthetic(folder: Path, runs: int = 3, seed: int = 7, shapes: tuple[str, ...] = tuple(SHAPES)) -> Path:
    """``<shape>.jsonl.gz`` files of ``runs`` runs each in ``folder`` (every shape, or those named: each has
    its own random stream, so a shape's runs are the same either way); returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in shapes:
        make = SHAPES[name]
        rng = random.Random(f"{seed}-{name}")
        with gzip.open(folder / f"{name}.jsonl.gz", "wt", encoding="utf-8") as fh:
            for index in range(runs):
                fh.write(json.dumps(make(rng, index)) + "\n")
    return folder

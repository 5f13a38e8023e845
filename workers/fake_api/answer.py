"""A checked request in, a Messages API response body out: the simulated model answers.

The body is shaped like the real API's (``id``, ``type``, ``role``, ``model`` = the id asked
for, ``content``, ``stop_reason``, ``stop_sequence``, ``usage``); the text of every reply
still starts with ``[simulated]``, so nobody mistakes it for Claude. ``usage`` comes from
the double's own count (``counting``) and prompt cache (``cache``), not from the
simulated model's estimate.
"""

from __future__ import annotations

from typing import Any

from agents.models import ModelError, ModelRequest
from agents.simulated import SimulatedModel
from context.tokens import count_text
from proving.evaluation import blind, simulated_user
from workers.fake_api.cache import CacheUse
from workers.fake_api.counting import claude_tokens
from workers.fake_api.rules import CheckedRequest, invalid


def model_request(checked: CheckedRequest, betas: list[str]) -> ModelRequest:
    body = checked.body
    assert body.max_tokens is not None  # checked: a message request has one
    return ModelRequest(model=body.model, max_tokens=body.max_tokens, messages=body.messages, system=body.system,
                        tools=body.tools, tool_choice=body.tool_choice, betas=betas)


def answer(model: SimulatedModel, checked: CheckedRequest, betas: list[str], cache: CacheUse) -> dict[str, Any]:
    """The simulated model's reply as a Messages API body; a brief it has no script for (``UnknownBrief``)
    or a script that cannot go on is a 400. A request of an exported task's model under test (its system
    message is the task's policy) is answered by the blind solver (proving/evaluation/blind.py), where it has a
    script for the task; one of a conversation's user simulator (its system message is the user simulator's
    prompt) by the simulated user (proving/evaluation/simulated_user.py)."""
    body = checked.body
    solved = _played_user(body.system, body.messages) or blind.anthropic_reply(body.system, body.messages, body.tools)
    if solved is not None:
        return message(checked, solved["content"], solved["stop_reason"],
                       cache.usage(claude_tokens(count_text(str(solved["content"])))))
    try:
        response = model.create(model_request(checked, betas))
    except ModelError as err:
        # Deterministic: the same request fails the same way, so it is not a retryable 5xx.
        raise invalid(f"the simulated model cannot answer this request: {err}") from None
    return message(checked, [block.model_dump(exclude_none=True) for block in response.content],
                   response.stop_reason, cache.usage(claude_tokens(response.usage.output_tokens)), response.id)


def _played_user(system: Any, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The simulated user's answer to a user simulator's request, None to any other; a 400 when the prompt
    starts as a user simulator's but is not one the simulated user can read (it never guesses a fact)."""
    if not simulated_user.recognises(system):
        return None
    played = simulated_user.anthropic_reply(system, messages)
    if played is None:
        raise invalid("the simulated user cannot read this user simulator prompt: it is not the one "
                      "baton_runtime/user_simulator.md writes")
    return played


def prewarmed(checked: CheckedRequest, cache: CacheUse) -> dict[str, Any]:
    """The answer to ``max_tokens: 0`` (prompt-caching page, "Pre-warming the cache"): ``stop_reason``
    ``max_tokens``, empty ``content``, the cache write charged and no output."""
    return message(checked, [], "max_tokens", cache.usage(0))


def message(checked: CheckedRequest, content: list[dict[str, Any]], stop_reason: str | None,
            usage: dict[str, Any], message_id: str | None = None) -> dict[str, Any]:
    """A Messages API response body of the model ``checked`` asked for."""
    return {
        "id": message_id or "msg_sim" + blind.call_id(str(content), 0).removeprefix("toolu_sim"),
        "type": "message",
        "role": "assistant",
        "model": checked.model.id,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }

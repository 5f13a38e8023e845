"""``baton/simulated``: the simulated model as an Inspect model provider, the blind solver of the solver gate.

Importing this module registers the provider (Inspect's ``@modelapi``) in this process: the process that runs
the gates (embedded, a worker, ``baton evaluate``). The exported task needs nothing of baton's for it: the
provider answers ``generate`` in the process that runs ``inspect_ai.eval``, and the export stays runnable
with any other model. Each answer is the blind script's (proving/evaluation/blind.py), from the messages
Inspect sends: the policy, the instruction, the tools and the results of the calls so far. Usage is counted
as Inspect counts tokens for any model (``count_tokens``), so the solver's spend shows in the log like a
real model's. A task no script plays is a ``ValueError`` the eval log records: the gate checks first.

The same provider plays a conversation's user (``-T user=baton/simulated``): a request whose system message is
a user simulator's prompt is answered by the simulated user (proving/evaluation/simulated_user.py), by the
scripted user's rules, never by the blind solver.
"""

from __future__ import annotations

import json
from typing import Any

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    modelapi,
)
from inspect_ai.model._model_output import ChatCompletionChoice
from inspect_ai.tool import ToolCall, ToolChoice, ToolInfo

from proving.evaluation import blind, simulated_user

PROVIDER = "baton"


class BlindSolverApi(ModelAPI):
    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig = GenerateConfig(), **model_args: Any) -> None:
        super().__init__(model_name, base_url, api_key, [], config)

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice,
                       config: GenerateConfig) -> ModelOutput:
        policy = "\n".join(m.text for m in input if isinstance(m, ChatMessageSystem))
        if simulated_user.recognises(policy):
            return await self._play_the_user(policy, input)
        # In a conversation the user's later messages are read with the opening: an order id may come in a reply.
        instruction = "\n".join(m.text for m in input if isinstance(m, ChatMessageUser))
        answer = blind.reply(policy, instruction, {t.name for t in tools}, _seen(input))
        if answer is None:
            raise ValueError("the simulated blind solver has no script for this task (scenarios/_simulations/"
                             f"blind/: {', '.join(blind.known_scripts()) or 'none'}): name a solver model")
        conversation = json.dumps([m.model_dump(mode="json", exclude={"id"}) for m in input], sort_keys=True)
        calls = [ToolCall(id=blind.call_id(conversation, i), function=tool, arguments=args)
                 for i, (tool, args) in enumerate(answer.calls)]
        return await self._output(input, answer.text, calls, answer.text + json.dumps(answer.calls))

    async def _play_the_user(self, prompt: str, input: list[ChatMessage]) -> ModelOutput:
        said = [(m.role, m.text) for m in input if isinstance(m, ChatMessageUser | ChatMessageAssistant)]
        text = simulated_user.reply_text(prompt, said)
        if text is None:
            raise ValueError("the simulated user cannot read this user simulator prompt (it is not the one "
                             "baton_runtime/user_simulator.md writes): name a model to play the user")
        return await self._output(input, text, [], text)

    async def _output(self, input: list[ChatMessage], text: str, calls: list[ToolCall], spoken: str) -> ModelOutput:
        """The answer, its usage counted as Inspect counts any model's (``spoken``: what its output tokens are)."""
        message = ChatMessageAssistant(content=text, model=self.model_name, source="generate", tool_calls=calls or None)
        input_tokens = await self.count_tokens(input)
        output_tokens = await self.count_text_tokens(spoken)
        return ModelOutput(model=self.model_name,
                           choices=[ChatCompletionChoice(message=message,
                                                         stop_reason="tool_calls" if calls else "stop")],
                           usage=ModelUsage(input_tokens=input_tokens, output_tokens=output_tokens,
                                            total_tokens=input_tokens + output_tokens))


def _seen(messages: list[ChatMessage]) -> blind.Seen:
    """(tool, arguments, output) of every call answered so far, in order."""
    asked: dict[str, tuple[str, dict[str, Any]]] = {}
    seen: blind.Seen = []
    for message in messages:
        if isinstance(message, ChatMessageAssistant):
            asked.update({c.id: (c.function, dict(c.arguments)) for c in message.tool_calls or []})
        elif isinstance(message, ChatMessageTool) and message.tool_call_id in asked:
            tool, args = asked[message.tool_call_id]
            error = message.error.message if message.error else None
            seen.append((tool, args, blind.parse_output(error or message.text, error is not None)))
    return seen


@modelapi(name=PROVIDER)
def baton_provider() -> type[ModelAPI]:
    return BlindSolverApi

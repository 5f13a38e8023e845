"""``baton/simulated``: the simulated model as an Inspect model provider, the blind solver of the solver gate.

Importing this module registers the provider (Inspect's ``@modelapi``) in this process: the process that runs
the gates (embedded, a worker, ``baton evaluate``). The exported task needs nothing of baton's for it: the
provider answers ``generate`` in the process that runs ``inspect_ai.eval``, and the export stays runnable
with any other model. Each answer is the blind script's (proving/evaluation/blind.py), from the messages
Inspect sends: the policy, the instruction, the tools and the results of the calls so far. Usage is counted
as Inspect counts tokens for any model (``count_tokens``), so the solver's spend shows in the log like a
real model's. A task no script plays is a ``ValueError`` the eval log records: the gate checks first.
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

from proving.evaluation import blind

PROVIDER = "baton"


class BlindSolverApi(ModelAPI):
    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig = GenerateConfig(), **model_args: Any) -> None:
        super().__init__(model_name, base_url, api_key, [], config)

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice,
                       config: GenerateConfig) -> ModelOutput:
        policy = "\n".join(m.text for m in input if isinstance(m, ChatMessageSystem))
        instruction = next((m.text for m in input if isinstance(m, ChatMessageUser)), "")
        answer = blind.reply(policy, instruction, {t.name for t in tools}, _seen(input))
        if answer is None:
            raise ValueError("the simulated blind solver has no script for this task (scenarios/_simulations/"
                             f"blind/: {', '.join(blind.known_scripts()) or 'none'}): name a solver model")
        conversation = json.dumps([m.model_dump(mode="json", exclude={"id"}) for m in input], sort_keys=True)
        calls = [ToolCall(id=blind.call_id(conversation, i), function=tool, arguments=args)
                 for i, (tool, args) in enumerate(answer.calls)]
        message = ChatMessageAssistant(content=answer.text, model=self.model_name, source="generate",
                                       tool_calls=calls or None)
        input_tokens = await self.count_tokens(input)
        output_tokens = await self.count_text_tokens(answer.text + json.dumps(answer.calls))
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

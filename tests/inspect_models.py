"""Inspect model providers the tests run the exported task with, in Inspect's own process.

baton runs Inspect in a child process (proving/export/inspect_child.py), so a model the tests script cannot be
a Python callable of the test's process: it is a provider registered here, imported by the child first
(``ModelSpec.modules``), and given its script as JSON model arguments. ``spec`` names one.

- ``scripted/model``: makes the sample's calls, one per turn, then answers in text: ``calls`` (the same for every
  sample) or ``script`` (a sample's user instruction -> its calls);
- ``asking/model``: the agent of a conversation: until the user has said O1001 it says ``first``; then it looks
  the order up, refunds it and says ``done``;
- ``leaky_user/ana``: a user that volunteers the order id it must hold back;
- ``stubborn_user/ana``: a user that will not give its order id, asked or not, and gives up.
"""

from __future__ import annotations

from typing import Any

from inspect_ai.model import (
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    modelapi,
)

from proving.export.inspect_child import ModelSpec

MODULE = __name__


def spec(name: str, **args: Any) -> ModelSpec:
    return ModelSpec(name=name, args=args, modules=[MODULE])


class Provider(ModelAPI):
    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig = GenerateConfig(), **model_args: Any) -> None:
        super().__init__(model_name, base_url, api_key, [], config)
        self.args = model_args

    def output(self, text: str) -> ModelOutput:
        return ModelOutput.from_content(f"{self.provider}/{self.model_name}", text)

    def call(self, tool: str, args: dict[str, Any]) -> ModelOutput:
        return ModelOutput.for_tool_call(f"{self.provider}/{self.model_name}", tool, args)

    provider = ""


class Scripted(Provider):
    provider = "scripted"

    async def generate(self, input: list[Any], tools: list[Any], tool_choice: Any,
                       config: GenerateConfig) -> ModelOutput:
        if "script" in self.args:
            instruction = next(m for m in input if isinstance(m, ChatMessageUser)).text
            calls = self.args["script"][instruction]
        else:
            calls = self.args.get("calls") or []
        done = sum(isinstance(m, ChatMessageTool) for m in input)
        if done < len(calls):
            return self.call(calls[done]["tool"], calls[done]["args"])
        return self.output("Done.")


class Asking(Provider):
    provider = "asking"

    async def generate(self, input: list[Any], tools: list[Any], tool_choice: Any,
                       config: GenerateConfig) -> ModelOutput:
        if not any(isinstance(m, ChatMessageUser) and "O1001" in m.text for m in input):
            return self.output(self.args["first"])
        made = sum(isinstance(m, ChatMessageTool) for m in input)
        calls = [("get_order", {"order_id": "O1001"}),
                 ("issue_refund", {"order_id": "O1001", "amount": 89.0, "reason": "within 30 days"})]
        if made < len(calls):
            return self.call(*calls[made])
        return self.output(self.args["done"])


class LeakyUser(Provider):
    provider = "leaky_user"

    async def generate(self, input: list[Any], tools: list[Any], tool_choice: Any,
                       config: GenerateConfig) -> ModelOutput:
        heard = input[-1].text  # the agent's last words, as the user hears them
        return self.output("Lovely, thank you! ###STOP###" if "refunded" in heard else "Oh, and my order is O1001.")


class StubbornUser(Provider):
    provider = "stubborn_user"

    async def generate(self, input: list[Any], tools: list[Any], tool_choice: Any,
                       config: GenerateConfig) -> ModelOutput:
        return self.output("I'd rather not say. Never mind then. ###STOP###")


for _api in (Scripted, Asking, LeakyUser, StubbornUser):
    modelapi(name=_api.provider)(lambda api=_api: api)


def whole(log: Any) -> Any:
    """Inspect's own log of an ``eval_export`` (which returns what baton reads of it), from where baton moved it,
    redacted: for a test that reads its events, errors or the eval's spec."""
    from inspect_ai.log import read_eval_log

    return read_eval_log(log.location)


class Environ(Provider):
    """Answers with what its own process's environment holds of ``names`` (JSON): what Inspect's process sees."""

    provider = "environ"

    async def generate(self, input: list[Any], tools: list[Any], tool_choice: Any,
                       config: GenerateConfig) -> ModelOutput:
        import json
        import os

        return self.output(json.dumps({"environ": {n: os.environ.get(n) for n in self.args["names"]},
                                       "cwd": os.getcwd()}))


modelapi(name=Environ.provider)(lambda: Environ)

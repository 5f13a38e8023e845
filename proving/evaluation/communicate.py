"""What an agent had to tell the user and did not (a sample's ``communicate_info``), by tau2-bench's rule: each text
must appear in one of the agent's messages, compared in lower case with the message's commas dropped (so "1,093.34"
says "1093.34"). Standard library only: ``baton export`` copies this file into the exported task, whose scorer
applies it to the model's messages, and baton's own gate harness applies it to what its scripted agents say."""

from __future__ import annotations

from collections.abc import Iterable


def unsaid(infos: Iterable[str], messages: Iterable[str]) -> list[str]:
    """The texts of ``infos`` that none of the agent's ``messages`` says, in their order."""
    said = [message.lower().replace(",", "") for message in messages if message]
    return [info for info in infos if not any(info.lower() in text for text in said)]


def explanation(missing: list[str]) -> str:
    return "the agent did not tell the user " + "; ".join(repr(m) for m in missing) + " (communicate_info)"

"""baton's reminders to the agent, and how a request sends them.

baton adds two instructions of its own to an agent's log: the plan's recap
(``context.todo_recap``) and the news that the team's conventions changed (agents/step.py).
They come from the operator, not from the user, so on a model that takes a mid-conversation
``role: "system"`` message they go out as one (platform docs, "Mid-conversation system
messages"), and as user text, as before, on a model that does not.

The log and the view keep a reminder as a text block flagged ``TextBlock.reminder``, merged
into the user message it follows, so the view's steps stay user/assistant pairs (the assembler
lays them down by those units). Only the request form splits it off: the trailing reminders
of a user message become one system message after it (``split_reminders``). That is where the
docs allow one: after a user turn (tool results, an opening), followed by the agent's reply or
last, never first, never two in a row (they are one message), text only. The split depends on
the message and the model alone, so a logged message goes out the same way in every request,
the summary's included, and the prefix only appends. Nudges follow the agent's reply, where a
system message may not go, and @file notes are the user's own content: neither is a reminder.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from context.messages import Message, TextBlock

# "claude-<line>-<major>[-<minor>][-<date>]", as the Models API lists every model since Claude 4.
_MODEL_ID = re.compile(r"claude-(opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?")
# The ids before Claude 4 ("claude-3-5-sonnet-20241022", "claude-instant-1.2", "claude-2.1"): none takes one.
_OLD_MODEL_ID = re.compile(r"claude-(?:instant-)?[0-3](?:[-.].*)?")
# The first version of each line that takes a mid-conversation system message: Opus 4.8 brought them, and
# the 5.5 models of every line have them; Sonnet 4.x and Sonnet 5 do not.
FIRST_WITH: dict[str, tuple[int, int]] = {"opus": (4, 8), "sonnet": (5, 5), "haiku": (4, 8)}


def takes_system_messages(model: str) -> bool:
    """Whether ``model`` takes a mid-conversation ``role: "system"`` message; a model that does not answers
    one with a 400 ("role 'system' is not supported on this model"). An id of another form (a newer
    naming, a line name such as ``opus`` before it is resolved) is taken to be a newer model, which
    does. The API double's catalogue asks this too (workers/fake_api/catalogue.py), so the two agree."""
    if _OLD_MODEL_ID.fullmatch(model):
        return False
    found = _MODEL_ID.fullmatch(model)
    if found is None:
        return True
    line, version = found[1], (int(found[2]), int(found[3] or 0))
    return version >= FIRST_WITH[line]


def reminder(text: str) -> TextBlock:
    """A reminder's text block, as the log keeps it."""
    return TextBlock(text=text, reminder=True)


def reminders_start(message: Message) -> int:
    """Where the trailing reminders of a user message start; ``len(message.content)`` when there are none,
    or when the message is nothing but reminders (a system message follows a user turn, never replaces one)."""
    content, start = message.content, len(message.content)
    if message.role != "user":
        return start
    while start and isinstance(content[start - 1], TextBlock) and content[start - 1].reminder:
        start -= 1
    return start or len(content)


def split_reminders(messages: Sequence[Message], forms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request messages for a model that takes system messages (``takes_system_messages``): ``forms``, the
    request forms of ``messages`` (cache_control included), with each user message's trailing reminders split
    off into one system message right after it; ``forms`` itself when nothing is split. A breakpoint stays on
    the block it was on."""
    out: list[dict[str, Any]] | None = None
    for i, message in enumerate(messages):
        last = message.content[-1] if message.content else None
        # Most messages end otherwise; this runs over every message of every request, so that is seen first.
        start = reminders_start(message) if type(last) is TextBlock and last.reminder else -1
        if start < 0 or start == len(message.content):
            if out is not None:
                out.append(forms[i])
            continue
        out = forms[:i] if out is None else out
        content = forms[i]["content"]
        out += [{"role": "user", "content": content[:start]}, {"role": "system", "content": content[start:]}]
    return forms if out is None else out

"""What baton tells an agent in its log between steps: a reply that ran no tool call (and why none ran),
and a change of the team's conventions.

Each note is a new message at the end of the log, so no earlier message (and no cached prefix) changes.
"""

from __future__ import annotations

from typing import Any

from agents.conventions import conventions_for
from agents.disk import AgentDisk
from agents.events import OutputCutEvent, WarningEvent
from agents.outcomes import StepOutcome
from agents.step_outcome import failed
from context.messages import Message, TextBlock
from context.reminders import reminder

# After this many replies in a row without a tool call that ran, the turn fails.
MAX_NUDGES = 3
NUDGE = (
    "[baton] Your reply had no tool call, but a turn only ends with SubmitHandoff. "
    "Continue the work with the tools, then call SubmitHandoff with your payload."
)
CUT_CALLS = (
    "[baton] Your reply was cut off at the output limit ({max_tokens} tokens) while it was writing a tool "
    "call, so none of its tool calls ran ({calls}). Split the work into smaller tool calls: write a long "
    "file in parts (Write a first part, then Edit to add the rest), one file per call."
)
CUT_TEXT = (
    "[baton] Your reply was cut off at the output limit ({max_tokens} tokens). Continue from where it "
    "stopped, in shorter replies: put long content into files with the tools."
)
CONVENTIONS_CHANGED = "[baton] The team's conventions changed. From now on, follow these:"


def note_conventions(disk: AgentDisk, step: int) -> None:
    """Fix the conventions the system prompt carries at the agent's first step; when they change later,
    tell the agent in a new message at the end of its log (a reminder, context.reminders: a system message
    on a model that takes one). The system prompt never changes within a conversation: the thinking
    Claude wrote is signed over it, and the whole cached prefix hangs on it."""
    current = conventions_for(disk.layout.root)
    seen, now = disk.state.conventions, current.fingerprint or "none"
    if disk.state.system_conventions is None:  # the first step: the system prompt takes them as they are
        disk.state.system_conventions = current.text
    elif seen == now:
        return
    else:
        change = "removed" if now == "none" else f"now from {current.sources}"
        text = current.text or "There are no team conventions any more: the earlier ones no longer apply."
        disk.append("note", step - 1, disk.iteration(), Message(role="user", content=[reminder(
            f"{CONVENTIONS_CHANGED}\n\n{text}")]))
        disk.event(WarningEvent(after_step=step - 1, reason=(
            f"the conventions changed ({change}): the agent was told in a new message at the end of its log "
            "(the system prompt stays as it was, so the cache and the thinking before it stay valid)")))
    disk.state.conventions = now
    disk.save_state()


def note_for(disk: AgentDisk, step: int) -> str:
    """What the agent is told after step ``step``'s reply ran no tool call: why, from the events."""
    kept = [e for e in disk.events if isinstance(e, OutputCutEvent) and e.step == step and e.retry_max_tokens is None]
    if not kept:
        return NUDGE
    cut = kept[-1]
    if cut.tools:
        return CUT_CALLS.format(max_tokens=cut.max_tokens, calls=", ".join(cut.tools))
    return CUT_TEXT.format(max_tokens=cut.max_tokens)


def remind(disk: AgentDisk, step: int, base: dict[str, Any], note: str) -> StepOutcome:
    """After a reply that ran no tool call: a note saying why and what to do, or a failed turn when it keeps
    happening. A cut reply counts too: a model that keeps overrunning the limit would loop otherwise."""
    disk.state.nudges += 1
    if disk.state.nudges > MAX_NUDGES:
        replies = disk.state.nudges
        disk.state.nudges = 0  # a human who resumes the run gives the agent a fresh count
        disk.save_state()
        return failed(disk, step, base, f"the agent replied {replies} times in a row without a tool call that ran")
    disk.append("note", step, disk.iteration(), Message(role="user", content=[TextBlock(text=note)]))
    disk.save_state()
    return StepOutcome(step=step, status="continue", reason="reply without a tool call that ran; told the agent why",
                       **base)

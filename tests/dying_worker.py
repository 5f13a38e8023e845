"""A Celery app for tests/test_sent_once.py: baton's own (``workers.app``), in a worker whose process kills
itself (SIGKILL) once, in a compaction task, just before the step that follows it is published.

The compaction is on disk by then and nothing of its step was sent: the broker delivers the compaction
again (``task_acks_late``, ``task_reject_on_worker_lost``), and that copy must send the step. Started with
``celery -A tests.dying_worker worker`` and ``BATON_TEST_DIED`` naming a file that is created as the
process dies, so the copy delivered again lives.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from celery import current_task
from celery.signals import before_task_publish

from workers.app import app  # what `celery -A tests.dying_worker` runs

__all__ = ["app"]


@before_task_publish.connect
def _die_before_the_step_is_sent(sender: str | None = None, **_: object) -> None:
    marker = Path(os.environ["BATON_TEST_DIED"])
    if sender != "baton.step" or not current_task or current_task.name != "baton.compaction":
        return
    if marker.exists():
        return  # died once already: this is the copy delivered again
    marker.touch()
    os.kill(os.getpid(), signal.SIGKILL)

"""Child processes that run untrusted commands: Bash (agents/tools/bash.py) and the
evaluation samples (agents/evaluation/child.py). Both start their child with
``start_new_session=True``, so the child and everything it spawns share one
process group that can be killed as a whole."""

from __future__ import annotations

import os
import signal


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid``. Safe only while the group exists (its
    leader not yet reaped, or members known to be left): otherwise the id may be reused."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone

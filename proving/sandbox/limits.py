"""The limits of a sandbox beside its wall clock, and where each is set.

``RLIMIT_NPROC`` counts the processes of a user *in a user namespace*: each sandbox has one
of its own, so the limit is set inside it (by ``child_main.py``, ``nest.py`` or Bash's
``ulimit``) and counts only that sandbox's processes. Set on bwrap itself, before the
namespace exists, it would count every process of the worker's user on the host.
"""

from __future__ import annotations

MAX_PROCESSES = 64  # per sample or Bash command, its init and shell included
BASH_MEMORY_MB = 2048  # a Bash command's share: cgroup for the whole, RLIMIT_AS per process
# A sample's folder: a tmpfs of this size (``eval_disk_mb``), so in memory, where a cgroup counts it too.
# nest.DISK_MB is the same figure for a request that names none.
EVAL_DISK_MB = 1024

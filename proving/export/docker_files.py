"""What an export carries for Inspect's ``docker`` sandbox: ``inspect eval task.py --sandbox docker`` finds
``compose.yaml`` beside task.py and builds the ``Dockerfile`` there (docs/export.md, "Where a tool call runs").

The container holds the export's ``tools/``, ``checkers/`` and ``baton_runtime/`` at ``/export`` (what
``.dockerignore`` lets into the build: never a ``.env`` or the logs beside task.py) and a python3 to run
``baton_runtime/box.py``, and has the bounds of the export's own bubblewrap sandbox
(``runtime/sandbox.py``; ``tests/test_export_sandbox.py`` checks that they agree): no network, every
capability dropped, no new privileges, a read-only root, a user that is not root, ``/work`` and ``/tmp``
as tmpfs of the same sizes, at most 64 processes. Inspect removes each sample's container when the sample
ends.
"""

from __future__ import annotations

EXPORT_ROOT = "/export"  # baton_runtime/sandbox.py's EXPORT_ROOT: where task.py looks for box.py
WORK_MB, TMP_MB = 256, 64  # baton_runtime/sandbox.py's WORK_MB and TMP_MB
MAX_PROCESSES = 64  # baton_runtime/box.py's MAX_PROCESSES, as baton's evaluation
BOX_MB = 256  # box.py and its interpreter, beside the child that runs the generated code
USER = "65534:65534"  # nobody: the export's files are root's and read-only to it
IMAGE = "python:3.12-slim"


def compose_yaml(memory_mb: int) -> str:
    """The compose file; the container's memory covers the child's limit, its tmpfs and the box."""
    return f"""\
# The sandbox of `inspect eval task.py --sandbox docker`, written by `baton export`: the bounds of the
# export's own bubblewrap sandbox (baton_runtime/sandbox.py). One container per sample, removed after it;
# every tool call and the judge run `python3 -I -B {EXPORT_ROOT}/baton_runtime/box.py` in it.
services:
  default:
    build: .
    init: true
    command: ["tail", "-f", "/dev/null"]
    network_mode: none
    cap_drop: [ALL]
    security_opt: ["no-new-privileges:true"]
    read_only: true
    user: "{USER}"
    working_dir: /work
    tmpfs:
      - /work:size={WORK_MB}m,mode=1777
      - /tmp:size={TMP_MB}m,mode=1777
    mem_limit: {memory_mb + WORK_MB + TMP_MB + BOX_MB}m
    pids_limit: {MAX_PROCESSES}
    stop_grace_period: 1s
"""


DOCKERFILE = f"""\
# Built by `inspect eval task.py --sandbox docker` (see compose.yaml): the export's code at {EXPORT_ROOT},
# root's and read-only to the user the calls run as, and a python3 to run baton_runtime/box.py.
FROM {IMAGE}
COPY . {EXPORT_ROOT}
RUN chmod -R a-w {EXPORT_ROOT}
WORKDIR /work
USER {USER}
"""

# Only the code a call needs goes into the image: not scenario.json, not a .env or the logs beside task.py.
DOCKERIGNORE = """\
*
!tools
!checkers
!baton_runtime
**/__pycache__
**/*.pyc
"""


def files(memory_mb: int) -> dict[str, str]:
    """Each file's name in the export, and its text."""
    return {"compose.yaml": compose_yaml(memory_mb), "Dockerfile": DOCKERFILE, ".dockerignore": DOCKERIGNORE}

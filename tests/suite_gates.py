"""The proving gates the test suite runs (set in tests/conftest.py): for a test that builds a process's whole
environment itself, so that the processes it starts run the same gates as the rest of the suite."""

from __future__ import annotations

import os


def suite_gates() -> dict[str, str]:
    """The ``BATON_PROVING_*`` variables of this test process."""
    return {name: value for name, value in os.environ.items() if name.startswith("BATON_PROVING_")}

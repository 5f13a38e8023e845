"""Copied into an imported scenario as ``checkers/tau2_database.py`` (by importers/tau2/scenario.py): judges a
sample's outcome by what tau2-bench needs of it beyond the state comparison baton's scorer already makes (the
final data against the expected actions' replay and ``expected_state``, which is tau2's database check).

Standard library only here; the domain's own database model is loaded from the scenario's ``tools/`` (beside
this folder), through ``tau2_glue.py``, as the tools load it.
"""

from __future__ import annotations

import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def check_database_model(sample, outcome):
    """The final data is a database the domain's own model accepts: what tau2 hashes and compares is that model's
    dump, so data it refuses is no state a tau2 run could reach."""
    if outcome["final_data"] == outcome.get("initial_data"):  # tools/data.json is the model's own dump: it loads
        return {"passed": True, "reason": "the final data is the initial data, the domain's database as written"}
    if str(TOOLS) not in sys.path:
        sys.path.append(str(TOOLS))
    import tau2_glue  # noqa: PLC0415 - from tools/, put on the path just above

    try:
        tau2_glue.database(outcome["final_data"])
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        first = str(exc).splitlines()[:3]
        return {"passed": False, "reason": "the final data is not a database the domain's model accepts: "
                + " ".join(first)}
    return {"passed": True, "reason": "the final data loads as the domain's database model"}

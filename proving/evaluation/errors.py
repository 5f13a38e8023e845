"""Whether a tool's answer is an error, however the tool says it (issue 41): tools written for baton answer a
refusal as data (``{"error": "already_refunded"}``); imported benchmarks answer in text (tau2-bench's tools raise,
and its environment answers ``"Error: payment method should be ..."``; the import carries a text answer as
``{"result": "..."}``); any tool may raise.

An exception is a refusal only when it is one a tool raises on purpose (ValueError and the like). The exceptions
a bug raises (KeyError, TypeError, ...) are the tool's own defect, which the evaluation already classes L2; they
say nothing of the gold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Exceptions that say the tool's code is broken, not that it refused the call.
BUGS = frozenset({"KeyError", "IndexError", "TypeError", "AttributeError", "NameError", "UnboundLocalError",
                  "ZeroDivisionError", "ImportError", "ModuleNotFoundError", "SyntaxError", "RecursionError",
                  "MemoryError", "NotImplementedError", "AssertionError", "JSONDecodeError", "OverflowError"})
ERROR_TEXT = re.compile(r"^\s*error\b", re.IGNORECASE)
RAISED = re.compile(r"action (\d+): tool \S+ raised ([A-Za-z_][\w.]*)(?::\s*(.*?))?(?: at \S+:\d+ in \S+)?$", re.DOTALL)
TEXT_KEYS = ("result", "message", "output", "response")  # where a text answer is carried in a dict


def error_of(output: Any) -> str | None:
    """The error ``output`` says, or None when it is an answer."""
    if isinstance(output, str):
        return output.strip() if ERROR_TEXT.match(output) else None
    if isinstance(output, Mapping):
        error = output.get("error")
        if error not in (None, False, "", {}, []):
            detail = output.get("message") or output.get("detail")
            return f"error: {error}" + (f" ({detail})" if isinstance(detail, str) and detail else "")
        for key in TEXT_KEYS:
            if isinstance(output.get(key), str) and ERROR_TEXT.match(output[key]):
                return output[key].strip()
    return None


def failed_at(reason: str, index: int) -> str | None:
    """The refusal action ``index`` (from 0) raised, from the evaluation's reason; None when it raised nothing
    there, or raised what a bug raises."""
    match = RAISED.search(reason.strip())
    if match is None or int(match.group(1)) != index:
        return None
    kind = match.group(2).rsplit(".", 1)[-1]
    if kind in BUGS:
        return None
    return f"raised {kind}" + (f": {match.group(3)}" if match.group(3) else "")


def refused(call: Mapping[str, Any]) -> bool:
    """A call the tool refused, as the gates' harness records a call (``output``, ``error``)."""
    return bool(call.get("error")) or error_of(call.get("output")) is not None

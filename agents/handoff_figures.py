"""The figures of an ``execute_to_init`` payload that ``report.json`` holds: computed there, never claimed.

RunEvaluation writes ``execution_outputs/iteration_<n>/report.json`` from the samples it ran; Execute
copies its figures into the handoff. ``SubmitHandoff`` refuses a payload whose figures differ from the
report, and the loop decides "done" from the report's own success rate, so a run cannot end
succeeded on a rate the evaluation never measured (issue 23: ``success_rate: 1.0`` with 8 of 10 passed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.payloads import ExecuteToInit

# report.json rounds the rate to 4 decimals; a claim within half of that last digit is the same figure.
RATE_TOLERANCE = 0.00005 + 1e-12
LAYERS = ("L1", "L2", "L3", "L4")


def report_figures(report: Mapping[str, Any]) -> dict[str, Any]:
    """The figures a payload must repeat, by their payload name. A report that lacks one (hand-written) is
    completed from its counts: failed is total - passed, the rate is passed / total."""
    total, passed = report.get("total"), report.get("passed")
    figures: dict[str, Any] = {"totals.samples": total, "totals.passed": passed}
    counts = isinstance(total, int) and isinstance(passed, int)
    figures["totals.failed"] = report.get("failed", total - passed if counts else None)
    rate = report.get("success_rate")
    if rate is None and counts:
        rate = round(passed / total, 4) if total else 0.0
    figures["success_rate"] = rate
    layers = report.get("failures_per_layer")
    if isinstance(layers, Mapping):
        figures.update({f"failures_per_layer.{layer}": layers.get(layer, 0) for layer in LAYERS})
    return figures


def claimed_figures(payload: ExecuteToInit) -> dict[str, Any]:
    """The same figures as the payload states them."""
    figures: dict[str, Any] = {f"totals.{key}": value for key, value in payload.totals.model_dump().items()}
    figures["success_rate"] = payload.success_rate
    figures.update({f"failures_per_layer.{k}": v for k, v in payload.failures_per_layer.model_dump().items()})
    return figures


def _same(key: str, claimed: Any, measured: Any) -> bool:
    if key == "success_rate" and isinstance(measured, (int, float)) and not isinstance(measured, bool):
        return abs(float(claimed) - float(measured)) <= RATE_TOLERANCE
    return bool(claimed == measured)


def figure_differences(payload: ExecuteToInit, report: Mapping[str, Any]) -> list[str]:
    """Each figure the payload states differently from the report, as ``name: claimed X, report.json Y``."""
    claimed = claimed_figures(payload)
    return [
        f"{key}: claimed {claimed[key]!r}, report.json says {measured!r}"
        for key, measured in report_figures(report).items()
        if not _same(key, claimed[key], measured)
    ]

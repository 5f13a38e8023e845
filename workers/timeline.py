"""The timeline chart of ``baton context``: an agent's context size per step, its limits, iterations, handoffs
and numbered compactions.

The line drawn is the quantity compaction decides on and ``baton status`` shows: each step's *estimated*
input (baton's calibrated estimate, ``StepEvent.estimated_input``). The API's *measured* input for the same
call (its usage: input + cache writes + cache reads) is drawn beside it; the simulated model's usage is an
estimate too, and the chart says so.
"""

from __future__ import annotations

from itertools import groupby
from pathlib import Path
from typing import Any

from workers.readmodel import SIMULATED, AgentView

WINDOW_SHOWN_UP_TO = 1.6  # draw the window line when it is within 1.6x the chart's largest value, else name it


def plot_timeline(view: AgentView, policy: Any, path: Path) -> None:
    """Draw ``view`` against ``policy``'s window and threshold (the run's own threshold when its steps say)."""
    # Imported here: matplotlib is slow to import and only this command draws.
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and in tests
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    threshold, window = view.threshold or policy.threshold, policy.window
    points = view.timeline
    fig, ax = plt.subplots(figsize=(11, 5))
    steps = [p.step for p in points]
    ax.plot(steps, [p.estimated for p in points], marker="o", markersize=3, color="tab:blue",
            label="estimated input (calibrated; compaction and `baton status` use it)")
    measured = [(p.step, p.measured) for p in points if p.measured is not None]
    if measured:
        source = "simulated usage" if view.model == SIMULATED else "API usage"
        ax.plot(*zip(*measured), linestyle="--", linewidth=1, color="tab:green", alpha=0.8,
                label=f"measured input ({source}: input + cache writes + cache reads)")
    ax.axhline(threshold, color="red", linestyle="--", label=f"compaction threshold {threshold:,}")
    tallest = max([threshold, *(p.estimated for p in points), *(m for _, m in measured),
                   *(c.tokens_before for c in view.compactions)])
    if window <= WINDOW_SHOWN_UP_TO * tallest:
        ax.axhline(window, color="black", linewidth=1.2, label=f"context window {window:,}")
        top = window * 1.08
    else:
        ax.plot([], [], " ", label=f"context window {window:,} (above the chart)")
        top = tallest * 1.25
    ax.set_ylim(0, top)
    mark_iterations(ax, points, top)
    handoffs = [p for p in points if p.handoff]
    if handoffs:
        ax.plot([p.step for p in handoffs], [p.estimated for p in handoffs], linestyle="none", marker="*",
                markersize=13, color="darkorange", label="handoff (SubmitHandoff)")
    mark_compactions(ax, view, top)
    ax.set(xlabel="step", ylabel="tokens",
           title=f"{view.role}: context size per step ({len(points)} steps, {len(view.compactions)} compactions)")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not points:
        ax.text(0.5, 0.5, "no steps yet", transform=ax.transAxes, ha="center")
    # Below the axes, outside them: the legend never covers a point.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def mark_iterations(ax: Any, points: list, top: float) -> None:
    """Alternate shading per iteration, labelled at the top of the chart."""
    for n, (iteration, group) in enumerate(groupby(points, key=lambda p: p.iteration)):
        members = list(group)
        start, end = members[0].step - 0.5, members[-1].step + 0.5
        if n % 2:
            ax.axvspan(start, end, color="grey", alpha=0.08, linewidth=0)
        ax.text((start + end) / 2, top * 0.985, f"iteration {iteration}", ha="center", va="top", fontsize=8,
                color="dimgrey")


LANES = 4  # label rows under the top of the chart; more compactions than fit there are listed beside it
LISTED_PER_COLUMN = 24
GAP_PX = 4


def mark_compactions(ax: Any, view: AgentView, top: float) -> list[Any]:
    """Each compaction: a numbered line between two steps, an arrow from its size before to its size after, and
    a label "#n before→after" in the first row where it overlaps no other. When the labels do not fit in
    ``LANES`` rows (a compaction after nearly every step), the lines carry only their number and the sizes are
    listed beside the chart. Returns the labels drawn."""
    for i, c in enumerate(view.compactions):
        x = (c.after_step or 0) + 0.5
        ax.axvline(x, color="grey", linestyle=":", label="compaction: size before → after" if i == 0 else None)
        ax.annotate("", xy=(x, c.tokens_after), xytext=(x, c.tokens_before),
                    arrowprops={"arrowstyle": "->", "color": "purple", "linewidth": 1.5})
    full = [f"#{c.id}{' fallback' if c.fallback else ''}\n{c.tokens_before:,}→{c.tokens_after:,}"
            for c in view.compactions]
    texts = _in_lanes(ax, view, top, full)
    if texts is not None:
        return texts
    texts = _in_lanes(ax, view, top, [f"#{c.id}" for c in view.compactions], force=True) or []
    for column, start in enumerate(range(0, len(full), LISTED_PER_COLUMN)):
        listed = "\n".join(line.replace("\n", " ") for line in full[start:start + LISTED_PER_COLUMN])
        texts.append(ax.text(1.01 + 0.16 * column, 1.0, listed, transform=ax.transAxes, fontsize=7,
                             color="purple", va="top", ha="left"))
    return texts


def _in_lanes(ax: Any, view: AgentView, top: float, labels: list[str], force: bool = False) -> list[Any] | None:
    """``labels`` placed beside their compaction lines, each in the first of ``LANES`` rows where it overlaps
    none placed before; None (nothing left drawn) when one fits nowhere, unless ``force``."""
    renderer = ax.figure.canvas.get_renderer()
    right = ax.get_xlim()[1]
    lanes: list[list[Any]] = [[] for _ in range(LANES)]
    placed = []
    for c, label in zip(view.compactions, labels):
        x = (c.after_step or 0) + 0.5
        for n, lane in enumerate(lanes):
            text = ax.text(x + 0.15, top * (0.905 - 0.075 * n), label, fontsize=7, color="purple", va="top",
                           bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none", "pad": 0.5})
            box = text.get_window_extent(renderer)
            if box.x1 > ax.transData.transform((right, 0))[0]:  # past the chart's right edge: left of the line
                text.set(x=x - 0.15, ha="right")
                box = text.get_window_extent(renderer)
            box = box.expanded(1.0, 1.0).padded(GAP_PX)  # labels that only touch read as one
            if not any(box.overlaps(other) for other in lane) or (force and n == LANES - 1):
                lane.append(box)
                placed.append(text)
                break
            text.remove()
        else:
            for text in placed:
                text.remove()
            return None
    return placed

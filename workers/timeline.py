"""The timeline chart of ``baton context``: an agent's context size per step, its threshold, its compactions."""

from __future__ import annotations

from pathlib import Path

from workers.readmodel import AgentView


def plot_timeline(view: AgentView, threshold: int, path: Path) -> None:
    # Imported here: matplotlib is slow to import and only this command draws.
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and in tests
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps, sizes = zip(*view.points) if view.points else ((), ())
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(steps, sizes, marker="o", markersize=3, label="estimated input")
    ax.axhline(view.threshold or threshold, color="red", linestyle="--", label="threshold")
    for i, c in enumerate(view.compactions):
        ax.axvline((c.after_step or 0) + 0.5, color="grey", linestyle=":", label="compaction" if i == 0 else None)
    ax.set(xlabel="step", ylabel="tokens (estimated input)", title=f"{view.role}: context size per step")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not view.points:
        ax.text(0.5, 0.5, "no steps yet", transform=ax.transAxes, ha="center")
    ax.legend(loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)

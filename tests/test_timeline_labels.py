"""The context timeline's compaction labels never overlap (issue 38: with a compaction after most steps of the
demo, "#1 11,231→10,252" ran into "#3 12,035→10,324" and the next ones)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workers.timeline import mark_compactions

matplotlib = pytest.importorskip("matplotlib")


def _compactions(after_steps: list[int]) -> SimpleNamespace:
    return SimpleNamespace(compactions=[
        SimpleNamespace(id=i + 1, after_step=step, tokens_before=12_035 + 37 * i, tokens_after=10_324 - 41 * i,
                        fallback=i % 4 == 3)
        for i, step in enumerate(after_steps)])


@pytest.mark.parametrize("after_steps", [[6, 7, 8, 10, 11, 12, 13, 14, 18, 19, 20], list(range(1, 31)), [3, 40]])
def test_no_two_compaction_labels_overlap(after_steps: list[int]) -> None:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 5))
    ax.set_xlim(0, max(after_steps) + 2)
    ax.set_ylim(0, 17_280)
    texts = mark_compactions(ax, _compactions(after_steps), 17_280)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert len(texts) >= 1
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
    shown = " ".join(t.get_text() for t in texts)
    for n in range(1, len(after_steps) + 1):  # every compaction is named, with its sizes, somewhere
        assert f"#{n}" in shown
    plt.close(fig)

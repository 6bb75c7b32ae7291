"""Engine timeline, like the neuron-profile GUI: one row per engine and per DMA queue."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # matplotlib is imported lazily: the model itself does not need it
    from matplotlib.figure import Figure

    from accelopt_nb.perf.profile import Profile

ROW_COLORS = {"tensor": "tab:green", "vector": "tab:blue", "scalar": "tab:orange", "gpsimd": "tab:purple",
              "dma": "tab:gray", "spill": "tab:red"}


def plot_timeline(profile: "Profile", *, t0_us: float | None = None, t1_us: float | None = None,
                  show_empty_queues: bool = False, figsize: tuple[float, float] | None = None,
                  title: str | None = None, ax: Any = None) -> "Figure":
    """Draw the schedule of ``profile`` (from :func:`accelopt_nb.perf.estimate`) and return the Figure.

    ``t0_us``/``t1_us`` zoom into a window in microseconds. Idle DMA queues are hidden unless
    ``show_empty_queues``.
    """
    import matplotlib.pyplot as plt

    sched = profile.schedule
    if sched is None:
        raise ValueError("this profile carries no schedule (it was rebuilt from a dict); re-run estimate()")
    names = sched.row_names()
    starts = sched.start * 1e6
    widths = (sched.busy_end - sched.start) * 1e6
    rows: list[tuple[str, np.ndarray, np.ndarray, str]] = []
    for k, name in enumerate(names[:-1]):
        m = sched.row == k
        if k >= 4 and not m.any() and not show_empty_queues:
            continue
        color = ROW_COLORS.get(name, ROW_COLORS["dma"])
        rows.append((name, starts[m], widths[m], color))
    if sched.spill_events or show_empty_queues:
        s = np.array([e.start for e in sched.spill_events]) * 1e6
        w = np.array([e.end - e.start for e in sched.spill_events]) * 1e6
        rows.append((names[-1], s, w, ROW_COLORS["spill"]))
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize or (12, 0.45 * len(rows) + 1.5))
    else:
        fig = ax.figure
    for y, (name, s, w, color) in enumerate(rows):
        if len(s):
            ax.broken_barh(list(zip(s.tolist(), np.maximum(w, 1e-6).tolist())), (y - 0.4, 0.8),
                           facecolors=color, edgecolors="none")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (µs)")
    end_us = profile.total_time * 1e6
    ax.set_xlim(t0_us if t0_us is not None else 0.0, t1_us if t1_us is not None else max(end_us, 1e-3))
    ax.set_title(title or f"{profile.kernel_name} on {profile.hw}: {profile.latency:.4g} ms ({profile.bound}-bound)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


__all__ = ["plot_timeline"]

"""Mamba vs human experts: the NKIBench baseline, the NKI tutorial's human-expert steps v1 -> v2 -> v3
(this project's own kernels, :mod:`accelopt_nb.kernels`) and the best agent kernel of a run store,
as % of peak at the paper's shape, next to the paper's measured numbers.

Each kernel is first checked against the NKIBench reference at a smaller shape (functional
simulation), then profiled at the profile shape (trace-only). The tutorial kernels take a leading
batch dimension; they get the task's arrays with batch = 1.
"""
from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from accelopt_nb.reproduce.figures import FigureSink, new_figure
from accelopt_nb.reproduce.published import paper_facts

CHECK_SHAPE = {"M": 1024, "C": 256, "S": 16}     # two 512-long sequence tiles, two channel tiles
TUTORIAL_STEPS = (("mamba_v1", "human v1 (tutorial)"), ("mamba_v2", "human v2 (tutorial)"),
                  ("mamba_v3", "human v3 (tutorial)"))
COLUMNS = ["kernel", "kind", "l2_error", "correct", "latency_ms", "pct_peak", "speedup", "bound", "spill_mb"]


def batched_inputs(inputs: list) -> list:
    """The NKIBench mamba inputs with the leading batch dimension (of 1) the tutorial kernels take."""
    delta, u, a, b, c = inputs
    return [delta[None], u[None], a, b[None], c[None]]


def _kernels(agent_source: str | None) -> list[tuple[str, str, Any, bool]]:
    import nkibench
    from accelopt_nb.kernels import kernel_path
    from accelopt_nb.sim import load_kernel

    prob = nkibench.get_problem("mamba")
    out = [("NKIBench baseline", "baseline", load_kernel(source=prob.baseline_source()), False)]
    for name, label in TUTORIAL_STEPS:
        out.append((label, "human", load_kernel(kernel_path("mamba_tutorial"), name=name), True))
    if agent_source is not None:
        out.append(("AccelOpt (best of run store)", "agent", load_kernel(source=agent_source), False))
    return out


def mamba_progression(hw: str = "trn1", agent_source: str | None = None, *,
                      profile_shape: str | Mapping[str, int] = "paper",
                      check_shape: Mapping[str, int] = CHECK_SHAPE) -> pd.DataFrame:
    """One row per kernel: correctness at ``check_shape``, latency and % of peak at ``profile_shape``."""
    import nkibench
    from accelopt_nb.perf import estimate
    from accelopt_nb.sim import SimOptions, simulate
    from accelopt_nb.taskfile import l2_relative_error

    prob = nkibench.get_problem("mamba")
    check, big = prob.task(dict(check_shape)), prob.task(profile_shape)
    peak_ms = prob.peak(profile_shape, hw).ms
    inputs, big_inputs = check.get_inputs(seed=0), big.get_inputs(seed=0)
    ref = check.forward(*inputs)
    rows = []
    for label, kind, kern, needs_batch in _kernels(agent_source):
        args = batched_inputs(inputs) if needs_batch else check.to_nki(inputs)
        err = l2_relative_error(simulate(kern, *args).outputs[0].reshape(ref.shape), ref)
        trace = simulate(kern, *(batched_inputs(big_inputs) if needs_batch else big.to_nki(big_inputs)),
                         options=SimOptions(trace_only=True)).trace
        prof = estimate(trace, hw=hw)
        rows.append({"kernel": label, "kind": kind, "l2_error": err, "correct": bool(err < prob.tolerance),
                     "latency_ms": prof.latency, "pct_peak": 100 * peak_ms / prof.latency, "bound": prof.bound,
                     "spill_mb": (prof.spill_save_bytes + prof.spill_reload_bytes) / 1e6})
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["speedup"] = df["latency_ms"].iloc[0] / df["latency_ms"]
    return df


def plot_humans(df: pd.DataFrame, sink: FigureSink, *, hw: str, shape_label: str) -> Any:
    facts = paper_facts()["mamba_human_experts"]
    colors = {"baseline": "#8c8c8c", "human": "#4c72b0", "agent": "#dd8452"}
    fig, ax = new_figure(8.5, 4.2)
    ax.bar(df["kernel"], df["pct_peak"], color=[colors[k] for k in df["kind"]])
    for i, r in enumerate(df.itertuples()):
        ax.text(i, r.pct_peak + 1, f"{r.pct_peak:.1f}%\n{r.speedup:.2f}x" + ("" if r.correct else "\nWRONG"),
                ha="center", fontsize=8)
    for key, ls, color in (("baseline", ":", "#8c8c8c"), ("human_best", "--", "#4c72b0"), ("accelopt", "-.", "#dd8452")):
        ax.axhline(facts[key], ls=ls, color=color, lw=1, label=f"paper {key.replace('_', ' ')}: {facts[key]}% (trn1, measured)")
    ax.set_ylim(0, max(float(df["pct_peak"].max()), facts["accelopt"]) * 1.3)
    ax.set_ylabel(f"% of peak ({hw}, performance model)")
    ax.legend(fontsize=7, loc="upper left")
    ax.tick_params(axis="x", labelsize=8, rotation=12)
    note = "" if (df["kind"] == "agent").any() else " (no agent mamba kernel in the run store)"
    ax.set_title(sink.title(f"Mamba {shape_label} on {hw}: baseline, human steps v1-v3, agent{note}"), fontsize=9)
    fig.tight_layout()
    return fig

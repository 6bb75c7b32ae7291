"""Mamba vs human experts, as the paper draws it: the NKI tutorial's v1 (the paper's baseline, 28.4% of
peak measured on trn1), the human-expert steps v2 and v3, and the agent's best kernel of a run store,
as % of peak at the paper's shape; the paper's measured trn1 numbers stand beside the model's.

Each kernel is first checked against the NKIBench reference at a smaller shape (functional
simulation), then profiled at the profile shape (trace-only). The tutorial kernels take a leading
batch dimension; they get the task's arrays with batch = 1. Every model number carries the
performance model's error bar for its kernel class (``perf.uncertainty``: the interval that held
80% of held-out measured kernels), and the figure says how far the model is from the measurements
it can be compared with.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from accelopt_nb.reproduce.figures import FigureSink, new_figure, pct_interval
from accelopt_nb.reproduce.published import paper_facts

CHECK_SHAPE = {"M": 1024, "C": 256, "S": 16}     # two 512-long sequence tiles, two channel tiles
# (label, kind, tutorial kernel, key of its measured trn1 % of peak in paper_facts' mamba_human_experts)
TUTORIAL_STEPS = (("v1 = baseline", "baseline", "mamba_v1", "baseline"),
                  ("human v2", "human", "mamba_v2", None),
                  ("human v3 (best)", "human", "mamba_v3", "human_best"))
AGENT_LABEL = "agent best (run store)"
PAPER_AGENT_LABEL = "AccelOpt best (paper)"
COLUMNS = ["kernel", "kind", "l2_error", "correct", "latency_ms", "latency_low_ms", "latency_high_ms", "kernel_class",
           "pct_peak", "pct_peak_low", "pct_peak_high", "speedup", "measured_pct_peak", "measured_speedup", "bound",
           "spill_mb"]


def batched_inputs(inputs: list) -> list:
    """The NKIBench mamba inputs with the leading batch dimension (of 1) the tutorial kernels take."""
    delta, u, a, b, c = inputs
    return [delta[None], u[None], a, b[None], c[None]]


def _kernels(agent_source: str | None) -> list[tuple[str, str, Any, bool, str | None]]:
    from accelopt_nb.kernels import kernel_path
    from accelopt_nb.sim import load_kernel

    out = [(label, kind, load_kernel(kernel_path("mamba_tutorial"), name=name), True, key)
           for label, kind, name, key in TUTORIAL_STEPS]
    if agent_source is not None:
        out.append((AGENT_LABEL, "agent", load_kernel(source=agent_source), False, None))
    return out


def mamba_progression(hw: str = "trn1", agent_source: str | None = None, *,
                      profile_shape: str | Mapping[str, int] = "paper",
                      check_shape: Mapping[str, int] = CHECK_SHAPE) -> pd.DataFrame:
    """One row per kernel: correctness at ``check_shape``, latency and % of peak (with the model's
    interval) at ``profile_shape``; the paper's measured trn1 % of peak where it published one
    (trn1 at the paper's shape only), and a last row with the paper's own agent (measured only)."""
    import nkibench
    from accelopt_nb.perf import estimate
    from accelopt_nb.sim import SimOptions, simulate
    from accelopt_nb.taskfile import l2_relative_error

    facts = paper_facts()["mamba_human_experts"]
    comparable = hw == "trn1" and _is_paper_shape(profile_shape, facts["shape"])
    prob = nkibench.get_problem("mamba")
    check, big = prob.task(dict(check_shape)), prob.task(profile_shape)
    peak_ms = prob.peak(profile_shape, hw).ms
    inputs, big_inputs = check.get_inputs(seed=0), big.get_inputs(seed=0)
    ref = check.forward(*inputs)
    rows = []
    for label, kind, kern, needs_batch, measured_key in _kernels(agent_source):
        args = batched_inputs(inputs) if needs_batch else check.to_nki(inputs)
        err = l2_relative_error(simulate(kern, *args).outputs[0].reshape(ref.shape), ref)
        trace = simulate(kern, *(batched_inputs(big_inputs) if needs_batch else big.to_nki(big_inputs)),
                         options=SimOptions(trace_only=True, hw=hw)).trace
        prof = estimate(trace, hw=hw)
        low_ms, high_ms = prof.latency_interval
        pct = 100 * peak_ms / prof.latency
        pct_low, pct_high = pct_interval(pct, prof.uncertainty.low, prof.uncertainty.high)
        rows.append({"kernel": label, "kind": kind, "l2_error": err, "correct": bool(err < prob.tolerance),
                     "latency_ms": prof.latency, "latency_low_ms": low_ms, "latency_high_ms": high_ms,
                     "kernel_class": prof.uncertainty.kernel_class, "pct_peak": pct, "pct_peak_low": pct_low,
                     "pct_peak_high": pct_high,
                     "measured_pct_peak": float(facts[measured_key]) if comparable and measured_key else np.nan,
                     "bound": prof.bound, "spill_mb": (prof.spill_save_bytes + prof.spill_reload_bytes) / 1e6})
    if comparable:
        rows.append({"kernel": PAPER_AGENT_LABEL, "kind": "paper_agent", "measured_pct_peak": float(facts["accelopt"])})
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["speedup"] = df["pct_peak"] / df["pct_peak"].iloc[0]                     # over v1, the paper's baseline
    df["measured_speedup"] = df["measured_pct_peak"] / df["measured_pct_peak"].iloc[0]
    return df


def _is_paper_shape(shape: str | Mapping[str, int], paper: Mapping[str, int]) -> bool:
    return shape == "paper" or (isinstance(shape, Mapping) and dict(shape) == dict(paper))


def model_vs_measured(df: pd.DataFrame) -> pd.DataFrame:
    """Rows where both the model and a measurement exist: model / measured, and whether the measurement
    lies inside the model's interval."""
    both = df[df["pct_peak"].notna() & df["measured_pct_peak"].notna()]
    out = pd.DataFrame({"kernel": both["kernel"], "kernel_class": both["kernel_class"],
                        "model_pct_peak": both["pct_peak"], "measured_pct_peak": both["measured_pct_peak"],
                        "model_over_measured": both["pct_peak"] / both["measured_pct_peak"],
                        "inside_interval": (both["measured_pct_peak"] >= both["pct_peak_low"] - 1e-9)
                        & (both["measured_pct_peak"] <= both["pct_peak_high"] + 1e-9)})
    return out.reset_index(drop=True)


MODEL_COLOR, AGENT_COLOR, MEASURED_COLOR = "#0173b2", "#029e73", "#de8f05"


def plot_humans(df: pd.DataFrame, sink: FigureSink, *, hw: str, shape_label: str) -> Any:
    """Per kernel: the model's % of peak with its error bar (solid) and the paper's trn1 measurement (hatched)."""
    fig, ax = new_figure(9.5, 4.8)
    x = np.arange(len(df))
    has_model, has_meas = df["pct_peak"].notna().to_numpy(), df["measured_pct_peak"].notna().to_numpy()
    w = 0.38
    # side by side where a kernel has both, centred where it has one
    xm = np.where(has_meas, x - w / 2, x)[has_model]
    xs = np.where(has_model, x + w / 2, x)[has_meas]
    model, meas = df[has_model], df[has_meas]
    err = [model["pct_peak"] - model["pct_peak_low"], model["pct_peak_high"] - model["pct_peak"]]
    agent = (model["kind"] == "agent").to_numpy()
    for sel, color, label in ((~agent, MODEL_COLOR, f"performance model ({hw}); error bar: 80% of held-out kernels"),
                              (agent, AGENT_COLOR, f"agent's best kernel, performance model ({hw})")):
        if sel.any():
            ax.bar(xm[sel], model["pct_peak"][sel], w, color=color, label=label, capsize=4, ecolor="#222",
                   yerr=[err[0][sel], err[1][sel]])
    for xi, r in zip(xm, model.itertuples()):
        ax.text(xi, r.pct_peak_high + 1, f"{r.pct_peak:.1f}%\n{r.speedup:.2f}x" + ("" if r.correct else "\nWRONG"),
                ha="center", va="bottom", fontsize=7)
    if len(meas):
        ax.bar(xs, meas["measured_pct_peak"], w, color="white", edgecolor=MEASURED_COLOR, hatch="///", lw=1.2,
               label="measured on trn1 (the paper)")
        for xi, r in zip(xs, meas.itertuples()):
            ax.text(xi, r.measured_pct_peak + 1, f"{r.measured_pct_peak:.1f}%\n{r.measured_speedup:.2f}x",
                    ha="center", va="bottom", fontsize=7, color="#8a4b00")
    ax.set_xticks(x)
    ax.set_xticklabels(df["kernel"], fontsize=8)
    top = np.nanmax(np.concatenate([df["pct_peak_high"].to_numpy(float), df["measured_pct_peak"].to_numpy(float)]))
    ax.set_ylim(0, top * 1.35)
    ax.set_ylabel(f"% of peak ({hw}); labels: x over v1")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    note = _model_error_note(df)
    if note:
        ax.text(0.99, 0.98, note, transform=ax.transAxes, ha="right", va="top", fontsize=7,
                bbox={"facecolor": "#fff8e6", "edgecolor": MEASURED_COLOR})
    agent = "" if (df["kind"] == "agent").any() else " (no agent mamba kernel in the run store)"
    ax.set_title(sink.title(f"Mamba {shape_label} on {hw}: v1 (baseline), human v2 and v3, agent{agent}"), fontsize=9)
    fig.tight_layout()
    return fig


def _model_error_note(df: pd.DataFrame) -> str:
    both = model_vs_measured(df)
    if both.empty:
        return ""
    parts = [f"{_short(r.kernel)} {100 * (r.model_over_measured - 1):+.0f}%" for r in both.itertuples()]
    outside = [_short(r.kernel) for r in both.itertuples() if not r.inside_interval]
    ratio = both["model_over_measured"]
    line = f"model vs measured % of peak: {', '.join(parts)}"
    if outside:
        line += f"\n{', '.join(outside)} outside the model's error bar"
    if ratio.min() > 1 or ratio.max() < 1:
        speed = df[df["measured_speedup"].notna() & df["speedup"].notna()]
        rel = ", ".join(f"{_short(r.kernel)} {r.speedup:.2f}x (model) vs {r.measured_speedup:.2f}x (measured)"
                        for r in speed.iloc[1:].itertuples())
        line += f"\nthe model is {'optimistic' if ratio.min() > 1 else 'pessimistic'} for each by a similar factor,"
        line += f"\nso speedups over v1 agree better: {rel}" if rel else ""
    return line


def _short(kernel: str) -> str:
    """v1, v2, v3, agent: the name a note can use."""
    for label, kind, name, _ in TUTORIAL_STEPS:
        if kernel == label:
            return name.removeprefix("mamba_")
    return "agent" if kernel == AGENT_LABEL else kernel

"""Rich notebook views: every object the magics return shows HTML in Jupyter and text elsewhere.

Numbers are rounded for people (the underlying objects keep full precision in ``.value``),
``*_percent`` profile fields (fractions in [0, 1], as neuron-profile writes them) are shown
as percentages, and Markdown written by an agent is rendered, not shown raw.
"""
from __future__ import annotations

import difflib
import html
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

FAIL_COLOR = "#b00020"
OK_COLOR = "#1b5e20"
_TABLE_STYLE = ("border-collapse:collapse;font-size:12px", "padding:2px 8px;border-bottom:1px solid #ddd;"
                "text-align:left;vertical-align:top")


def esc(text: Any) -> str:
    return html.escape("" if text is None else str(text))


def fmt_num(v: Any, digits: int = 4) -> str:
    """A number rounded for reading: 4 significant digits, no exponent for everyday sizes."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:.{digits}g}"


def fmt_pct(v: float | None) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}%"


def markdown_html(text: str) -> str:
    """Markdown to HTML with the ``markdown`` package when installed; escaped pre-wrapped text otherwise."""
    try:
        import markdown
    except ImportError:
        return f"<div style='white-space:pre-wrap'>{esc(text)}</div>"
    return markdown.markdown(text, extensions=["fenced_code"])


def html_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, headers: Mapping[str, str] | None = None,
               raw: Iterable[str] = ()) -> str:
    """An HTML table; ``raw`` columns hold ready HTML, the others are escaped and rounded."""
    table_style, cell = _TABLE_STYLE
    raw = set(raw)
    heads = "".join(f"<th style='{cell}'>{esc((headers or {}).get(c, c))}</th>" for c in columns)
    body = []
    for r in rows:
        tds = []
        for c in columns:
            v = r.get(c)
            tds.append(f"<td style='{cell}'>{v if c in raw else esc(fmt_num(v))}</td>")
        body.append(f"<tr>{''.join(tds)}</tr>")
    return f"<table style='{table_style}'><tr>{heads}</tr>{''.join(body)}</table>"


def text_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    cells = [[str(c) for c in columns]] + [[fmt_num(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells)


@dataclass
class Shown:
    """A result for the notebook: plain text for terminals, HTML for Jupyter, the value for code."""

    text: str
    html: str | None = None
    value: Any = None

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": self.text}
        if self.html:
            bundle["text/html"] = self.html
        return bundle

    def _repr_html_(self) -> str:
        return self.html or f"<pre>{esc(self.text)}</pre>"

    def __repr__(self) -> str:
        return self.text


def table_view(title: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str], value: Any = None, *,
               html_rows: Sequence[Mapping[str, Any]] | None = None, raw: Iterable[str] = ()) -> Shown:
    text = f"{title}\n{text_table(rows, columns)}" if rows else f"{title}: none"
    body = html_table(html_rows if html_rows is not None else rows, columns, raw=raw) if rows else "<i>none</i>"
    return Shown(text, f"<b>{esc(title)}</b>{body}", value)


# ---- evaluation results and profiles -------------------------------------------------------------
_PROFILE_ROWS = (
    ("latency_ms", "latency", "ms"), ("latency", "latency", "ms"), ("bound", "bound", None),
    ("hbm_read_bytes", "HBM read", "bytes"), ("hbm_write_bytes", "HBM write", "bytes"),
    ("sbuf_read_bytes", "SBUF read", "bytes"), ("sbuf_write_bytes", "SBUF write", "bytes"),
    ("hardware_flops", "hardware FLOPs", None), ("mm_arithmetic_intensity", "arithmetic intensity", None),
    ("hfu_estimated_percent", "HFU (FLOP utilization)", "pct"), ("mbu_estimated_percent", "MBU (HBM bandwidth)", "pct"),
    ("tensor_engine_active_time_percent", "TensorE active", "pct"),
    ("vector_engine_active_time_percent", "VectorE active", "pct"),
    ("scalar_engine_active_time_percent", "ScalarE active", "pct"),
    ("gpsimd_engine_active_time_percent", "GpSimdE active", "pct"), ("dma_active_time_percent", "DMA active", "pct"),
    ("instruction_count", "instructions", None), ("dma_transfer_count", "DMA transfers", None),
)


def _bytes(v: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(v) < 1024 or unit == "GiB":
            return f"{v:.4g} {unit}" if unit != "B" else f"{int(v):,} B"
        v /= 1024
    return str(v)


def profile_rows(profile: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs of a profile dict: fractions as percentages, bytes with units."""
    out = []
    for key, label, unit in _PROFILE_ROWS:
        v = profile.get(key)
        if v is None or (key == "latency" and "latency_ms" in profile):  # the evaluation's key, or Profile's
            continue
        if unit == "pct":
            text = f"{100.0 * float(v):.1f}%"
        elif unit == "bytes":
            text = _bytes(float(v))
        elif unit == "ms":
            text = f"{float(v):.4g} ms"
        elif key == "mm_arithmetic_intensity" and profile.get("peak_flops_bandwidth_ratio") is not None:
            text = f"{float(v):.3g} (ridge {float(profile['peak_flops_bandwidth_ratio']):.3g})"
        else:
            text = fmt_num(v)
        out.append((label, text))
    return out


@dataclass
class ResultView:
    """An evaluation result with its profile, % of peak and bound, for ``%%accelopt profile``."""

    result: Any
    pct_peak: float | None = None
    peak_ms: float | None = None
    peak_bound: str | None = None
    cell_offset: int | None = None   # the kernel came from a cell magic: its line 1 is cell line 1 + offset

    def where(self) -> str:
        """Where the error is, counted as the person sees it: from the cell for a kernel written in one."""
        err = self.result.error or {}
        line = err.get("line")
        if line is None:
            return err.get("file") or "kernel"
        if self.cell_offset is not None and err.get("file") in (None, "<cell>"):
            return f"cell line {line + self.cell_offset}"
        return f"{err.get('file') or 'kernel'} line {line}"

    def _head(self) -> list[tuple[str, str]]:
        r = self.result
        rows = [("status", r.status.value), ("problem", f"{r.problem} ({r.preset}, {r.backend}/{r.hw})")]
        if r.latency_ms is not None:
            rows.append(("latency", f"{r.latency_ms:.4g} ms"))
        if self.pct_peak is not None:
            rows.append(("% of peak", f"{self.pct_peak:.1f}% (peak {self.peak_ms:.4g} ms, "
                                      f"{self.peak_bound or 'unknown'}-bound)"))
        return rows

    def __repr__(self) -> str:
        lines = [f"{k}: {v}" for k, v in self._head()] + [f"  {self.result.message}"]
        err = self.result.error
        if err:
            lines.append(f"  error at {self.where()}: {err.get('message')}")
            if err.get("rule"):
                lines.append(f"  rule: {err['rule']}")
        for c in self.result.checks:
            lines.append(f"  {'pass' if c.passed else 'FAIL'} {c.kind} {c.index}" + (f" - {c.reason}"
                                                                                     if c.reason and not c.passed else ""))
        if self.result.profile:
            lines.append("profile:")
            lines += [f"  {k:<24} {v}" for k, v in profile_rows(self.result.profile)]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        r = self.result
        color = OK_COLOR if r.correct else FAIL_COLOR
        head = "".join(f"<tr><th style='text-align:left;padding-right:12px'>{esc(k)}</th>"
                       f"<td style='text-align:left'>{esc(v)}</td></tr>"
                       for k, v in self._head())
        parts = [f"<div class='accelopt-result'><table>{head}</table>",
                 f"<div style='color:{color};margin:4px 0'>{esc(r.message)}</div>"]
        if r.error:
            e = r.error
            parts.append(f"<div style='color:{FAIL_COLOR}'><b>{esc(e.get('type'))}</b> at {esc(self.where())}: "
                         f"{esc(e.get('message'))}"
                         + (f"<br><i>rule: {esc(e['rule'])}</i>" if e.get("rule") else "") + "</div>")
        if r.checks:
            rows = [{"check": f"{c.kind} {c.index}", "result": "pass" if c.passed else
                     f"<span style='color:{FAIL_COLOR}'>FAIL</span>",
                     "rel. L2 error": ", ".join(fmt_num(x, 3) for x in c.rel_errors), "reason": esc(c.reason or "")}
                    for c in r.checks]
            parts.append(html_table(rows, ["check", "result", "rel. L2 error", "reason"], raw=("result", "reason")))
        if r.profile:
            rows = [{"metric": k, "value": v} for k, v in profile_rows(r.profile)]
            parts.append("<b>profile</b>" + html_table(rows, ["metric", "value"]))
            notes = r.profile.get("bottleneck") or []
            if notes:
                parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
        return "".join(parts) + "</div>"


# ---- kernels: diff, leaderboard, plans ---------------------------------------------------------------
@dataclass
class KernelDiff:
    """Two kernels side by side, changed lines highlighted (``%accelopt diff A B``)."""

    left_id: str
    left: str
    right_id: str
    right: str

    def __repr__(self) -> str:
        return "".join(difflib.unified_diff(self.left.splitlines(True), self.right.splitlines(True),
                                            fromfile=self.left_id, tofile=self.right_id)) or "(identical)"

    def _repr_html_(self) -> str:
        table = difflib.HtmlDiff(tabsize=4, wrapcolumn=72).make_table(
            self.left.splitlines(), self.right.splitlines(), self.left_id, self.right_id, context=True, numlines=3)
        # JupyterLab's table style (tall rows, right-aligned cells) would stretch the diff; keep it compact.
        style = ("<style>.accelopt-diff table.diff{font-family:monospace;font-size:11px;border:none;"
                 "border-collapse:collapse}.accelopt-diff td,.accelopt-diff th{padding:0 4px !important;"
                 "line-height:1.3 !important;text-align:left !important;white-space:pre;border:none}"
                 ".accelopt-diff .diff_next{display:none}.accelopt-diff .diff_header{color:#888}"
                 ".accelopt-diff .diff_add{background:#dfd}.accelopt-diff .diff_chg{background:#ffa}"
                 ".accelopt-diff .diff_sub{background:#fdd}</style>")
        return f"{style}<div class='accelopt-diff' style='overflow:auto;max-height:480px'>{table}</div>"


def source_html(source: str) -> str:
    """Python source, syntax-highlighted when pygments is installed (it comes with IPython)."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:
        return f"<pre>{esc(source)}</pre>"
    return highlight(source, PythonLexer(), HtmlFormatter(noclasses=True, style="default"))


def kernel_view(session: Any, kernel: Any) -> Shown:
    """One kernel of a run (``%accelopt show KERNEL``, ``%accelopt best``): what it is, how it did, its source."""
    base = session.baseline.latency_ms
    speed = (f"{base / kernel.latency_ms:.3f}x over the baseline"
             if kernel.correct and kernel.latency_ms else None)
    facts = [("kernel", f"{kernel.kernel_id} (iteration {kernel.iteration}, {kernel.origin})"),
             ("status", kernel.status or "not evaluated yet"),
             ("latency", f"{kernel.latency_ms:.4g} ms" if kernel.latency_ms is not None else "–"),
             ("% of peak", fmt_pct(kernel.pct_peak)), ("speedup", speed or "–")]
    if kernel.message and not kernel.correct:
        facts.append(("message", kernel.message))
    plan = session.plans.get(kernel.plan_id) if kernel.plan_id else None
    if plan is not None:
        facts.append(("plan", f"{plan.plan_id}: {plan.step}"))
    if kernel.parent_id:
        facts.append(("parent", kernel.parent_id))
    text = "\n".join(f"{k}: {v}" for k, v in facts) + "\n\n" + kernel.source
    rows = "".join(f"<tr><th style='text-align:left;padding-right:12px'>{esc(k)}</th>"
                   f"<td style='text-align:left'>{esc(v)}</td></tr>" for k, v in facts)
    return Shown(text, f"<table>{rows}</table>{source_html(kernel.source)}", kernel)


def leaderboard_rows(session: Any) -> list[dict[str, Any]]:
    """Every evaluated kernel, fastest correct first: speedup over the baseline and % of peak."""
    base = session.baseline.latency_ms
    beam = set(session.beam)
    rows = []
    for k in list(session.kernels.values()):   # a copy: the panel's thread may be adding kernels
        if not k.evaluated:
            continue
        rows.append({"kernel_id": k.kernel_id, "iteration": k.iteration, "plan_id": k.plan_id, "origin": k.origin,
                     "status": k.status, "latency_ms": k.latency_ms,
                     "speedup": base / k.latency_ms if k.correct and k.latency_ms else None,
                     "pct_peak": k.pct_peak, "in_beam": "●" if k.kernel_id in beam else ""})
    rows.sort(key=lambda r: (r["speedup"] is None, -(r["speedup"] or 0.0), r["kernel_id"]))
    return rows


def leaderboard(session: Any, top: int | None = None) -> Shown:
    import pandas as pd

    rows = leaderboard_rows(session)[:top]
    cols = ["kernel_id", "iteration", "origin", "status", "latency_ms", "speedup", "pct_peak", "in_beam"]
    shown_rows = [{**r, "speedup": None if r["speedup"] is None else f"{r['speedup']:.3f}x",
                   "pct_peak": fmt_pct(r["pct_peak"]) if r["pct_peak"] is not None else None} for r in rows]
    html_rows = [{**r, "status": r["status"] if r["status"] == "correct"
                  else f"<span style='color:{FAIL_COLOR}'>{esc(r['status'])}</span>"} for r in shown_rows]
    view = table_view(f"leaderboard of {session.problem.name} ({len(rows)} evaluated kernels)", shown_rows, cols,
                      pd.DataFrame(rows), html_rows=html_rows, raw=("status",))
    return view


def plans_view(session: Any, iteration: int | None = None) -> Shown:
    """The planner's text and reasoning for each plan of an iteration (Markdown rendered)."""
    plans = session.iteration_plans(iteration)
    it = session.iteration if iteration is None else iteration
    text = [f"plans of iteration {it}: {len(plans)}"]
    parts = [f"<b>plans of iteration {it}</b> ({len(plans)})"]
    for p in plans:
        reasoning = (p.data or {}).get("reasoning") or ""
        text.append(f"[{p.plan_id}] from {p.parent_id} ({p.origin}): {p.step}")
        parts.append(f"<details open style='margin:4px 0'><summary><code>{esc(p.plan_id)}</code> from "
                     f"<code>{esc(p.parent_id)}</code> ({esc(p.origin)}): <b>{esc(p.step[:120])}</b></summary>"
                     f"<div style='margin-left:16px'>{markdown_html(p.text)}"
                     + (f"<details><summary>reasoning</summary><div style='color:#555'>{markdown_html(reasoning)}"
                        f"</div></details>" if reasoning else "") + "</div></details>")
    return Shown("\n".join(text), "".join(parts), plans)


def views_table(what: str, views: Sequence[Any]) -> Shown:
    """Kernels or plans a step returned, as a rounded table (the value is a DataFrame)."""
    import pandas as pd

    if what == "plan":
        cols = ["plan_id", "iteration", "parent_id", "origin", "step"]
        rows = [{c: getattr(v, c) for c in cols} for v in views]
        rows = [{**r, "step": r["step"] if len(r["step"]) <= 100 else r["step"][:99] + "…"} for r in rows]
    elif what == "summarize":
        cols = ["item_id", "title", "speedup", "kind"]
        rows = [{c: getattr(v, c, None) for c in cols} for v in views]
    else:
        cols = ["kernel_id", "iteration", "plan_id", "origin", "status", "latency_ms", "pct_peak", "message"]
        rows = [{c: getattr(v, c) for c in cols} for v in views]
    df = pd.DataFrame(rows, columns=cols)
    shown = [{**r, "pct_peak": fmt_pct(r["pct_peak"]) if r.get("pct_peak") is not None else None} for r in rows]
    return table_view(f"{what}: {len(rows)}", shown, cols, df)


def memory_view(memory: Any) -> Shown:
    items = list(memory)
    cols = ["item_id", "title", "speedup", "kind", "problem"]
    rows = [{c: getattr(i, c, None) for c in cols} for i in items]
    title = f"optimization memory ({len(items)}/{memory.capacity})"
    text = f"{title}\n" + "\n".join(f"- {i.title} ({fmt_num(i.speedup)}x): {i.summary}" for i in items) if items \
        else f"{title}: empty"
    parts = [f"<b>{esc(title)}</b>"]
    for i in items:
        parts.append(f"<details><summary>{esc(i.title)} <small>({esc(fmt_num(i.speedup))}x, {esc(i.kind)})</small>"
                     f"</summary>{markdown_html(i.summary)}</details>")
    return Shown(text, "".join(parts), memory.to_dataframe() if items else rows)


def run_facts(store: Any, run_id: str) -> dict[str, Any]:
    """What a report adds from the run store: failures by cause, the models its calls went to, its notes."""
    from accelopt_nb.notebook.causes import run_failures

    models: dict[str, int] = {}
    for c in store.rows("llm_calls", run_id):
        models[c["model"]] = models.get(c["model"], 0) + 1
    return {"failures": run_failures(store, run_id), "models": models,
            "notes": (store.get_run(run_id).get("notes") or "").splitlines()}


def report_view(report: Any, files: Mapping[str, Any] | None = None, facts: Mapping[str, Any] | None = None) -> Shown:
    """A run's report; ``facts`` (:func:`run_facts`) adds failures by cause, the models used and the run's notes."""
    text = report.to_text() + "".join(f"\n  {k}: {v}" for k, v in (files or {}).items())
    usage = [{"role": u.role, "calls": u.calls, "failed": u.failed_calls, "prompt tokens": u.prompt_tokens,
              "output tokens": u.completion_tokens, "USD": u.cost_usd} for u in report.usage]
    failed = sum(u.failed_calls for u in report.usage)
    head = (f"<b>AccelOpt run <code>{esc(report.run_id)}</code> on {esc(report.problem)}</b> "
            f"({esc(report.strategy)}, {report.iterations_done} iterations)<br>"
            f"baseline {report.baseline_latency_ms:.4g} ms ({fmt_pct(report.baseline_pct_peak)} of peak) → best "
            f"<code>{esc(report.best_kernel_id)}</code> {report.best_latency_ms:.4g} ms "
            f"({fmt_pct(report.best_pct_peak)} of peak) = <b>{report.speedup:.3f}x</b>"
            + (f"; peak bound: {esc(report.peak_bound)}" if report.peak_bound else "")
            + f"<br>kernels: {report.kernels} generated, {report.correct_kernels} correct; "
              f"memory: {report.memory_items} items")
    warn = (f"<div style='color:{FAIL_COLOR}'><b>{failed} LLM call(s) failed</b> in this run</div>" if failed else "")
    if facts:
        f = facts["failures"]
        lines = []
        if f.llm or f.missing:
            lines.append(f"LLM calls lost or failed: {f.llm_text()}" + (" — the run is not complete: resume it to "
                                                                       "redraw them" if f.incomplete else ""))
        if f.kernels:
            lines.append(f"kernels that failed: {f.kernel_text()}")
        models = ", ".join(f"{m} ({n} calls)" for m, n in facts["models"].items())
        if models:
            lines.append(f"models: {models}")
        lines += [f"note: {n}" for n in facts["notes"]]
        text += "".join(f"\n  {line}" for line in lines)
        color = FAIL_COLOR if f.incomplete else "#555"
        warn = "".join(f"<div style='color:{color if i == 0 and (f.llm or f.missing) else '#555'}'>{esc(line)}</div>"
                       for i, line in enumerate(lines))
    links = "".join(f"<br>{esc(k)}: <code>{esc(v)}</code>" for k, v in (files or {}).items())
    return Shown(text, head + warn + html_table(usage, list(usage[0]) if usage else []) + links, report)


def session_view(session: Any, outcome: Any = None) -> Shown:
    base, best = session.baseline, session.best
    speed = base.latency_ms / best.latency_ms if best.latency_ms else float("nan")
    text = (f"{session!r}\n  baseline {base.latency_ms:.4g} ms ({fmt_pct(base.pct_peak)} of peak); best "
            f"{best.kernel_id} {best.latency_ms:.4g} ms ({fmt_pct(best.pct_peak)} of peak, {speed:.3f}x)")
    html_ = (f"<b>{esc(session.problem.name)}</b> run <code>{esc(session.run_id)}</code>: iteration "
             f"{session.iteration}, next <code>{esc(session.next_phase)}()</code>, beam {len(session.beam)}, "
             f"memory {len(session.memory)} items<br>baseline {base.latency_ms:.4g} ms "
             f"({fmt_pct(base.pct_peak)} of peak); best <code>{esc(best.kernel_id)}</code> "
             f"{best.latency_ms:.4g} ms ({fmt_pct(best.pct_peak)} of peak) = <b>{speed:.3f}x</b>")
    if outcome is not None and outcome.problem:
        text = outcome.text() + "\n" + text
        html_ = outcome.html() + html_
    return Shown(text, html_, session)


# ---- figures ---------------------------------------------------------------------------------------
def use_style() -> None:
    """The toolkit's one figure style: seaborn's whitegrid when installed, matplotlib's default otherwise."""
    try:
        import seaborn as sns
    except ImportError:
        return
    sns.set_theme(style="whitegrid", context="notebook", palette="colorblind")


def plot_progress(session: Any, ax=None):
    """Best speedup so far per completed iteration, with every correct kernel's speedup as dots."""
    import matplotlib.pyplot as plt

    use_style()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    base = session.baseline.latency_ms
    hist = session.history()
    xs = [-1] + [h["iteration"] for h in hist]
    ys = [1.0] + [h["best_speedup"] for h in hist]
    pts = [(k.iteration, base / k.latency_ms) for k in list(session.kernels.values()) if k.correct and k.iteration >= 0]
    if pts:
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=18, alpha=0.5, label="correct kernels")
    ax.step(xs, ys, where="post", marker="o", label="best so far")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("iteration (-1 = baseline)")
    ax.set_ylabel("speedup over baseline")
    ax.set_title(f"{session.problem.name}: run {session.run_id}", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    ax.figure.tight_layout()
    return ax.figure


# ---- the library's own objects, shown richly once the extension is loaded --------------------------
def profile_html(profile: Any) -> str:
    """An estimated :class:`~accelopt_nb.perf.Profile` as a table (fractions as percentages)."""
    rows = [{"metric": k, "value": v} for k, v in profile_rows(profile.to_dict())]
    notes = "".join(f"<li>{esc(n)}</li>" for n in (profile.bottleneck or []))
    return (f"<b>profile of {esc(profile.kernel_name)}</b> ({esc(profile.hw)})" + html_table(rows, ["metric", "value"])
            + (f"<ul>{notes}</ul>" if notes else ""))


def register_formatters(ipython: Any) -> None:
    """HTML for evaluation results, profiles, sessions, reports and memory wherever they are displayed.

    Registered by module and class name, so ``%load_ext`` imports none of them (the simulator, the
    performance model and the search load only when a notebook first uses them).
    """
    html = ipython.display_formatter.formatters["text/html"]
    for module, name, render in _FORMATTERS:
        html.for_type_by_name(module, name, render)


def _result_html(r: Any) -> str:
    return ResultView(r)._repr_html_()


_FORMATTERS = (
    ("accelopt_nb.evaluation.result", "EvalResult", _result_html),
    ("accelopt_nb.perf.profile", "Profile", profile_html),
    ("accelopt_nb.search.session", "Session", lambda s: session_view(s).html),
    ("accelopt_nb.search.report", "RunReport", lambda r: report_view(r).html),
    ("accelopt_nb.search.memory", "OptimizationMemory", lambda m: memory_view(m).html),
)

"""Exercise checks of the teaching course. Each check computes the right answer itself, with the
simulator and the performance model, and compares it with the learner's.

``check(id, *answer)`` returns a :class:`Verdict` that displays as RIGHT or WRONG with the reason;
with ``strict=True`` a wrong answer raises :class:`ExerciseError` instead (batch runs of the
reference answers use that, so a broken exercise fails loudly).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from accelopt_nb.errors import AccelOptError, ConfigError
from accelopt_nb.teaching import answers_text as text


class ExerciseError(AccelOptError):
    """A strict check found a wrong answer."""


@dataclass
class Verdict:
    exercise: str
    right: bool
    message: str

    def __str__(self) -> str:
        return f"{'RIGHT' if self.right else 'WRONG'} (exercise {self.exercise}): {self.message}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        color = "#1a7f37" if self.right else "#cf222e"
        return f"<b style='color:{color}'>{'RIGHT' if self.right else 'WRONG'}</b> (exercise {self.exercise}): {self.message}"

    def __bool__(self) -> bool:
        return self.right


_CHECKS: dict[str, Callable[..., tuple[bool, str]]] = {}


def _exercise(eid: str):
    def register(fn: Callable[..., tuple[bool, str]]):
        _CHECKS[eid] = fn
        return fn
    return register


def check(exercise: str, *answer: Any, strict: bool = False, **params: Any) -> Verdict:
    """Check the answer to ``exercise``; prints nothing, returns a Verdict (the cell shows it).

    ``params`` are the notebook's parameters the right answer depends on (``hw=hw``, ``M=M``, ...):
    the check computes the right answer for them, not for a fixed setting.
    """
    if exercise not in _CHECKS:
        raise ConfigError(f"no exercise {exercise!r}; known: {', '.join(sorted(_CHECKS))}")
    if any(a is Ellipsis or a is None for a in answer):
        verdict = Verdict(exercise, False, "no answer yet: replace the ... in the exercise cell")
    else:
        try:
            verdict = Verdict(exercise, *_CHECKS[exercise](*answer, **params))
        except AccelOptError as exc:   # a kernel that breaks a rule is a wrong answer, with the rule
            verdict = Verdict(exercise, False, f"{type(exc).__name__}: {exc}")
    if strict and not verdict.right:
        raise ExerciseError(str(verdict))
    return verdict


# -------------------------------------------------------------------------------- helpers
def _kernel(answer: Any, name: str | None = None):
    """A kernel from a source string, a path, or an already loaded kernel."""
    from pathlib import Path

    from accelopt_nb.sim import load_kernel
    if isinstance(answer, str) and "\n" in answer:
        return load_kernel(source=answer, name=name) if name else load_kernel(source=answer)
    if isinstance(answer, (str, Path)):
        return load_kernel(Path(answer), name=name) if name else load_kernel(Path(answer))
    return answer


def _latency_ms(kernel: Any, args: list, hw: str = "trn1") -> float:
    from accelopt_nb.perf import estimate
    from accelopt_nb.sim import SimOptions, simulate
    return float(estimate(simulate(kernel, *args, options=SimOptions(trace_only=True, hw=hw)).trace, hw=hw).latency)


# -------------------------------------------------------------------------------- 01 NKI basics
@_exercise("1.1")
def _partitions(answer: Any) -> tuple[bool, str]:
    if text.number(answer) == 128:
        return True, "an on-chip tile spans at most 128 partitions (the first dimension)"
    return False, f"{answer!r} partitions: look at nl.tile_size.pmax, or make a 129-row tile and read the error"


@_exercise("1.2")
def _add_kernel(kernel: Any) -> tuple[bool, str]:
    from accelopt_nb.sim import simulate
    rng = np.random.default_rng(7)
    a, b = (rng.normal(size=(384, 512)).astype(np.float32) for _ in range(2))
    out = np.asarray(simulate(_kernel(kernel), a, b).outputs[0])
    if out.shape != a.shape:
        return False, f"the output has shape {out.shape}, expected {a.shape}"
    if not np.allclose(out, a + b, rtol=1e-6, atol=1e-6):
        return False, "wrong values: is every 128-row tile loaded, added and stored?"
    return True, "three 128-row tiles loaded into SBUF, added on an engine, stored back to HBM"


@_exercise("1.3")
def _psum_free(answer: Any, hw: str = "trn1") -> tuple[bool, str]:
    from accelopt_nb.perf.hardware import load_hw
    bank = load_hw(hw).psum_bank_bytes
    got = text.number(answer)
    if got == bank // 4:
        return True, f"one PSUM bank is {bank // 1024} KiB per partition: {bank // 4} fp32 values"
    if got == bank:
        return False, f"{bank} is the bank's size in bytes; how many 4-byte fp32 values fit in it?"
    return False, f"{answer!r}: a PSUM bank holds {bank // 1024} KiB per partition; how many 4-byte fp32 values is that?"


# -------------------------------------------------------------------------------- 02 memory and roofline
@_exercise("2.1")
def _roofline_ms(answer_ms: Any, problem: str = "silu", shape_preset: str = "small", hw: str = "trn1") -> tuple[bool, str]:
    import nkibench
    peak = nkibench.get_problem(problem).peak(shape_preset, hw)
    got = text.number(answer_ms)
    if got is not None and abs(got - peak.ms) <= 0.01 * peak.ms:
        return True, f"{peak.ms * 1e3:.3f} us: the largest of the three roofline terms ({peak.bound})"
    if got is not None and abs(got - peak.seconds) <= 0.01 * peak.seconds:
        return False, f"{got:.3g} is the roofline in seconds; the exercise asks for milliseconds"
    return False, (f"{answer_ms!r} ms; the roofline is the max of vec FLOPs / vec FLOP/s, mm FLOPs / "
                   "mm FLOP/s and HBM bytes / bandwidth (milliseconds, not seconds)")


@_exercise("2.2")
def _bound(answer: Any, problem: str = "silu", shape_preset: str = "small", hw: str = "trn1") -> tuple[bool, str]:
    import nkibench
    peak = nkibench.get_problem(problem).peak(shape_preset, hw)
    right = "memory" if peak.bound == "memory" else "compute"
    given = text.bound(answer)
    if given == right:
        return True, (f"{right}-bound: the {peak.bound} roof is the lowest ceiling "
                      f"({peak.hbm_bytes:.3g} bytes against {peak.vec_flops + peak.mm_flops:.3g} FLOPs)")
    if given is None:
        return False, f"{answer!r}: say which roof is lower, memory (bytes) or compute (FLOPs)"
    return False, f"{answer!r}: compare the three roofline terms of exercise 2.1"


@_exercise("2.3")
def _dma_knee(answer: Any, hw: str = "trn1") -> tuple[bool, str]:
    from accelopt_nb.teaching.measure import dma_knee, dma_sweep
    sweep = dma_sweep(hw)
    right = dma_knee(sweep)
    got = text.number(answer, byte_units=True)
    if got == right:
        best = sweep["GB_per_s"].max()
        at = float(sweep.loc[sweep["bytes_per_partition"] == right, "GB_per_s"].iloc[0])
        return True, f"{right} bytes ({right // 1024} KiB) per partition: {at:.0f} of the best {best:.0f} GB/s"
    if got is not None and got * 4 == right:
        return False, f"{got:g} looks like float32 columns; the question asks for bytes per partition (4 bytes each)"
    return False, f"{answer!r}: read the sweep table: the first row at or above 90% of the best GB/s"


# -------------------------------------------------------------------------------- 03 matmul
# The NKI matmul tutorial's own shape (its published latencies); the notebook runs a smaller one by default.
MATMUL_SHAPE = {"K": 8192, "M": 4096, "N": 8192}


def matmul_inputs(shape: dict[str, int] = MATMUL_SHAPE, seed: int = 0) -> list[np.ndarray]:
    import ml_dtypes
    rng = np.random.default_rng(seed)
    lhsT = rng.normal(size=(shape["K"], shape["M"])).astype(ml_dtypes.bfloat16)
    rhs = rng.normal(size=(shape["K"], shape["N"])).astype(ml_dtypes.bfloat16)
    return [lhsT, rhs]


@_exercise("3.1")
def _my_matmul(kernel: Any, K: int = MATMUL_SHAPE["K"], M: int = MATMUL_SHAPE["M"], N: int = MATMUL_SHAPE["N"],
               hw: str = "trn1", min_speedup: float = 1.5) -> tuple[bool, str]:
    from accelopt_nb.kernels import kernel_path
    from accelopt_nb.sim import load_kernel, simulate
    small = {"K": 256, "M": 256, "N": 1024}
    lhsT, rhs = matmul_inputs(small, seed=1)
    out = np.asarray(simulate(_kernel(kernel), lhsT, rhs).outputs[0], dtype=np.float32)
    ref = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
    if err > 2e-2:
        return False, f"wrong result (L2 relative error {err:.2e} at K, M, N = 256, 256, 1024)"
    args = matmul_inputs({"K": K, "M": M, "N": N})
    tiled = _latency_ms(load_kernel(kernel_path("matmul_tutorial"), name="matmul_tiled"), args, hw)
    speedup = tiled / _latency_ms(_kernel(kernel), args, hw)
    if speedup < min_speedup:
        return False, (f"correct, but only {speedup:.2f}x faster than matmul_tiled at K, M, N = {K}, {M}, {N}; "
                       "make each load feed several output tiles (block the free dimensions)")
    return True, f"correct and {speedup:.2f}x faster than matmul_tiled at K, M, N = {K}, {M}, {N}"


@_exercise("3.2")
def _rhs_loads(answer: Any, M: int = MATMUL_SHAPE["M"]) -> tuple[bool, str]:
    right = M // 128
    got = text.number(answer)
    if got == right:
        return True, f"every rhs tile is loaded once per 128-row block of M: M // 128 = {right} times"
    return False, f"{answer!r}: count the iterations of the loops around the rhs load that do not index rhs (M = {M})"


@_exercise("3.3")
def _full_rate_width(answer: Any, hw: str = "trn1") -> tuple[bool, str]:
    from accelopt_nb.teaching.measure import full_rate_width, moving_sweep
    sweep = moving_sweep(hw)
    right = full_rate_width(sweep)
    got = text.number(answer)
    if got == right:
        return True, (f"{right} columns: below that the 64-cycle stationary load is not hidden and TensorE "
                      "idles between columns")
    return False, f"{answer!r}: find the first row of the sweep whose time per column equals the widest's"


# -------------------------------------------------------------------------------- 04 overlap and fusion
def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """NumPy reference of GELU's tanh approximation (exercise 4.1)."""
    x = np.asarray(x, dtype=np.float32)
    return 0.5 * x * (1 + np.tanh(np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x ** 3)))


@_exercise("4.1")
def _fused_gelu(kernel: Any, rows: int = 4096, cols: int = 2048, hw: str = "trn1",
                min_speedup: float = 1.5) -> tuple[bool, str]:
    """Right values on a small input, then ``min_speedup`` x ``gelu_unfused`` at the notebook's (rows, cols)."""
    from accelopt_nb.perf import estimate
    from accelopt_nb.sim import SimOptions, simulate
    from accelopt_nb.teaching.measure import profile
    kern = _kernel(kernel)
    x = np.random.default_rng(5).normal(size=(256, cols)).astype(np.float32)
    out = np.asarray(simulate(kern, x).outputs[0], dtype=np.float32)
    if out.shape != x.shape or not np.allclose(out, gelu_tanh(x), rtol=1e-3, atol=1e-4):
        return False, "wrong values: the kernel must return 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x's shape"
    big = np.zeros((rows, cols), np.float32)
    base = profile("fusion", "gelu_unfused", big, hw=hw)
    mine = estimate(simulate(kern, big, options=SimOptions(trace_only=True, hw=hw)).trace, hw=hw)
    speedup = base.latency / mine.latency
    if speedup < min_speedup:
        return False, (f"correct, but {speedup:.2f}x gelu_unfused's speed at ({rows}, {cols}); aim for {min_speedup}x: "
                       "which engine is busiest in gelu_unfused, and can one instruction replace its work?")
    return True, (f"correct and {speedup:.2f}x faster than gelu_unfused at ({rows}, {cols}): "
                  f"{base.bound}-bound before, {mine.bound}-bound now")


@_exercise("4.2")
def _busiest_engine(answer: Any, profile: Any) -> tuple[bool, str]:
    fields = {"tensor": "tensor_engine_active_time_percent", "vector": "vector_engine_active_time_percent",
              "scalar": "scalar_engine_active_time_percent", "gpsimd": "gpsimd_engine_active_time_percent"}
    d = profile.to_dict() if hasattr(profile, "to_dict") else dict(profile)
    busiest = max(fields, key=lambda e: d.get(fields[e]) or 0.0)
    if text.engine(answer) == busiest:
        return True, f"the {busiest} engine is active {100 * d[fields[busiest]]:.0f}% of the time"
    return False, f"{answer!r}: compare the *_engine_active_time_percent fields of the profile"


_LOOP_KINDS = {"sequential": ["sequential", "sequential_range", "nl.sequential_range", "sequential range"],
               "affine": ["affine", "affine_range", "nl.affine_range", "affine range"],
               "static": ["static", "static_range", "nl.static_range", "static range"]}


@_exercise("4.3")
def _loop_kind(answer: Any) -> tuple[bool, str]:
    kind = text.one_of(answer, _LOOP_KINDS)
    if kind == "sequential":
        return True, ("sequential_range: each iteration reads the running maximum the previous one wrote, a "
                      "loop-carried dependency that affine_range forbids")
    if kind == "affine":
        return False, "affine_range lets iterations run in any order; here each one needs the previous one's result"
    if kind == "static":
        return False, "static_range unrolls the loop, which is allowed but makes every iteration an instruction of its own"
    return False, f"{answer!r}: name a loop kind (affine_range, sequential_range or static_range)"


# -------------------------------------------------------------------------------- 05 agent step
@_exercise("5.1")
def _agent_step(session: Any, min_speedup: float = 1.05) -> tuple[bool, str]:
    base, best = session.baseline, session.best
    if best.kernel_id == base.kernel_id:
        return False, "the beam's best kernel is still the baseline: did your kernel evaluate as correct?"
    speedup = base.latency_ms / best.latency_ms
    if speedup < min_speedup:
        return False, f"your kernel is the best so far but only {speedup:.2f}x faster; fuse the activation and widen the tiles"
    return True, f"your kernel {best.kernel_id} leads the beam at {speedup:.2f}x over the baseline"


# -------------------------------------------------------------------------------- 06 SBUF capacity
SPILL_SHAPE = (128, 65536)          # 256 KiB of float32 per partition: more than SBUF holds


@_exercise("6.1")
def _no_spills(kernel: Any, hw: str = "trn1", min_speedup: float = 1.2) -> tuple[bool, str]:
    from accelopt_nb.sim import simulate
    from accelopt_nb.teaching.measure import profile
    x = np.random.default_rng(3).normal(size=SPILL_SHAPE).astype(np.float32) * 0.5
    res = simulate(_kernel(kernel), x)
    out = np.asarray(res.outputs[0], dtype=np.float32)
    if out.shape != x.shape or not np.allclose(out, np.exp(x), rtol=1e-5, atol=1e-6):
        return False, "wrong values: the kernel must return exp(x) with x's shape"
    from accelopt_nb.perf import estimate
    mine = estimate(res.trace, hw=hw)
    spilled = mine.spill_save_bytes + mine.spill_reload_bytes
    if spilled:
        return False, (f"correct, but it still spills {spilled / 1e6:.1f} MB (peak demand "
                       f"{mine.sbuf_peak_demand_bytes_per_partition // 1024} KiB per partition): keep fewer tiles live")
    base = profile("spills", "exp_all_at_once", x, hw=hw)
    speedup = base.latency / mine.latency
    if speedup < min_speedup:
        return False, f"no spills, but only {speedup:.2f}x faster than exp_all_at_once; aim for {min_speedup}x"
    return True, (f"no spills (peak {mine.sbuf_peak_demand_bytes_per_partition // 1024} KiB per partition) and "
                  f"{speedup:.2f}x faster than exp_all_at_once")


# -------------------------------------------------------------------------------- 07 trn2
_HARDWARE = {"trn1": ["trn1", "trainium1", "trainium 1", "trn-1", "inf2"],
             "trn2": ["trn2", "trainium2", "trainium 2", "trn-2"]}


@_exercise("7.1")
def _faster_hw(answer: Any, latency_ms: dict[str, float]) -> tuple[bool, str]:
    """``latency_ms``: the fp32 matmul's latency per hardware, as the notebook measured it."""
    right = min(latency_ms, key=latency_ms.get)
    other = max(latency_ms, key=latency_ms.get)
    given = text.one_of(answer, _HARDWARE)
    if given == right:
        return True, (f"{right}: {latency_ms[right] * 1e3:.0f} us against {latency_ms[other] * 1e3:.0f} us on "
                      f"{other}; TensorE's clock sets an fp32 matmul's pace")
    if given is None:
        return False, f"{answer!r}: name one of {', '.join(latency_ms)}"
    return False, f"{answer!r}: compare the two latencies of matmul_lhsT (float32) in the table"


# -------------------------------------------------------------------------------- 08 model limits
_CLASSES = {"matmul": ["matmul", "matmul-bound", "matmul bound", "tensor", "tensore"],
            "fused": ["fused", "fused matmul+vector"],
            "elementwise": ["elementwise", "element-wise", "element wise", "vector", "vectore"],
            "dma": ["dma", "dma-bound", "memory"],
            "overhead": ["overhead", "fixed-cost", "fixed cost", "fixed-cost-bound"]}


def widest_class(hw: str = "trn1") -> tuple[str, float]:
    """The kernel class whose held-out interval on ``hw`` is widest (high / low), with that width."""
    from accelopt_nb.perf.uncertainty import KERNEL_CLASSES, lookup
    own = [lookup(hw, c) for c in KERNEL_CLASSES]
    own = [u for u in own if u.basis == "held-out"]
    if not own:
        raise ConfigError(f"no kernel class of {hw} has held-out measurements of its own")
    u = max(own, key=lambda u: u.high / u.low)
    return u.kernel_class, u.high / u.low


@_exercise("8.1")
def _widest_class(answer: Any, hw: str = "trn1") -> tuple[bool, str]:
    right, width = widest_class(hw)
    given = text.one_of(answer, _CLASSES)
    if given == right:
        return True, f"{right}: its 80% interval spans a factor of {width:.1f} (high / low) on {hw}"
    if given is None:
        return False, f"{answer!r}: name one of the kernel classes ({', '.join(_CLASSES)})"
    return False, f"{answer!r}: compare high / low of the classes whose basis is held-out"

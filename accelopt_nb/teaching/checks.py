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


def check(exercise: str, *answer: Any, strict: bool = False) -> Verdict:
    """Check the answer to ``exercise``; prints nothing, returns a Verdict (the cell shows it)."""
    if exercise not in _CHECKS:
        raise ConfigError(f"no exercise {exercise!r}; known: {', '.join(sorted(_CHECKS))}")
    if any(a is Ellipsis or a is None for a in answer):
        verdict = Verdict(exercise, False, "no answer yet: replace the ... in the exercise cell")
    else:
        try:
            verdict = Verdict(exercise, *_CHECKS[exercise](*answer))
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
    return float(estimate(simulate(kernel, *args, options=SimOptions(trace_only=True)).trace, hw=hw).latency)


def _problem_kernel_check(problem: str, kernel: Any, min_speedup: float) -> tuple[bool, str]:
    """Correct on the small preset's seed 0 and at least ``min_speedup`` faster than the baseline."""
    import nkibench
    from accelopt_nb.sim import load_kernel, simulate
    from accelopt_nb.taskfile import l2_relative_error

    prob = nkibench.get_problem(problem)
    task = prob.task("small")
    inputs = task.get_inputs(seed=0)
    ref = task.forward(*inputs)
    out = task.from_nki(simulate(kernel, *task.to_nki(inputs)).outputs[0], ref)[0]
    err = l2_relative_error(out, ref)
    if not err < prob.tolerance:
        return False, f"the kernel computes the wrong result (L2 relative error {err:.2e} > {prob.tolerance:g})"
    base = _latency_ms(load_kernel(source=prob.baseline_source()), task.to_nki(inputs))
    mine = _latency_ms(kernel, task.to_nki(inputs))
    speedup = base / mine
    if speedup < min_speedup:
        return False, f"correct, but {speedup:.2f}x the baseline's speed; aim for at least {min_speedup}x"
    return True, f"correct (error {err:.1e}) and {speedup:.2f}x faster than the baseline"


# -------------------------------------------------------------------------------- 01 NKI basics
@_exercise("1.1")
def _partitions(answer: int) -> tuple[bool, str]:
    if answer == 128:
        return True, "an on-chip tile spans at most 128 partitions (the first dimension)"
    return False, f"{answer} partitions: look at nl.tile_size.pmax, or make a 129-row tile and read the error"


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
def _psum_free(answer: int) -> tuple[bool, str]:
    if answer == 512:
        return True, "one PSUM bank is 2 KiB per partition: 512 fp32 values"
    return False, f"{answer}: a PSUM bank holds 2 KiB per partition; how many 4-byte fp32 values is that?"


# -------------------------------------------------------------------------------- 02 memory and roofline
@_exercise("2.1")
def _roofline_ms(answer_ms: float, problem: str = "silu", preset: str = "small", hw: str = "trn1") -> tuple[bool, str]:
    import nkibench
    peak = nkibench.get_problem(problem).peak(preset, hw)
    if abs(float(answer_ms) - peak.ms) <= 0.01 * peak.ms:
        return True, f"{peak.ms * 1e3:.3f} us: the largest of the three roofline terms ({peak.bound})"
    return False, (f"{float(answer_ms):.6f} ms; the roofline is the max of vec FLOPs / vec FLOP/s, mm FLOPs / "
                   "mm FLOP/s and HBM bytes / bandwidth (milliseconds, not seconds)")


@_exercise("2.2")
def _bound(answer: str, problem: str = "silu", preset: str = "small", hw: str = "trn1") -> tuple[bool, str]:
    import nkibench
    peak = nkibench.get_problem(problem).peak(preset, hw)
    right = "memory" if peak.bound == "memory" else "compute"
    given = str(answer).strip().lower()
    if given == right or (right == "memory" and given in ("mem", "hbm")):
        return True, (f"{right}-bound: the {peak.bound} roof is the lowest ceiling "
                      f"({peak.hbm_bytes:.3g} bytes against {peak.vec_flops + peak.mm_flops:.3g} FLOPs)")
    return False, f"{answer!r}: compare the three roofline terms of exercise 2.1"


# -------------------------------------------------------------------------------- 03 matmul
# The NKI matmul tutorial's own shape: its published latencies validate the model here, and the operands
# (192 MB) outgrow SBUF, so reloads are real (at small shapes the compiler keeps them on chip).
MATMUL_SHAPE = {"K": 8192, "M": 4096, "N": 8192}


def matmul_inputs(shape: dict[str, int] = MATMUL_SHAPE, seed: int = 0) -> list[np.ndarray]:
    import ml_dtypes
    rng = np.random.default_rng(seed)
    lhsT = rng.normal(size=(shape["K"], shape["M"])).astype(ml_dtypes.bfloat16)
    rhs = rng.normal(size=(shape["K"], shape["N"])).astype(ml_dtypes.bfloat16)
    return [lhsT, rhs]


@_exercise("3.1")
def _my_matmul(kernel: Any) -> tuple[bool, str]:
    from accelopt_nb.kernels import kernel_path
    from accelopt_nb.sim import load_kernel, simulate
    small = {"K": 256, "M": 256, "N": 1024}
    lhsT, rhs = matmul_inputs(small, seed=1)
    out = np.asarray(simulate(_kernel(kernel), lhsT, rhs).outputs[0], dtype=np.float32)
    ref = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
    if err > 2e-2:
        return False, f"wrong result (L2 relative error {err:.2e} at K, M, N = 256, 256, 1024)"
    args = matmul_inputs()
    tiled = _latency_ms(load_kernel(kernel_path("matmul_tutorial"), name="matmul_tiled"), args)
    speedup = tiled / _latency_ms(_kernel(kernel), args)
    if speedup < 1.5:
        return False, (f"correct, but only {speedup:.2f}x faster than matmul_tiled; make each load feed several "
                       "output tiles (block the free dimensions)")
    return True, f"correct and {speedup:.2f}x faster than matmul_tiled"


@_exercise("3.2")
def _rhs_loads(answer: int) -> tuple[bool, str]:
    right = MATMUL_SHAPE["M"] // 128
    if int(answer) == right:
        return True, f"every rhs tile is loaded once per 128-row block of M: {right} times"
    return False, f"{answer}: count the iterations of the loops around the rhs load that do not index rhs"


# -------------------------------------------------------------------------------- 04 fusion
@_exercise("4.1")
def _fused_silu(kernel: Any) -> tuple[bool, str]:
    return _problem_kernel_check("silu", _kernel(kernel), 1.3)


@_exercise("4.2")
def _busiest_engine(answer: str, profile: Any) -> tuple[bool, str]:
    fields = {"tensor": "tensor_engine_active_time_percent", "vector": "vector_engine_active_time_percent",
              "scalar": "scalar_engine_active_time_percent", "gpsimd": "gpsimd_engine_active_time_percent"}
    d = profile.to_dict() if hasattr(profile, "to_dict") else dict(profile)
    busiest = max(fields, key=lambda e: d.get(fields[e]) or 0.0)
    if str(answer).strip().lower().removesuffix("e").removesuffix(" engine") in (busiest, busiest[:-1]):
        return True, f"the {busiest} engine is active {100 * d[fields[busiest]]:.0f}% of the time"
    return False, f"{answer!r}: compare the *_engine_active_time_percent fields of the profile"


# -------------------------------------------------------------------------------- 05 agent step
@_exercise("5.1")
def _agent_step(session: Any) -> tuple[bool, str]:
    base, best = session.baseline, session.best
    if best.kernel_id == base.kernel_id:
        return False, "the beam's best kernel is still the baseline: did your kernel evaluate as correct?"
    speedup = base.latency_ms / best.latency_ms
    if speedup < 1.3:
        return False, f"your kernel is the best so far but only {speedup:.2f}x faster; fuse the activation"
    return True, f"your kernel {best.kernel_id} leads the beam at {speedup:.2f}x over the baseline"

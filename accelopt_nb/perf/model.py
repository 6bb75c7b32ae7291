"""Entry point of the performance model: instruction stream -> :class:`Profile`."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from accelopt_nb.perf.hardware import HWConfig, load_hw
from accelopt_nb.perf.profile import Profile, build_profile
from accelopt_nb.perf.schedule import schedule
from accelopt_nb.pyutil import gc_paused
from accelopt_nb.sim.trace import Trace


def estimate(trace: Trace, hw: "str | Path | HWConfig" = "trn1",
             overrides: "Mapping[str, Any] | str | Path | None" = None) -> Profile:
    """Estimate latency and neuron-profile metrics of one kernel launch.

    ``trace`` is the instruction stream recorded by :func:`accelopt_nb.sim.simulate` (or built by
    hand); ``hw`` a preset name (``"trn1"``, ``"trn2"``), a YAML path or an :class:`HWConfig`;
    ``overrides`` changes hardware numbers for what-if studies. Deterministic.
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"estimate() needs an accelopt_nb.sim.trace.Trace, got {type(trace).__name__} "
                        "(use SimResult.trace)")
    config = load_hw(hw, overrides)
    with gc_paused():
        return build_profile(trace, schedule(trace, config))



__all__ = ["estimate", "gc_paused"]

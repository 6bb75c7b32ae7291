"""Trainium performance model: latency and neuron-profile metrics from the simulated instruction stream.

    from accelopt_nb.perf import estimate
    profile = estimate(sim_result.trace, hw="trn1")
    profile.latency, profile.bound, profile.to_dict(), profile.timeline()

See docs/perf_model.md for the model and its sources. Names load on first use, so importing
``accelopt_nb.perf.hardware`` (the hardware registry) does not load the model or the simulator.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "HWConfig": "hardware", "load_hw": "hardware", "presets": "hardware",
    "estimate": "model",
    "Profile": "profile", "format_profile": "profile",
    "PEAKS": "roofline", "RooflinePeaks": "roofline", "peak_latency_s": "roofline", "percent_of_peak": "roofline",
    "plot_timeline": "timeline",
}

__all__ = ["HWConfig", "PEAKS", "Profile", "RooflinePeaks", "estimate", "format_profile", "load_hw",
           "peak_latency_s", "percent_of_peak", "plot_timeline", "presets"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"accelopt_nb.perf.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'accelopt_nb.perf' has no attribute {name!r}")

"""Trainium performance model: latency and neuron-profile metrics from the simulated instruction stream.

    from accelopt_nb.perf import estimate
    profile = estimate(sim_result.trace, hw="trn1")
    profile.latency, profile.bound, profile.to_dict(), profile.timeline()

See docs/perf_model.md for the model and its sources.
"""
from accelopt_nb.perf.hardware import HWConfig, load_hw, presets
from accelopt_nb.perf.model import estimate
from accelopt_nb.perf.profile import Profile, format_profile
from accelopt_nb.perf.roofline import PEAKS, RooflinePeaks, peak_latency_s, percent_of_peak
from accelopt_nb.perf.timeline import plot_timeline

__all__ = ["HWConfig", "PEAKS", "Profile", "RooflinePeaks", "estimate", "format_profile", "load_hw",
           "peak_latency_s", "percent_of_peak", "plot_timeline", "presets"]

"""The profile contract: one typed record every backend produces and every consumer reads.

A backend returns a raw profile dict: its latency in milliseconds under :data:`LATENCY_KEY`
(``latency_ms``), every other metric under its producer's name (the perf model's summary-json-like
fields, or neuron-profile's summary-json). :func:`profile_record` turns it into a
:class:`ProfileRecord`, whose ``to_dict()`` is what ``EvalResult.profile`` holds: the latency
(``latency_ms``), the producer (``source``), the hardware, the bound, the model's own
error estimate when it gives one (``model_error``, as the perf model names it), the model's error bar
(``uncertainty``: kernel class, multiplicative latency interval, coverage and basis, see
``accelopt_nb.perf.uncertainty.LatencyUncertainty``; None for a measured profile), and every other metric under its producer's
name (``hbm_read_bytes``, ``*_percent`` fractions in [0, 1], ...). ``EvalResult.latency_ms`` is the
same number.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from accelopt_nb.errors import EvaluationError

# The one latency of a profile, in milliseconds: every backend's raw profile carries it under this key.
LATENCY_KEY = "latency_ms"
_TYPED = ("latency_ms", "source", "hw", "bound", "model_error", "uncertainty")


@dataclass
class ProfileRecord:
    """The profile of one kernel launch, as the evaluation service reports it."""

    latency_ms: float | None                # the one latency (ms); None when the producer gave none
    source: str                             # producer: "simulator" (perf model), "neuron" (hardware)
    hw: str                                 # "trn1" | "trn2"
    bound: str | None = None                # what limits the kernel (perf model / roofline), if known
    model_error: float | None = None        # the perf model's expected relative latency error, if it gives one
    # the perf model's error bar (LatencyUncertainty.to_dict(): kernel_class, low, high, coverage, n,
    # sources, basis): the measured latency lies in [latency_ms * low, latency_ms * high] for `coverage`
    # of held-out kernels of that class. None for a measured profile.
    uncertainty: dict[str, Any] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # every other field, producer's names

    @property
    def latency_interval_ms(self) -> tuple[float, float] | None:
        """(low, high) ms the model's held-out error bar gives, or None (measured, or no latency)."""
        if self.uncertainty is None or self.latency_ms is None:
            return None
        return self.latency_ms * float(self.uncertainty["low"]), self.latency_ms * float(self.uncertainty["high"])

    def to_dict(self) -> dict[str, Any]:
        return {**self.metrics, "latency_ms": self.latency_ms, "source": self.source,
                "hw": self.hw, "bound": self.bound, "model_error": self.model_error, "uncertainty": self.uncertainty}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProfileRecord":
        """Read a stored profile (``to_dict()``'s output)."""
        return profile_record(d, source=str(d.get("source") or "unknown"), hw=str(d.get("hw") or ""))


def latency_ms_from_profile(profile: Mapping[str, Any]) -> float | None:
    """The latency in ms of a raw or normalised profile dict (None: none, or not a positive number)."""
    value = profile.get(LATENCY_KEY)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        ms = float(value)
        return ms if math.isfinite(ms) and ms > 0 else None
    return None


def profile_record(raw: Mapping[str, Any], *, source: str, hw: str) -> ProfileRecord:
    """Normalise a backend's raw profile dict to the contract."""
    if not isinstance(raw, Mapping):
        raise TypeError(f"a profile is a mapping, not {type(raw).__name__}")
    stray = sorted(str(k) for k in raw if str(k).startswith("latency") and k != LATENCY_KEY)
    if LATENCY_KEY not in raw and stray:
        raise EvaluationError(f"the {source!r} backend's profile gives {', '.join(stray)} but no {LATENCY_KEY!r}: "
                              f"a profile carries its latency in milliseconds under {LATENCY_KEY!r}")
    metrics = {str(k): v for k, v in raw.items() if k not in _TYPED}
    bound = raw.get("bound")
    err = raw.get("model_error")
    unc = raw.get("uncertainty")
    return ProfileRecord(latency_ms=latency_ms_from_profile(raw), source=source, hw=hw,
                         bound=str(bound) if bound is not None else None,
                         model_error=float(err) if isinstance(err, (int, float)) else None,
                         uncertainty=dict(unc) if isinstance(unc, Mapping) else None,
                         metrics=metrics)

"""What differs between NeuronCore generations, checked against the simulated target (``SimOptions.hw``).

The target's generation comes from the hardware registry (``accelopt_nb/perf/hw/<name>.yaml``, ``nc_version``).
Whole APIs carry their first generation in ``nki_api.yaml`` (``min_nc_version``, extracted from the docs'
"Available only on NeuronCore-vN and newer"; the API boundary checks it, ``guard.py``); a mode of an API that
one generation lacks is checked where the API is simulated, through :func:`require`. An unknown target
(``hw=None``) accepts everything.
"""
from __future__ import annotations

from typing import Any

from accelopt_nb.errors import TargetError
from accelopt_nb.hwfiles import Target

_FRONT_END = {"nisa.": "neuronxcc.nki.isa.", "nl.": "neuronxcc.nki.language."}


def full_api(api: str) -> str:
    """An API name with its front end (``nisa.nc_matmul`` is ``neuronxcc.nki.isa.nc_matmul``)."""
    for short, full in _FRONT_END.items():
        if api.startswith(short):
            return full + api[len(short):]
    return api


def refusal(api: str, what: str, min_version: int, target: Target, source: str) -> TargetError:
    return TargetError(f"{what} is documented for NeuronCore-v{min_version} and newer ({source}); the target is "
                       f"{target}", api=full_api(api),
                       rule=f"{what} needs NeuronCore-v{min_version} or newer (simulate for another target with "
                            "--hw / SimOptions(hw=...))")


def require(rt: Any, api: str, what: str, min_version: int, source: str) -> None:
    """Refuse ``what`` (a mode of ``api``) on a target older than NeuronCore-v``min_version``."""
    target = rt.target
    if target is not None and target.nc_version < min_version:
        err = refusal(api, what, min_version, target, source)
        file, line = rt.location()
        raise err.locate(file, line)

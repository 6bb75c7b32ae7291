"""The NeuronCore limits that NKI's rules check, read from the hardware configs (``accelopt_nb/perf/hw/*.yaml``,
their one home, each number with its source).

A simulation does not depend on the hardware it will be timed on, so every shipped config must agree on these;
a config that does not is an error here rather than a simulator that checks one core's rules for another.
"""
from __future__ import annotations

from accelopt_nb.errors import ConfigError
from accelopt_nb.hwfiles import preset_file, presets, read_yaml

_KEYS = ("sbuf_partitions", "pe_cols", "psum_banks", "psum_bank_bytes")


def _read() -> dict[str, int]:
    seen: dict[str, tuple[str, int]] = {}
    for name in presets():
        data = read_yaml(preset_file(name))
        for key in _KEYS:
            value = int(data[key])
            first = seen.setdefault(key, (name, value))
            if first[1] != value:
                raise ConfigError(f"the simulator checks one set of NeuronCore limits, but hardware configs "
                                  f"{first[0]} and {name} disagree on {key} ({first[1]} vs {value})")
    return {key: value for key, (_, value) in seen.items()}


_LIMITS = _read()
PMAX: int = _LIMITS["sbuf_partitions"]            # partitions of SBUF and PSUM (nl.tile_size.pmax)
PSUM_BANKS: int = _LIMITS["psum_banks"]
PSUM_BANK_BYTES: int = _LIMITS["psum_bank_bytes"]  # per partition
PSUM_FMAX: int = PSUM_BANK_BYTES // 4             # fp32 elements per partition in one bank (nl.tile_size.psum_fmax)
GEMM_STATIONARY_FMAX: int = _LIMITS["pe_cols"]    # a matmul's stationary free size: one PE-array column each
GEMM_MOVING_FMAX: int = PSUM_FMAX                 # its moving free size: the fp32 results fill one PSUM bank
BN_STATS_FMAX = 512                               # nl.tile_size.bn_stats_fmax, an API constant (not hardware)

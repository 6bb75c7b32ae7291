"""Roofline helpers against the paper's constants and the measured NKIBench table."""
import pytest

from accelopt_nb.errors import ConfigError
from accelopt_nb.perf import PEAKS, peak_latency_s, percent_of_peak

def test_trn1_uses_the_paper_constants():
    p = PEAKS["trn1"]
    assert p.hbm_bandwidth == 410 * 2**30
    assert p.vec_flops == 2 * 128 * 1.12e9
    assert p.mm_flops == 23.75e12


def test_trn2_constants_derived_from_docs():
    p = PEAKS["trn2"]
    assert p.mm_flops == pytest.approx(19.66e12, rel=1e-3)
    assert p.hbm_bandwidth == pytest.approx(362.5e9)
    assert p.vec_flops == pytest.approx(245.76e9)


def test_peak_latency_picks_the_longest_roof():
    t, bound = peak_latency_s(0, 0, 410 * 2**30)
    assert (t, bound) == (pytest.approx(1.0), "memory")
    t, bound = peak_latency_s(0, 23.75e12 * 2, 1)
    assert (t, bound) == (pytest.approx(2.0), "mm")
    t, bound = peak_latency_s(2 * 128 * 1.12e9 * 3, 1, 1)
    assert (t, bound) == (pytest.approx(3.0), "vec")
    assert peak_latency_s(0, 0, 362.5e9, hw="trn2")[0] == pytest.approx(1.0)
    assert percent_of_peak(2.0, 0, 0, 410 * 2**30) == pytest.approx(50.0)


# memory-bound rows of the measured trn1 NKIBench table (nkibench_trn1_measured.csv):
# (case, hbm read + write bytes, theoretical peak ms, baseline latency ms, baseline % of peak)
MEASURED = [
    ("adamw_M10944_N2048", 358612992 + 89653248, 1.0182, 1.999829, 50.92),
    ("silu_M4096_N7168", 117440512 + 117440512, 0.5335, 1.333232, 40.02),
    ("rope_single_freq_apply_B1_D128_H64_N4096", 268435456 + 134217728, 0.9146, 4.333010, 21.11),
]


@pytest.mark.parametrize("case,hbm,peak_ms,latency_ms,pct", MEASURED)
def test_memory_bound_rows_of_the_measured_table(case, hbm, peak_ms, latency_ms, pct):
    """For memory-bound problems the peak is the HBM bytes over 410 GiB/s, as in the paper's table."""
    t, bound = peak_latency_s(0, 0, hbm)
    assert bound == "memory"
    assert t * 1e3 == pytest.approx(peak_ms, rel=2e-3)
    assert percent_of_peak(latency_ms / 1e3, 0, 0, hbm) == pytest.approx(pct, abs=0.05)


def test_errors():
    with pytest.raises(ConfigError, match="trn9"):
        peak_latency_s(1, 1, 1, hw="trn9")
    with pytest.raises(ValueError):
        percent_of_peak(0.0, 1, 1, 1)
    with pytest.raises(ValueError):
        peak_latency_s(-1, 0, 0)

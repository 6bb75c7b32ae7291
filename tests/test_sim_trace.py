"""The instruction stream the performance model consumes, and trace-only mode."""
import numpy as np

from accelopt_nb.sim import SimOptions, load_kernel, simulate
from tests.conftest import DATA, HEADER


def _matmul_inputs(rng):
    return (rng.standard_normal((256, 384)).astype(np.float32), rng.standard_normal((384, 700)).astype(np.float32))


def test_trace_records_engines_regions_dtypes_lines_and_loops(rng):
    res = simulate(load_kernel(DATA / "accelopt_style_matmul.py"), *_matmul_inputs(rng))
    trace = res.trace
    loads = [i for i in trace if i.op == "dma_load"]
    assert loads[0].engine == "dma" and loads[0].attrs["bytes"] == 128 * 128 * 4
    assert loads[0].attrs["partitions"] == 128 and loads[0].attrs["bytes_per_partition"] == 512
    mm = [i for i in trace if i.op == "nc_matmul" and not i.attrs["is_transpose"]]
    assert all(i.engine == "tensor" and i.writes[0].buffer == "psum" for i in mm)
    assert mm[0].attrs["n"] == 512 and mm[-1].reads[1].elements == 128 * (700 - 512)  # masked ragged tile
    assert all(i.line is not None and i.file.endswith("accelopt_style_matmul.py") for i in trace)
    assert all(kind == "affine" for i in mm for (_, kind, _) in i.loops)
    # the copy PSUM->SBUF writes the block buffer directly (no extra copy instruction)
    copies = [i for i in trace if i.op == "tensor_copy"]
    xs = [t for t in trace.tensors.values() if t.par_axis == 2]
    assert xs and copies[0].writes[0].tensor == xs[0].id and copies[0].writes[0].block == 0
    out = [t for t in trace.tensors.values() if t.kind == "output"]
    assert len(out) == 1 and out[0].buffer == "hbm"
    assert trace.dtypes_used() == {"float32"}


def test_trace_only_mode_gives_the_same_stream_without_arithmetic(rng):
    kern = load_kernel(DATA / "accelopt_style_matmul.py")
    full = simulate(kern, *_matmul_inputs(rng))
    fast = simulate(kern, *_matmul_inputs(rng), options=SimOptions(trace_only=True))
    assert [(i.engine, i.op, i.partitions, i.free_elems) for i in full.trace] == \
           [(i.engine, i.op, i.partitions, i.free_elems) for i in fast.trace]
    assert fast.trace.trace_only and not np.any(fast.output)


def test_simulate_cli_text_and_json(tmp_path, capsys):
    import json
    from accelopt_nb.cli import main
    assert main(["simulate", str(DATA / "accelopt_style_matmul.py"), "--task", str(DATA / "matmul_task.py")]) == 0
    assert "CORRECT" in capsys.readouterr().out
    assert main(["simulate", str(DATA / "accelopt_style_matmul.py"), "--task", str(DATA / "matmul_task.py"),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "correct" and report["outputs"][0]["l2_rel_error"] < 2e-5


def test_simulate_cli_reports_kernel_error(tmp_path, capsys):
    import json
    from accelopt_nb.cli import main
    bad = tmp_path / "bad.py"
    bad.write_text((DATA / "accelopt_style_matmul.py").read_text().replace("nl.load(v1[", "nl.load(v1[0, "))
    assert main(["simulate", str(bad), "--task", str(DATA / "matmul_task.py"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "error" and report["error"]["line"] == 21 and report["error"]["api"] == "indexing"


def test_cli_help_lists_every_command(capsys):
    import pytest
    from accelopt_nb.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("simulate", "profile", "bench", "evaluate", "llm", "optimize"):
        assert cmd in out


def test_masked_dma_moves_only_the_kept_rows(run_kernel):
    import numpy as np
    body = """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    t = nl.load(a[i_p, i_f], mask=(i_p < a.shape[0]))
    nl.store(out[i_p, i_f], value=t, mask=(i_p < a.shape[0]))
    return out
"""
    res = run_kernel(body, np.ones((100, 8), np.float32))
    load, store = [i for i in res.trace if i.engine == "dma"]
    for ins in (load, store):
        assert ins.attrs["partitions"] == 100 and ins.attrs["bytes"] == 100 * 8 * 4


def test_a_tile_computed_into_its_destination_is_no_allocation_of_the_trace(run_kernel):
    """``buf[...] = nl.exp(t)`` writes buf: the result tile is no tensor of the trace, unless an instruction
    reads it later (then it is, in allocation order) or it has a dtype of its own."""
    import numpy as np
    body = """
@nki.jit
def kernel(a, w):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((3, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.psum)
    ip, jf = nl.arange(128)[:, None], nl.arange(64)[None, :]
    t = nl.load(a[ip, jf])                    # read by the exp: stays
    buf[0, ip, jf] = nl.exp(t)                # computed into buf[0]: gone
    kept = nl.multiply(t, 2.0)
    buf[1, ip, jf] = kept                     # computed into buf[1] ...
    later = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    later[ip, jf] = nl.add(kept, 1.0)         # ... then read: back in the trace
    buf[2, ip, jf] = nl.exp(t, dtype=nl.bfloat16)   # a bf16 result written into fp32: stays
    acc[ip, jf] += nisa.nc_matmul(nl.load(w[ip, nl.arange(128)[None, :]]), buf[0, ip, jf])   # into acc: gone
    nl.store(out[ip, jf], value=nl.add(acc, later))
    return out
"""
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((128, 64), dtype=np.float32), rng.standard_normal((128, 128), dtype=np.float32)
    res = run_kernel(body, a, w)
    trace = res.trace
    written = {r.tensor for ins in trace for r in ins.writes}
    read = {r.tensor for ins in trace for r in ins.reads}
    results = {tid: info for tid, info in trace.tensors.items() if info.kind == "result"}
    # every result tile left in the trace is one an instruction reads or writes, or has a dtype of its own
    assert all(tid in written | read or info.dtype == "bfloat16" for tid, info in results.items())
    by_line = {info.line: info for info in results.values()}
    lines = (HEADER + body).splitlines()
    def line_of(text):
        return next(n for n, s in enumerate(lines, 1) if text in s)
    assert line_of("buf[0, ip, jf] = nl.exp(t)") not in by_line
    assert line_of("nc_matmul") in {i.line for i in trace if i.op == "nc_matmul"}
    assert not any(i.op == "nc_matmul" and i.writes[0].tensor in results for i in trace)
    assert by_line[line_of("kept = nl.multiply")].id in read
    assert by_line[line_of("nl.bfloat16")].dtype == "bfloat16" and "bfloat16" in trace.dtypes_used()
    assert list(trace.tensors) == sorted(trace.tensors)   # allocation order, whatever came back
    acc = w.T.astype(np.float64) @ np.exp(a).astype(np.float64)
    np.testing.assert_allclose(res.outputs[0], acc + (a * 2 + 1), rtol=2e-5, atol=2e-4)

"""FAKE neuronxcc.nki: jit is the identity, baremetal runs the kernel on the accelopt_nb simulator."""
import json
import os
from pathlib import Path

from . import isa, language, typing  # noqa: F401 - the kernel imports these


def jit(func=None, **kwargs):
    if func is None:
        return lambda f: f
    return func


trace = jit


def _record(name, payload):
    state = os.environ.get("NEURON_FAKE_STATE_DIR")
    if state:
        Path(state).mkdir(parents=True, exist_ok=True)
        with open(Path(state) / name, "a") as f:
            f.write(json.dumps(payload) + "\n")


def baremetal(kernel=None, *, save_neff_name=None, save_trace_name=None,
              additional_compile_opt=None, artifacts_dir=None):
    if kernel is None:
        return lambda k: baremetal(k, save_neff_name=save_neff_name, save_trace_name=save_trace_name,
                                   additional_compile_opt=additional_compile_opt)

    def launch(*inputs):
        from accelopt_nb.errors import KernelError
        from accelopt_nb.sim import load_kernel, simulate

        fn = getattr(kernel, "__wrapped__", kernel)
        _record("baremetal_env.jsonl", {
            "NEURON_RT_VISIBLE_CORES": os.environ.get("NEURON_RT_VISIBLE_CORES"),
            "NEURON_RT_NUM_CORES": os.environ.get("NEURON_RT_NUM_CORES"),
            "NEURON_CC_FLAGS": os.environ.get("NEURON_CC_FLAGS"),
            "compile_opt": additional_compile_opt})
        try:
            result = simulate(load_kernel(fn.__code__.co_filename, name=fn.__name__), *inputs)
        except KernelError as exc:
            raise RuntimeError(f"[fake neuronx-cc] compilation failed: {exc}") from exc
        if save_neff_name:
            Path(save_neff_name).write_text(f"FAKE-NEFF {fn.__name__} {additional_compile_opt}")
        if os.environ.get("NEURON_FAKE_RUNTIME_FAIL"):
            raise RuntimeError("[fake NRT] nrt_execute failed with status 1101 (hardware error)")
        if save_trace_name:
            Path(save_trace_name).write_text("FAKE-NTFF")
        outs = result.outputs
        return outs[0] if len(outs) == 1 else outs

    return launch

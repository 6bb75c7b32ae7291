"""docs/nki_coverage.md is generated from the code and agrees with what the simulator does."""
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelopt_nb.errors import UnsupportedAPIError
from accelopt_nb.sim.api import coverage
from accelopt_nb.sim.api import guard as api_guard

ROWS = coverage.collect()
MODULES = coverage.facade_modules()


class _NotADefault:
    def __repr__(self) -> str:
        return "<not a default>"


def test_committed_table_is_the_generated_one():
    assert coverage.DOC_PATH.read_text() == coverage.render(ROWS), \
        "docs/nki_coverage.md is stale: run python -m accelopt_nb.sim.api.coverage"
    assert coverage.main(["--check"]) == 0


def test_every_documented_api_of_both_front_ends_is_listed():
    docs = api_guard.documented()
    assert set(docs) == {"neuronxcc", "nki"}
    listed = {(r.front_end, r.module, r.name) for r in ROWS}
    assert listed == {(fe, kind, n) for fe, mods in docs.items() for kind, apis in mods.items() for n in apis}
    assert {r.status for r in ROWS} <= set(coverage.STATUSES)
    # the APIs AccelOpt kernels lean on are there and fully supported in the NKI 0.1 front end
    status = {(r.front_end, r.qualname): r.status for r in ROWS}
    for api in ("nl.load", "nl.store", "nl.affine_range", "nl.arange", "nl.ndarray", "nl.zeros", "nl.matmul",
                "nisa.nc_matmul", "nisa.tensor_tensor", "nisa.tensor_scalar", "nisa.tensor_reduce",
                "nisa.tensor_tensor_scan", "nisa.memset", "nisa.iota"):
        assert status[("neuronxcc", api)] == "supported", api


@pytest.mark.parametrize("row", [r for r in ROWS if r.status == "refused" and r.name not in
                                 MODULES[(r.front_end, r.module)].__dict__], ids=lambda r: f"{r.front_end}:{r.qualname}")
def test_refused_apis_raise_unsupported_on_use(row):
    module = MODULES[(row.front_end, row.module)]
    with pytest.raises(UnsupportedAPIError) as e:
        getattr(module, row.name)
    assert e.value.api.endswith(f"{row.module}.{row.name}")


@pytest.mark.parametrize("row", [r for r in ROWS if r.status != "refused" or r.name in
                                 MODULES[(r.front_end, r.module)].__dict__], ids=lambda r: f"{r.front_end}:{r.qualname}")
def test_listed_status_matches_the_facade(row):
    module = MODULES[(row.front_end, row.module)]
    obj = module.__dict__[row.name]  # supported or partial: the facade really has it
    entry = api_guard.documented()[row.front_end][row.module][row.name]
    if entry["kind"] != "function":
        missing = [m for m in entry.get("members", []) if not hasattr(obj, m)]
        noted = isinstance(getattr(obj, "coverage_note", None), str)   # a value named but not fully modelled
        assert (row.status == "partial") == bool(missing or noted)
        return
    spec = obj.__nki_spec__
    impl = inspect.signature(obj.__wrapped__).parameters
    takes_varargs = any(p.kind == p.VAR_POSITIONAL for p in impl.values())
    doc = api_guard.public_params(api_guard.doc_signature(entry))
    limited = []
    for name in doc:
        arg = spec.args[name]
        if arg.limit is not None:
            limited.append(name)
        elif arg.target == "*":
            assert takes_varargs
        elif arg.target is not None:
            assert arg.target in impl, f"{row.qualname}: documented {name} maps to a missing parameter"
        else:
            assert name in api_guard.NO_EFFECT or name in api_guard.NO_EFFECT_FOR.get(f"{row.module}.{row.name}", {})
    assert (row.status == "supported") == (not limited)
    # every refused parameter really is refused, naming the API and the argument
    for name in limited:
        with pytest.raises(UnsupportedAPIError) as e:
            obj(**{name: _NotADefault()})
        assert f"argument '{name}'" in e.value.message and e.value.api.endswith(f".{row.name}")


def test_registry_entries_name_documented_parameters_of_real_apis():
    docs = api_guard.documented()
    for table in (api_guard.LIMITS, api_guard.ALIASES, api_guard.NO_EFFECT_FOR):
        for key, params in table.items():
            if table is api_guard.NO_EFFECT_FOR:  # may name hints AWS kernels use outside the API reference
                params = {}
            kind, name = key.split(".")
            documented = set()
            for fe in docs:
                if name in docs[fe][kind]:
                    documented |= set(api_guard.public_params(api_guard.doc_signature(docs[fe][kind][name])))
            assert documented, f"{key} is not a documented API"
            assert set(params) <= documented, f"{key}: {set(params) - documented} not documented"


def test_api_list_is_the_one_extracted_from_the_docs_sources(tmp_path):
    """With a local clone of aws-neuron/aws-neuron-sdk in ACCELOPT_NEURON_SDK_REPO, nki_api.yaml is re-extracted."""
    repo = os.environ.get("ACCELOPT_NEURON_SDK_REPO")
    if not repo:
        pytest.skip("set ACCELOPT_NEURON_SDK_REPO to a git dir of github.com/aws-neuron/aws-neuron-sdk to check "
                    "nki_api.yaml against the docs sources")
    script = Path(__file__).resolve().parents[1] / "scripts" / "extract_nki_api.py"
    out = tmp_path / "nki_api.yaml"
    subprocess.run([sys.executable, str(script), "--sdk-repo", repo, "--out", str(out)], check=True,
                   capture_output=True)
    assert out.read_text() == api_guard.API_FILE.read_text()

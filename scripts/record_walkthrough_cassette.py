"""Re-record the LLM cassette of notebooks/11_magics_and_panel.ipynb against the project's fake model.

    python scripts/record_walkthrough_cassette.py

Starts the fake OpenAI-compatible server with the scripted fake model (accelopt_nb/fake_model/), runs the
walkthrough notebook with papermill in ``record`` mode against it, and replaces the cassette. Run
it whenever prompts or request settings change (the cassette's keys are hashes of the requests).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOK = ROOT / "notebooks" / "11_magics_and_panel.ipynb"
CASSETTE = ROOT / "notebooks" / "cassettes" / "11_magics_and_panel.fake-model.jsonl"


def fake_model():
    """The scripted model the walkthrough is recorded against (plans from a fixed menu)."""
    from accelopt_nb.fake_model.nki_model import FakeNKIModel, harmless_variation, matmul_resident_rhs

    return FakeNKIModel(plans=["Keep B resident in SBUF so each block is loaded once: RESIDENT.",
                               "Add a review comment and keep the loop structure: NOOP."],
                        rewrites=[("RESIDENT", matmul_resident_rhs), ("NOOP", harmless_variation)],
                        lesson="**Load reused operands once**\nA block every iteration reads belongs in SBUF.")


def record(cassette: Path = CASSETTE) -> int:
    import papermill
    from accelopt_nb.fake_model.server import FakeOpenAIServer

    model = fake_model()
    cassette.parent.mkdir(parents=True, exist_ok=True)
    fresh = cassette.with_suffix(".recording")
    fresh.unlink(missing_ok=True)
    with FakeOpenAIServer(models=["fake-nki"], responder=model.responder) as srv, \
            tempfile.TemporaryDirectory() as tmp:
        papermill.execute_notebook(str(NOTEBOOK), str(Path(tmp) / "out.ipynb"), cwd=str(NOTEBOOK.parent),
                                   kernel_name="python3", progress_bar=False,
                                   parameters={"cassette": str(fresh), "cassette_mode": "record",
                                               "base_url": srv.url, "run_dir": str(Path(tmp) / "run")})
    fresh.replace(cassette)
    calls = dict(model.calls)
    print(f"recorded {sum(calls.values())} calls ({calls}) to {cassette.relative_to(ROOT)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cassette", type=Path, default=CASSETTE)
    return record(p.parse_args(argv).cassette)


if __name__ == "__main__":
    sys.exit(main())

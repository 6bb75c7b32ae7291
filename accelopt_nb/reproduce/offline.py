"""The offline endpoint of ``accelopt reproduce --smoke``: the package's FAKE model behind a loopback server.

Nothing here is a real LLM. The fake model answers every search on NKIBench ``matmul`` with three
fixed rewrites (column blocks outside row blocks; the same with a wrong accumulation, which its fixer
repairs; a no-op edit), so smoke runs exercise the whole machinery (agents over HTTP, evaluation,
the fixer, beam, memory, ledger, figures) and say nothing about any model.
Every figure made from it carries :data:`~accelopt_nb.fake_model.FAKE_MODEL_LABEL` in its title.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from accelopt_nb.fake_model import FAKE_MODEL_LABEL

# Model names the fake endpoint answers to (configs price each as the real model it stands in for).
FAKE_MODELS = ("fake-nki", "fake-gpt-oss-120b", "fake-gpt-oss-20b", "fake-claude-sonnet-4")


def fake_nki_model():
    from accelopt_nb.fake_model.nki_model import (FakeNKIModel, fix_accumulation, harmless_variation,
                                                  matmul_one_pass, matmul_column_outer)

    return FakeNKIModel(plans=["Put the column-block loop outside the row-block loop so each block of B is loaded once: COLUMN BLOCKS OUTER.",
                               "Write each output tile in one pass over the contraction: ONEPASS.",
                               "Review the loop structure and keep it: REVIEW."],
                        rewrites=[("COLUMN BLOCKS OUTER", matmul_column_outer), ("ONEPASS", matmul_one_pass),
                                  ("REVIEW", harmless_variation)],
                        fixes=[("acc = nisa.nc_matmul(", fix_accumulation)])


def fake_responder():
    """The fake model's answers; a request from no agent (``accelopt llm check``'s tiny completion) gets
    "ready", and a plan it has no rewrite for an answer without code (unusable, as a real model's can be)."""
    from accelopt_nb.fake_model.nki_model import role_of
    from accelopt_nb.fake_model.server import Reply

    model = fake_nki_model()

    def respond(body: dict) -> Reply:
        try:
            role_of(body)
        except AssertionError:
            return Reply("ready")
        try:
            return model.responder(body)
        except AssertionError:   # a plan it has no rewrite for (a person wrote it): an answer with no code
            return Reply("I can see what the plan asks, but I cannot write that kernel.")
    return respond


@contextmanager
def fake_endpoint() -> Iterator[dict[str, str]]:
    """Start the fake server; yields the notebook parameters that point a run at it."""
    from accelopt_nb.fake_model.server import FakeOpenAIServer

    with FakeOpenAIServer(models=list(FAKE_MODELS), responder=fake_responder()) as srv:
        yield {"base_url": srv.url, "model_label": FAKE_MODEL_LABEL}

"""A FAKE model for offline smoke runs and tests -- not a real LLM.

``accelopt reproduce --smoke`` and the test suite need the whole agent loop (planner, executor,
summarizer over real HTTP) to run with no endpoint and no network. This package provides that
and nothing more:

* :mod:`accelopt_nb.fake_model.server` -- a scriptable OpenAI-compatible HTTP server on loopback;
* :mod:`accelopt_nb.fake_model.nki_model` -- a scripted "model" that answers planner, executor and
  summarizer requests by applying fixed kernel rewrites (data under ``kernels/``).

Results made with it show that the machinery works, never how well a model optimizes; every
figure made from it says so in its title (:data:`FAKE_MODEL_LABEL`).
"""
from __future__ import annotations

# The one wording every figure and index made from this fake model carries.
FAKE_MODEL_LABEL = "offline fake model \u2014 not a real LLM"

"""Which model ``%accelopt open`` talks to when its line names none, and the offline fake model.

A notebook that always uses the same endpoint need not repeat it in every ``open``: the default
comes from, in order,

1. the command line (``--model-preset``, or ``--base-url`` and ``--model``);
2. ``%config AccelOptMagics.base_url = ...`` (also ``model``, ``model_preset``, ``price``,
   ``api_key_env``), which an IPython profile makes persistent
   (``c.AccelOptMagics.base_url = ...`` in ``ipython_config.py``);
3. the environment: ``ACCELOPT_BASE_URL``, ``ACCELOPT_MODEL``, ``ACCELOPT_MODEL_PRESET``,
   ``ACCELOPT_PRICE``, ``ACCELOPT_API_KEY_ENV``.

The first source that names a model wins as a whole; sources are never mixed field by field
(a preset from one and a URL from another would be a model nobody chose).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

# The model settings an endpoint default holds, and the environment variable of each.
ENV_VARS = {"base_url": "ACCELOPT_BASE_URL", "model": "ACCELOPT_MODEL", "model_preset": "ACCELOPT_MODEL_PRESET",
            "price": "ACCELOPT_PRICE", "api_key_env": "ACCELOPT_API_KEY_ENV"}
FAKE_MODEL = "fake-nki"
FAKE_PRICE = "free"


@dataclass(frozen=True)
class Endpoint:
    """Model settings for :func:`accelopt_nb.search.launch.model_config`, and where they came from."""

    settings: dict[str, Any]
    source: str

    @property
    def names_a_model(self) -> bool:
        return _names_a_model(self.settings)


def _names_a_model(settings: Mapping[str, Any]) -> bool:
    return bool(settings.get("model_preset") or (settings.get("base_url") and settings.get("model")))


def _present(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if v not in (None, "")}


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    return _present({key: env.get(var) for key, var in ENV_VARS.items()})


def resolve(given: Mapping[str, Any], configured: Mapping[str, Any],
            environ: Mapping[str, str] | None = None) -> Endpoint:
    """The model settings of an ``open``: the command's, else ``%config``'s, else the environment's.

    ``price`` and ``api_key_env`` given alone on the command line refine the default model.
    """
    given = _present(given)
    if given.get("model_preset") or given.get("base_url") or given.get("model"):
        return Endpoint(given, "the command line")
    for settings, source in ((_present(configured), "%config AccelOptMagics"),
                             (from_environment(environ), "the environment (ACCELOPT_BASE_URL ...)")):
        if _names_a_model(settings):
            return Endpoint({**settings, **given}, source)
    return Endpoint(given, "none")


class FakeModelServer:
    """The package's offline FAKE model on a loopback port, for as long as the kernel runs (or :meth:`stop`).

    Not a real LLM: it answers searches on NKIBench ``matmul`` with two fixed rewrites and any other
    problem with plans and kernels that change nothing useful (see :mod:`accelopt_nb.reproduce.offline`).
    """

    def __init__(self, latency_s: float = 0.0) -> None:
        from accelopt_nb.fake_model.server import FakeOpenAIServer, Slow
        from accelopt_nb.reproduce.offline import FAKE_MODELS, fake_responder

        self.latency_s = latency_s
        answer = fake_responder()

        def respond(body: dict):  # latency_s read per request: `fake-model --latency` changes a running server
            action = answer(body)
            return Slow(self.latency_s, action) if self.latency_s > 0 else action

        self._server = FakeOpenAIServer(models=list(FAKE_MODELS), responder=respond).start()

    @property
    def url(self) -> str:
        return self._server.url

    def settings(self) -> dict[str, Any]:
        return {"base_url": self.url, "model": FAKE_MODEL, "price": FAKE_PRICE}

    def stop(self) -> None:
        self._server.stop()


__all__ = ["ENV_VARS", "Endpoint", "FAKE_MODEL", "FakeModelServer", "from_environment", "resolve"]

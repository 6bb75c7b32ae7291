"""accelopt_nb: a Jupyter-native toolkit for LLM-driven optimization of Trainium NKI kernels.

Layers, bottom up: ``sim`` (NKI CPU simulator), ``perf`` (Trainium performance model),
``nkibench`` (the benchmark, a sibling package), ``evaluation``, ``llm``/``store``/``agents``/
``search``, and the notebook layer.
"""
__version__ = "0.1.0"


def load_ipython_extension(ipython) -> None:
    """``%load_ext accelopt_nb``: register the ``%accelopt`` magics (IPython is imported only here)."""
    from accelopt_nb.notebook.magics import load_ipython_extension as _load
    _load(ipython)

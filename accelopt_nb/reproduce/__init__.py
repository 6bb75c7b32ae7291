"""Reproduction of the paper's figures: the library behind ``accelopt reproduce`` and ``notebooks/2x_*``.

* :mod:`~accelopt_nb.reproduce.runner` -- runs the notebooks with papermill, writes ``index.md``;
* :mod:`~accelopt_nb.reproduce.published` -- the paper's published numbers (cited data);
* :mod:`~accelopt_nb.reproduce.stores` -- best kernels out of experiment run stores;
* one module per figure: :mod:`~.nkibench_table`, :mod:`~.search_figures` (beam vs sampling, memory,
  cost), :mod:`~.humans` (Mamba vs human experts), :mod:`~.saturation`;
* :mod:`~accelopt_nb.reproduce.figures` -- every figure as PNG + SVG + CSV, its title naming the model;
* :mod:`~accelopt_nb.reproduce.offline` -- the offline FAKE model endpoint of ``--smoke`` runs.
"""

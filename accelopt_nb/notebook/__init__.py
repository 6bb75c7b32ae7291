"""The notebook layer: ``%accelopt`` magics, the session panel, rich views and live progress.

``%load_ext accelopt_nb`` registers the magics (``accelopt_nb.notebook.magics``); this package
itself imports nothing heavy, so ``accelopt_nb.notebook.session`` serves scripts without IPython.
"""


def load_ipython_extension(ipython) -> None:
    from accelopt_nb.notebook.magics import load_ipython_extension as _load
    _load(ipython)

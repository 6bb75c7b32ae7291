"""The notebook layer: ``%accelopt`` magics, the session panel, rich views and live progress.

``%load_ext accelopt_nb`` registers the magics; IPython and ipywidgets are imported only when
this package is.
"""
from accelopt_nb.notebook.magics import AccelOptMagics, MagicUsageError, load_ipython_extension

__all__ = ["AccelOptMagics", "MagicUsageError", "load_ipython_extension"]

"""The core interpreter: runtime state, tensors and views, memory (one write path), operands and the primitives.

It knows neither the NKI surface (``sim.api``) nor loop replay (``sim.replay``): the API wing binds what tile
operators mean (``core.views.API``), and an observer on the runtime (``core.hooks``) is all the replay wing sees.
"""

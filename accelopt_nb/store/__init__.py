"""The run store: crash-safe and resumable; SQLite (one file per experiment directory, the
default) or PostgreSQL (one database a team shares: ``RunStore("postgresql://host/db")``).

::

    from accelopt_nb.store import RunStore

    store = RunStore.open("experiments/demo")           # experiments/demo/accelopt.sqlite
    store.create_run("run-1", config)                    # full config JSON
    it, step = store.resume_point("run-1", ["plan", "execute", "select"], scope="softmax")
    with store.step("run-1", it, step, scope="softmax") as st:
        st.add_kernel(problem_id="softmax", source=src, iteration=it)
    store.kernels_df("run-1")

See :mod:`accelopt_nb.store.runstore` for the crash-safety design, :mod:`.backends` for the seam
between the store and a database, :mod:`.queries` for best kernels, lineage and memory across runs,
and :mod:`.transfer` for moving runs between stores.
"""
from accelopt_nb.store.rows import sha256_text
from accelopt_nb.store.runstore import DEFAULT_FILENAME, RunStore
from accelopt_nb.store.schema import SCHEMA_VERSION
from accelopt_nb.store.steps import StepWriter

__all__ = ["RunStore", "StepWriter", "DEFAULT_FILENAME", "SCHEMA_VERSION", "sha256_text"]

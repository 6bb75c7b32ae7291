"""One step of an experiment as a unit of work: all of its rows, or none.

::

    if not store.is_step_done(run_id, it, "execute", scope=problem):
        with store.step(run_id, it, "execute", scope=problem) as st:
            for plan in plans:
                st.add_kernel(problem_id=problem, source=code, iteration=it, plan_id=plan)
    # leaving the block commits every row and the step's "done" marker in one transaction

Rows are held in memory until the block ends, so the (possibly long) LLM and evaluation
work of a step never holds the database's write lock. If the process dies inside the block,
nothing of the step is stored and :meth:`RunStore.resume_point` points at it again. If the
block raises, the step is marked ``failed`` (with the error) and the exception propagates.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from accelopt_nb.errors import StoreError
from accelopt_nb.store import rows as R

if TYPE_CHECKING:
    from accelopt_nb.store.runstore import RunStore

__all__ = ["StepWriter"]


class StepWriter:
    """Buffers a step's writes; see the module docstring. Created by ``RunStore.step``."""

    def __init__(self, store: "RunStore", run_id: str, iteration: int, step: str, scope: str) -> None:
        self.store = store
        self.run_id = run_id
        self.iteration = iteration
        self.step = step
        self.scope = scope
        self.info: dict[str, Any] = {}
        self._rows: list[tuple[str, dict[str, Any]]] = []
        self._open = False

    def _key(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "scope": self.scope, "iteration": self.iteration, "step": self.step}

    def __enter__(self) -> "StepWriter":
        if self.store.is_step_done(self.run_id, self.iteration, self.step, scope=self.scope):
            raise StoreError(f"step {self.step!r} of iteration {self.iteration} (run {self.run_id!r}, "
                             f"scope {self.scope!r}) is already done")
        self.store.mark_step(self.run_id, self.iteration, self.step, "started", scope=self.scope)
        self._open = True
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._open = False
        if exc is None:
            self.store.write_rows(self._rows, then={**self._key(), "status": "done", "info": self.info or None})
        elif isinstance(exc, Exception):
            # Keep the reason; the buffered rows are dropped and the step will be re-run.
            self.store.mark_step(self.run_id, self.iteration, self.step, "failed", scope=self.scope,
                                 info={**self.info, "error": f"{type(exc).__name__}: {exc}"})
        self._rows.clear()
        # KeyboardInterrupt and friends leave the step 'started': the same as a kill.

    def _add(self, table: str, row: dict[str, Any]) -> None:
        if not self._open:
            raise StoreError("StepWriter used outside its 'with' block")
        self._rows.append((table, row))

    @property
    def pending(self) -> int:
        """Rows buffered so far."""
        return len(self._rows)

    def add_problem(self, problem_id: str, spec: Mapping[str, Any] | None = None) -> str:
        self._add("problems", R.problem_row(self.run_id, problem_id, spec))
        return problem_id

    def add_kernel(self, **fields: Any) -> str:
        row = R.kernel_row(self.run_id, **fields)
        self._add("kernels", row)
        return row["kernel_id"]

    def add_plan(self, **fields: Any) -> str:
        row = R.plan_row(self.run_id, **fields)
        self._add("plans", row)
        return row["plan_id"]

    def add_evaluation(self, **fields: Any) -> str:
        row = R.evaluation_row(self.run_id, **fields)
        self._add("evaluations", row)
        return row["eval_id"]

    def add_memory_item(self, **fields: Any) -> str:
        row = R.memory_item_row(self.run_id, **fields)
        self._add("memory_items", row)
        return row["item_id"]

"""One AST lock for the package and for the notebook's own cell parsing (CPython 3.11's AST
constructor keeps a per-interpreter recursion counter: concurrent parses can fail)."""
from __future__ import annotations

import threading

import pytest

from accelopt_nb import pyutil as pyast

IPython = pytest.importorskip("IPython")


class CountingLock:
    """A real lock that counts its acquisitions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acquired = 0

    def __enter__(self):
        self._lock.acquire()
        self.acquired += 1
        return self

    def __exit__(self, *exc):
        self._lock.release()


def test_notebook_cells_parse_and_compile_under_the_package_lock(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    assert pyast.guard_ipython(shell) and pyast.guard_ipython(shell)  # idempotent
    lock = CountingLock()
    monkeypatch.setattr(pyast, "PARSE_LOCK", lock)
    result = shell.run_cell("x_guarded = sum(i * i for i in range(4))")
    assert result.success and shell.user_ns["x_guarded"] == 14
    assert lock.acquired >= 2  # the cell's parse and the compile of its syntax tree
    # shell_futures=False compiles with a fresh compiler of the shell's compiler class: guarded too
    before = lock.acquired
    assert shell.run_cell("y_guarded = 2", shell_futures=False).success
    assert lock.acquired > before


def test_a_cell_waits_while_another_thread_holds_the_lock():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    pyast.guard_ipython(shell)
    done = threading.Event()
    with pyast.PARSE_LOCK:  # an LLM thread parsing an answer
        worker = threading.Thread(target=lambda: (shell.run_cell("z_guarded = 1"), done.set()))
        worker.start()
        assert not done.wait(0.3)  # the cell cannot parse meanwhile
    worker.join(30)
    assert done.is_set() and shell.user_ns["z_guarded"] == 1


def test_the_llm_worker_thread_guards_the_running_shell(monkeypatch):
    from accelopt_nb.llm.loop_thread import LoopThread

    seen = []
    monkeypatch.setattr("accelopt_nb.llm.loop_thread.guard_ipython", lambda: seen.append(1) or False)
    worker = LoopThread()
    try:
        worker.run(_noop())
    finally:
        worker.close()
    assert seen == [1]


async def _noop():
    return None

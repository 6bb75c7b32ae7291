"""A private event loop on a worker thread, for calling async code from sync code.

Jupyter already runs an event loop in the main thread, so ``asyncio.run`` fails there;
running the coroutine on this thread's loop works the same in a notebook, a script or a
test.
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any, Coroutine, TypeVar

from accelopt_nb.pyutil import guard_ipython

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """Owns one daemon thread running an asyncio loop; started lazily, stopped by close()."""

    def __init__(self, name: str = "accelopt-llm-loop") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def _serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                # This thread parses answers while a notebook's kernel parses cells: share the AST lock.
                guard_ipython()
                self._thread = threading.Thread(target=_serve, name=self._name, daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> "Future[T]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the worker loop and wait for its result (re-raising its error)."""
        if self._thread is not None and threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync LLM call was made from inside the client's own event loop; "
                               "await the async method instead")
        return self.submit(coro).result()

    def close(self, cleanup: Coroutine[Any, Any, Any] | None = None) -> None:
        """Optionally run ``cleanup`` on the loop, then stop and join the thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or loop.is_closed():
            if cleanup is not None:
                cleanup.close()
            return
        if cleanup is not None:
            try:
                asyncio.run_coroutine_threadsafe(cleanup, loop).result(timeout=10)
            except Exception:  # cleanup is best effort; the thread still stops
                pass
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        loop.close()

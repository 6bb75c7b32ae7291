"""The front of an iteration as one stream: plan → execute → evaluate, each item as it arrives.

:class:`Front` runs any consecutive run of the first three steps. Run alone (``plan()``,
``execute()``, ``evaluate()``) a step makes only its own calls; run together (``step()`` with
``runtime.pipeline``) a plan starts its K executor calls the moment it is stored, and a kernel
is evaluated the moment it is stored, while other LLM calls are still in flight. LLM answers
are recorded on the LLM client's worker thread; evaluations are submitted and recorded on the
caller's thread, which waits on one queue for both.

Evaluations are handed to the evaluator only as it has free workers, screens first. Under
multi-fidelity search a worker with no screen to run confirms the best unconfirmed kernel of the
beam as it would be chosen now, so confirmations overlap screening and LLM calls instead of
waiting for ``select``.

Whatever was already stored is not redone, so running the front again after a crash or a
stop makes only the missing calls and evaluations. Each step is then closed in order; the
first that is not complete leaves the later ones open.
"""
from __future__ import annotations

import queue
import random
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from accelopt_nb.agents.prompts import PeakInfo, format_profile
from accelopt_nb.errors import BudgetExceededError, ConfigError, LLMError
from accelopt_nb.llm.client import CallRequest
from accelopt_nb.llm.completion import Completion
from accelopt_nb.search.events import StepStats
from accelopt_nb.search.state import KernelView, PlanView

if TYPE_CHECKING:
    from accelopt_nb.evaluation import EvalOptions, EvalResult
    from accelopt_nb.evaluation.executors import Evaluator
    from accelopt_nb.search.session import Session

__all__ = ["Front", "Requests"]

Requests = Sequence[CallRequest]
FRONT = ("plan", "execute", "evaluate")


class Front:
    """Plans, kernels and evaluations of the current iteration for one session."""

    def __init__(self, session: "Session", *, eval_executor: "Evaluator | None" = None, eval_cache: Any = True,
                 eval_options: "EvalOptions | None" = None) -> None:
        self.session = session
        self.eval_executor = eval_executor
        self.eval_cache = eval_cache
        self.eval_options = eval_options
        self._owned_executor: Any = None
        self._cache: Any = None

    # ------------------------------------------------------------------ evaluation plumbing
    def _executor(self) -> "Evaluator":
        if self.eval_executor is not None:
            return self.eval_executor
        if self._owned_executor is None:
            from accelopt_nb.evaluation import LocalPoolEvaluator

            workers = self.session.config.runtime.eval_workers or None
            self._owned_executor = LocalPoolEvaluator(workers)
        return self._owned_executor

    def _open_cache(self) -> Any:
        if self._cache is None and self.eval_cache not in (None, False):
            from accelopt_nb.evaluation.api import open_cache
            self._cache = open_cache(self.eval_cache)
        return self._cache

    @property
    def candidate_fidelity(self) -> str:
        """``screen`` under multi-fidelity search (confirmed later, before the beam), else ``full``."""
        return "screen" if self.session.config.evaluation.fidelity == "multi" else "full"

    def _job(self, label: str, source: str, fidelity: str, options: "EvalOptions | None" = None) -> Any:
        from accelopt_nb.evaluation import make_job

        ev, problem = self.session.config.evaluation, self.session.problem
        return make_job(problem.eval_target, source, backend=ev.backend, hw=ev.hw, preset=problem.preset,
                        options=options or self.eval_options, label=label,
                        fidelity=fidelity)  # type: ignore[arg-type]

    def _submit(self, label: str, source: str, fidelity: str | None = None,
                options: "EvalOptions | None" = None) -> "Future[EvalResult]":
        """A future of the evaluation, answered from the cache when it holds this kernel."""
        job = self._job(label, source, fidelity or self.candidate_fidelity, options)
        cache = self._open_cache()
        hit = cache.get(job) if cache is not None else None
        if hit is not None:
            done: Future = Future()
            hit.label = label
            done.set_result(hit)
            return done
        from accelopt_nb.evaluation.executors import INFRA_ERRORS, crashed_result

        inner = self._executor().submit(job)
        out: Future = Future()

        def settle(f: Future) -> None:
            exc = f.exception()
            if exc is None:
                result = f.result()
                if cache is not None:
                    cache.put(job, result)
                out.set_result(result)
            elif isinstance(exc, INFRA_ERRORS):  # unknown problem, no toolchain: stop the run
                out.set_exception(exc)
            else:  # a lost worker is the kernel's evaluation crashing, not the run's
                out.set_result(crashed_result(job, f"the evaluation was lost: {type(exc).__name__}: {exc}"))
        inner.add_done_callback(settle)
        return out

    def _same_kernel_key(self, source: str) -> str:
        from accelopt_nb.evaluation.executors import normalized_source_key
        return f"{normalized_source_key(source)}|{self.candidate_fidelity}"

    def evaluate_one(self, label: str, source: str, fidelity: str = "full") -> "EvalResult":
        result = self._submit(label, source, fidelity).result()
        result.label = label
        return result

    def submit_confirmation(self, kid: str) -> "Future[EvalResult]":
        """Evaluate a screened kernel at full fidelity.

        Where the backend's trace-only profile is exact (the simulator: the same instruction stream as
        a run with values), the screening already profiled this kernel at the problem's shape, so the
        confirmation checks correctness only and takes the latency and profile from the screening."""
        from dataclasses import replace

        from accelopt_nb.evaluation import EvalOptions, Status
        from accelopt_nb.evaluation.backends import exact_trace_profile

        s = self.session
        view = s.kernels[kid]
        screened = view.fidelity == "screen" and view.latency_ms is not None and bool(view.profile)
        if not (screened and exact_trace_profile(s.config.evaluation.backend)):
            return self._submit(kid, view.source, "confirm")
        latency_ms, profile = view.latency_ms, dict(view.profile or {})
        inner = self._submit(kid, view.source, "confirm", replace(self.eval_options or EvalOptions(), profile=False))
        out: Future = Future()

        def merge(f: Future) -> None:
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
                return
            result = f.result()
            if result.status in (Status.CORRECT, Status.CHEAT):
                result.latency_ms, result.profile = latency_ms, profile
                result.log.append(f"[search] latency and profile from this kernel's screening (a trace-only run at "
                                  f"the {s.problem.preset} shape; the same instruction stream)")
            out.set_result(result)
        inner.add_done_callback(merge)
        return out

    def confirm(self, kernel_ids: Sequence[str]) -> None:
        """Evaluate screened kernels at full fidelity (in parallel) and record the results."""
        s = self.session
        futures = {kid: self.submit_confirmation(kid) for kid in kernel_ids}
        for n, (kid, fut) in enumerate(futures.items(), 1):
            self._record_confirmation(kid, fut.result(), "select", done=n, total=len(futures))

    def _record_confirmation(self, kid: str, result: "EvalResult", phase: str, **counts: int) -> None:
        s = self.session
        s.state.record_evaluation(kid, result, attempt=1)
        s._emit(phase, s.iteration, "eval_done", message=f"confirmed {kid}: {s.kernels[kid].status}", **counts)

    def capacity(self) -> int | None:
        """How many evaluations the evaluator runs at once (None: unknown, e.g. a Dask cluster)."""
        workers = getattr(self._executor(), "workers", None)
        return workers if isinstance(workers, int) and workers > 0 else None

    def next_to_confirm(self, exclude: Iterable[str] = ()) -> str | None:
        """The best screened kernel that would take a beam slot now and is not confirmed yet."""
        s = self.session
        skip = set(exclude)
        for c in s.beam_choice():
            if c.kernel_id not in skip and not s.kernels[c.kernel_id].confirmed:
                return c.kernel_id
        return None

    def close(self) -> None:
        if self._owned_executor is not None:
            self._owned_executor.shutdown()
            self._owned_executor = None

    # ------------------------------------------------------------------ requests
    def planner_requests(self) -> list[CallRequest]:
        s = self.session
        t = s.iteration
        n = s.config.plans_for(t, len(s.beam))
        memory = s.memory.visible(s.problem.name, shared=s.config.memory.shared) if s.config.uses_memory else []
        out = []
        for b, kid in enumerate(s.plan_sources()):
            kernel = s.kernels[kid]
            rng = random.Random(f"{s.config.seed}:{t}:{kid}")  # seeded, resume-stable
            lines = format_profile(_profile_with_latency(kernel), s.config.planner.profile_order, rng,
                                   fields=s.config.planner.profile_fields)
            hints = _hints(kernel) if s.config.planner.show_hints else []
            messages = s.planner.messages(problem_name=s.problem.name, reference_source=s.reference_source,
                                          kernel_source=kernel.source, profile_lines=lines, memory_items=memory,
                                          peak=self._peak_info(kernel), hints=hints)
            for j in range(n):
                pid = f"i{t}b{b}p{j}"
                if pid not in s.plans:
                    out.append(s.call_request("planner", messages, key=("plan", pid, kid, b, j),
                                              validate=s.planner.validate, sample=j, slot=pid))
        return out

    def executor_requests(self, plan: PlanView) -> list[CallRequest]:
        s = self.session
        parent = s.kernels[plan.parent_id]
        messages = s.executor.messages(problem_name=s.problem.name, reference_source=s.reference_source,
                                       kernel_source=parent.source, plan=plan.text)
        out = []
        for k in range(s.config.samples_per_plan):
            kid = f"{plan.plan_id}s{k}"
            if kid not in s.kernels:
                out.append(s.call_request("executor", messages, key=("kernel", kid, plan.plan_id, k),
                                          validate=s.executor.validate, sample=k, slot=kid))
        return out

    def _peak_info(self, kernel: KernelView) -> PeakInfo | None:
        s = self.session
        if not s.config.planner.show_peak:
            return None
        p = s.problem.peak(s.config.evaluation.hw)
        if p is None or kernel.latency_ms is None:
            return None
        return PeakInfo(percent=100.0 * p[0] / kernel.latency_ms, peak_ms=p[0], bound=p[1])

    # ------------------------------------------------------------------ the stream
    def run(self, phases: Sequence[str], *, skip_plans: Iterable[str] = ()) -> None:
        """Run ``phases`` (consecutive, from plan/execute/evaluate) as one stream, then close them."""
        from accelopt_nb.search.session import failure_record, kernel_order

        s = self.session
        phases = tuple(phases)
        if not phases or any(p not in FRONT for p in phases) or \
                FRONT[FRONT.index(phases[0]):FRONT.index(phases[0]) + len(phases)] != phases:
            raise ConfigError(f"the front runs consecutive steps of {FRONT}, got {phases}")
        t = s.iteration
        stats = {p: StepStats(p, t) for p in phases}
        expected = dict.fromkeys(phases, 0)
        failures: dict[str, list[dict[str, Any]]] = {p: [] for p in phases}
        statuses: dict[str, int] = {}
        skip = set(skip_plans)
        for p in phases:
            s.state.mark_started(p)
        events: "queue.Queue[tuple[str, Any]]" = queue.Queue()

        requests: list[CallRequest] = []
        if "plan" in phases:
            requests += self.planner_requests()
            expected["plan"] = len(requests)
        if "execute" in phases:
            for plan in s.iteration_plans():
                if plan.plan_id not in skip:
                    more = self.executor_requests(plan)
                    expected["execute"] += len(more)
                    requests += more
        to_evaluate = [k for k in s.iteration_kernels() if not k.evaluated] if "evaluate" in phases else []
        expected_evals = len(to_evaluate)
        for p in phases:
            total = expected["evaluate"] if p == "evaluate" else expected[p]
            s._emit(p, t, "start", total=total)
        closed: set[str] = set()

        def close_plan_step() -> None:
            # The plan step is complete once every planner call has answered, while its kernels
            # are still being written: mark it done then, so a crash keeps it done.
            st = stats["plan"]
            info = s._plan_info(st, failures["plan"])
            s._close_step(st, info, f"{info['plans']} plans, {st.failed} failed")
            closed.add("plan")

        if "plan" in phases and expected["plan"] == 0:
            close_plan_step()

        def on_done(req: CallRequest, c: Completion) -> list[CallRequest] | None:
            nonlocal expected_evals
            kind = req.key[0]
            if kind == "plan":
                _, pid, kid, b, j = req.key
                st = stats["plan"]
                st.calls += 1
                more: list[CallRequest] = []
                if c.ok:
                    parsed = c.parsed
                    plan = s.state.record_plan(pid, kid, (b, j), text=parsed.text, step=parsed.step, origin="llm",
                                               data={"call_id": c.call_id, "reasoning": parsed.reasoning or c.reasoning,
                                                     "finish_reason": c.finish_reason, "notes": list(parsed.notes),
                                                     "rejected": [r.reason for r in c.rejections]})
                    if "execute" in phases:
                        more = self.executor_requests(plan)
                        expected["execute"] += len(more)
                else:
                    st.add_failure(c.error, unusable=c.status == "unusable")
                    failures["plan"].append(failure_record(c, plan_id=pid, parent_id=kid))
                s._emit("plan", t, "call_done", done=st.calls, total=expected["plan"], failed=st.failed)
                if st.calls == expected["plan"] and not st.all_failed and not s.stop_requested:
                    close_plan_step()
                return more
            _, kid, pid, k = req.key
            st = stats["execute"]
            st.calls += 1
            if c.ok:
                got = c.parsed
                data = {"call_id": c.call_id, "extraction": got.method, "notes": got.notes, "sample": k,
                        "raw_response": c.text, "reasoning": c.reasoning, "finish_reason": c.finish_reason,
                        "rejected": [r.reason for r in c.rejections]}
                plan = s.plans[pid]
                s.state.record_kernel(kid, got.code, plan, origin="llm", order=kernel_order(plan, k), data=data)
                if "evaluate" in phases:
                    expected_evals += 1
                    events.put(("kernel", kid))
            else:
                st.add_failure(c.error, unusable=c.status == "unusable")
                failures["execute"].append(failure_record(c, kernel_id=kid, plan_id=pid))
            s._emit("execute", t, "call_done", done=st.calls, total=expected["execute"], failed=st.failed)
            return None

        llm_future: Future | None = None
        if requests:
            driver = requests[0].client
            assert driver is not None
            llm_future = driver.submit_each(requests, on_done, stop=s._stop.is_set)
            llm_future.add_done_callback(lambda f: events.put(("llm_done", None)))
        for k in to_evaluate:
            events.put(("kernel", k.kernel_id))

        running: set[str] = set()               # kernels being screened or confirmed
        confirming: set[str] = set()            # the confirmations among them
        waiting: "deque[str]" = deque()         # kernels to evaluate, in arrival order
        llm_running = llm_future is not None
        ev = stats.get("evaluate")
        capacity = self.capacity() if "evaluate" in phases else None
        multi = "evaluate" in phases and s.config.evaluation.fidelity == "multi"
        # Kernels with the same normalized AST are evaluated once; the others get a copy.
        twins: dict[str, list[str]] = {}        # leader kernel id -> kernels waiting on its result
        leader_of: dict[str, str] = {}          # normalized key -> leader kernel id
        known: dict[str, "EvalResult"] = {}     # normalized key -> result

        def record(kid: str, result: "EvalResult") -> None:
            view = s.state.record_evaluation(kid, result)
            assert ev is not None
            ev.calls += 1
            statuses[view.status or "?"] = statuses.get(view.status or "?", 0) + 1
            if not view.correct:
                ev.failed += 1
            s._emit("evaluate", t, "eval_done", done=ev.calls, total=expected_evals, failed=ev.failed)

        def start(kid: str, confirm: bool = False) -> None:
            running.add(kid)
            fut = self.submit_confirmation(kid) if confirm else self._submit(kid, s.kernels[kid].source)
            fut.add_done_callback(lambda f: events.put(("confirmed" if confirm else "result", (kid, f))))

        def free() -> bool:
            return capacity is None or len(running) < capacity

        def pump() -> None:
            """Keep the evaluators busy: screens first, then (multi-fidelity) confirmations of
            the kernels that would take a beam slot now, whenever no screen waits for a worker."""
            if s.stop_requested:
                waiting.clear()  # counted as missing below
                return
            while waiting and free():
                kid = waiting.popleft()
                key = self._same_kernel_key(s.kernels[kid].source)
                if key in known:
                    record(kid, _copy_of(known[key], kid, leader_of[key], s.kernels[kid].source))
                elif key in leader_of:
                    twins.setdefault(leader_of[key], []).append(kid)
                else:
                    leader_of[key] = kid
                    start(kid)
            # Without a known capacity, confirm only once nothing is being screened.
            while multi and not waiting and (free() if capacity is not None else running <= confirming):
                kid = self.next_to_confirm(exclude=confirming)
                if kid is None:
                    break
                confirming.add(kid)
                start(kid, confirm=True)

        pump()
        while llm_running or running or waiting or not events.empty():
            what, item = events.get()
            if what == "llm_done":
                llm_running = False
            elif what == "kernel":
                if not s.stop_requested:
                    waiting.append(item)
            elif what == "result":
                kid, fut = item
                running.discard(kid)
                result = fut.result()  # an infrastructure error (unknown problem, no toolchain) propagates
                record(kid, result)
                known[self._same_kernel_key(s.kernels[kid].source)] = result
                for twin in twins.pop(kid, []):
                    record(twin, _copy_of(result, twin, kid, s.kernels[twin].source))
            elif what == "confirmed":
                kid, fut = item
                running.discard(kid)
                confirming.discard(kid)
                assert ev is not None
                self._record_confirmation(kid, fut.result(), "evaluate", done=ev.calls, total=expected_evals,
                                          failed=ev.failed)
            pump()

        fatal: BaseException | None = None
        if llm_future is not None:
            try:
                llm_future.result()
            except (BudgetExceededError, LLMError, ConfigError) as exc:
                fatal = exc
        for p in ("plan", "execute"):
            if p in phases:
                stats[p].missing = max(0, expected[p] - stats[p].calls)
                stats[p].stopped = s.stop_requested and stats[p].missing > 0
        if ev is not None:
            ev.missing = max(0, expected_evals - ev.calls)
            ev.stopped = s.stop_requested and ev.missing > 0
        # Close in order; the first step left open keeps the later ones open too.
        try:
            for p in phases:
                st = stats[p]
                if p in closed:
                    if not st.done:
                        break
                    continue
                if p == "plan":
                    info = s._plan_info(st, failures["plan"])
                    msg = f"{info['plans']} plans, {st.failed} failed"
                elif p == "execute":
                    n = len(s.iteration_kernels())
                    info = {"kernels": n, "failed": failures["execute"]}
                    msg = f"{n} kernels, {st.failed} calls without a kernel"
                else:
                    counts = {}
                    for k in s.iteration_kernels():
                        counts[k.status] = counts.get(k.status, 0) + 1
                    info = {"statuses": counts}
                    msg = ", ".join(f"{n} {st_}" for st_, n in sorted(counts.items(), key=lambda x: str(x[0]))) \
                        or "nothing to evaluate"
                s._close_step(st, info, msg)
                if not st.done:
                    break
        finally:
            if fatal is not None:
                raise fatal


def _copy_of(result: "EvalResult", kid: str, leader: str, source: str) -> "EvalResult":
    import hashlib

    from accelopt_nb.evaluation import EvalResult

    copy = EvalResult.from_dict(result.to_dict())
    copy.label = kid
    copy.kernel_sha256 = hashlib.sha256(source.encode()).hexdigest()
    copy.log.append(f"[search] same normalized kernel as {leader}: evaluated once")
    return copy


def _profile_with_latency(kernel: KernelView) -> dict[str, Any]:
    prof = dict(kernel.profile or {})
    if kernel.latency_ms is not None:
        prof["latency"] = kernel.latency_ms
    return prof


def _hints(kernel: KernelView) -> list[str]:
    notes = (kernel.profile or {}).get("bottleneck") or []
    return [str(n) for n in notes] if isinstance(notes, (list, tuple)) else [str(notes)]


"""Bookkeeping overhead of the LLM client, ledger and run store, against the loopback fake server.

Real model calls take seconds to minutes; this measures what accelopt_nb adds around them
(HTTP over loopback, response parsing, pricing, one committed ledger row per call) and the
cost of committing a step.

    python benchmarks/llm_store_overhead.py [--calls 200] [--concurrency 8]
"""
from __future__ import annotations

import argparse
import tempfile
import time

from accelopt_nb.fake_model.server import FakeOpenAIServer
from accelopt_nb.llm import Ledger, LLMClient, ModelConfig
from accelopt_nb.store import RunStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore.open(tmp)
        store.create_run("bench", {})
        with FakeOpenAIServer(models=["m"]) as srv:
            config = ModelConfig(model="m", base_url=srv.url, price="free")
            with LLMClient(config, Ledger.for_store(store, "bench"), concurrency=args.concurrency) as client:
                client.complete_sync("warm up", role="bench")
                t0 = time.perf_counter()
                for i in range(args.calls):
                    client.complete_sync(f"q{i}", role="bench", run_id="bench")
                seq = (time.perf_counter() - t0) / args.calls
                t0 = time.perf_counter()
                client.complete_many_sync([{"messages": f"q{i}", "role": "bench", "run_id": "bench"}
                                           for i in range(args.calls)])
                batch = (time.perf_counter() - t0) / args.calls
        t0 = time.perf_counter()
        steps = 50
        for it in range(steps):
            with store.step("bench", it, "execute") as st:
                for j in range(8):
                    st.add_kernel(problem_id="p", source=f"x = {it} + {j}\n", iteration=it)
        step_ms = (time.perf_counter() - t0) / steps * 1e3
        store.close()
    print(f"sequential call + ledger row: {seq * 1e3:.2f} ms/call")
    print(f"batch of {args.calls} at concurrency {args.concurrency}: {batch * 1e3:.2f} ms/call")
    print(f"step commit with 8 kernels: {step_ms:.2f} ms/step")


if __name__ == "__main__":
    main()

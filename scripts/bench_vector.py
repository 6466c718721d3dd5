"""What a vector backend costs per call: lock-step ``step`` calls of a fast environment, whose own step
is a tenth of a millisecond, so that the time measured is the transport's (pipes or Ray) and the
scheduling's, per call and per worker.

    python scripts/bench_vector.py --backend ray --workers 1 2 --slots-per-worker 1 8
    python scripts/bench_vector.py --backend processes --workers 1 2

With a slow engine of cost ``c`` per step (ALFWorld: scripts/bench_alfworld.py), a lock-step call of
``S`` slots on each of ``W`` workers takes about ``S * c + overhead(W, S)``: this script measures the
overhead.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

ENV_ID = "ptgpo/Household-v0"


def _vector(backend: str, slots: int, workers: int, address: str | None):
    kwargs = {"difficulty": "hard", "max_steps": 10_000}  # episodes that outlast the measurement
    if backend == "ray":
        from ptgpo_envs.ray_vector import RayVectorTextEnv, connect_ray

        connect_ray(address, num_cpus=workers)
        return RayVectorTextEnv(ENV_ID, slots, num_workers=workers, env_kwargs=kwargs)
    from ptgpo_envs.vector import InProcessVectorTextEnv, ProcessVectorTextEnv

    if backend == "in-process":
        return InProcessVectorTextEnv(ENV_ID, slots, env_kwargs=kwargs)
    return ProcessVectorTextEnv(ENV_ID, slots, num_workers=workers, env_kwargs=kwargs)


def bench(backend: str, workers: int, slots_per_worker: int, calls: int, address: str | None) -> dict:
    slots = list(range(workers * slots_per_worker))
    rng = random.Random(0)
    with _vector(backend, len(slots), workers, address) as vector:
        infos = [info for _, info in vector.reset(slots, seeds=slots)]
        for _ in range(5):  # warm-up: first calls pay for imports and connections
            infos = [step[4] for step in vector.step(slots, [rng.choice(i["admissible_actions"]) for i in infos])]
        started = time.perf_counter()
        for _ in range(calls):
            actions = [rng.choice(info["admissible_actions"]) for info in infos]
            infos = [step[4] for step in vector.step(slots, actions)]
        elapsed = time.perf_counter() - started
    return {"backend": backend, "workers": workers, "slots": len(slots), "calls": calls,
            "call_ms": round(elapsed / calls * 1000, 3), "steps_per_s": round(calls * len(slots) / elapsed, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("in-process", "processes", "ray"), default="ray")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--slots-per-worker", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--ray-address", default=None, help="a running cluster (default: a local one)")
    args = parser.parse_args(argv)
    for workers in args.workers:
        for slots in args.slots_per_worker:
            print(json.dumps(bench(args.backend, workers, slots, args.calls, args.ray_address)), flush=True)
        if args.backend == "ray" and args.ray_address is None:
            import ray

            ray.shutdown()  # the next worker count gets a cluster of its own size
    return 0


if __name__ == "__main__":
    sys.exit(main())

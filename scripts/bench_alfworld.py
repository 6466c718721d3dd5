"""Throughput of ALFWorld on parallel workers: environment steps per second and reset time per worker count.

Each configuration runs ``--slots-per-worker`` slots in each of W workers (``ProcessVectorTextEnv``, or
Ray actors with ``--backend ray``: ``RayVectorTextEnv`` on a local cluster of W CPUs, or the cluster at
``--ray-address``),
resets every slot on its own game (cold: first load of the game, PDDL translation included; warm:
the same game again), then plays ``--steps`` random admissible actions per slot in lock-step, one
``step`` call for all slots, resetting finished episodes. Results go to stdout and, with ``--out``, to a
JSON file.

    python scripts/bench_alfworld.py --data-path ~/.cache/alfworld --workers 1 2 8 --out runs/bench_alfworld.json
    python scripts/bench_alfworld.py --data-path ~/.cache/alfworld --backend ray --workers 1 2

``step_call_ms`` is the wall time of one ``step`` call for all slots. ``--backend in-process`` steps the
slots in this process, with no transport: its ``step_call_ms`` at one slot is the environment's own
cost of a step, and the difference to a worker backend's at one slot per worker is what the transport
(pipes, Ray's object store) and the scheduling cost per call.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from ptgpo_algos.files import atomic_write_text


def _vector(backend: str, slots: int, workers: int, env_kwargs: dict, address: str | None):
    if backend == "ray":
        from ptgpo_envs.ray_vector import RayVectorTextEnv, connect_ray

        connect_ray(address, num_cpus=workers)
        return RayVectorTextEnv("ptgpo/ALFWorld-v0", slots, num_workers=workers, env_kwargs=env_kwargs)
    from ptgpo_envs.vector import InProcessVectorTextEnv, ProcessVectorTextEnv

    if backend == "in-process":
        return InProcessVectorTextEnv("ptgpo/ALFWorld-v0", slots, env_kwargs=env_kwargs)
    return ProcessVectorTextEnv("ptgpo/ALFWorld-v0", slots, num_workers=workers, env_kwargs=env_kwargs)


def bench(workers: int, slots_per_worker: int, steps: int, env_kwargs: dict, seed: int, backend: str = "processes",
          address: str | None = None) -> dict:
    slots = list(range(workers * slots_per_worker))
    rng = random.Random(seed)
    started = time.perf_counter()
    with _vector(backend, len(slots), workers, env_kwargs, address) as vec:
        startup = time.perf_counter() - started
        seeds = [seed + slot for slot in slots]
        t0 = time.perf_counter()
        infos = [info for _, info in vec.reset(slots, seeds=seeds)]
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        infos = [info for _, info in vec.reset(slots, seeds=seeds)]
        warm = time.perf_counter() - t0
        done_steps, resets = 0, 0
        t0 = time.perf_counter()
        for _ in range(steps):
            actions = [rng.choice(info["admissible_actions"]) for info in infos]
            results = vec.step(slots, actions)
            done_steps += len(slots)
            finished = [slot for slot, r in zip(slots, results) if r[2] or r[3]]
            infos = [r[4] for r in results]
            if finished:
                for slot, (_, info) in zip(finished, vec.reset(finished, seeds=[seeds[s] for s in finished])):
                    infos[slot] = info
                resets += len(finished)
        elapsed = time.perf_counter() - t0
    return {
        "backend": backend,
        "workers": workers,
        "slots": len(slots),
        "worker_startup_s": round(startup, 2),
        "cold_reset_wall_s": round(cold, 2),
        "warm_reset_wall_s": round(warm, 3),
        "steps": done_steps,
        "episode_resets_during_steps": resets,
        "steps_per_s": round(done_steps / elapsed, 1),
        "step_call_ms": round(elapsed / steps * 1000, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-path", default=os.environ.get("ALFWORLD_DATA"), help="ALFWorld data root")
    parser.add_argument("--split", default="eval_out_of_distribution")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--slots-per-worker", type=int, default=1)
    parser.add_argument("--steps", type=int, default=30, help="lock-step rounds of random actions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("in-process", "processes", "ray"), default="processes")
    parser.add_argument("--ray-address", default=None, help="with --backend ray: a running cluster (default: "
                                                             "a local one of as many CPUs as workers)")
    parser.add_argument("--out", default=None, help="JSON file for the results")
    args = parser.parse_args(argv)
    if not args.data_path:
        parser.error("--data-path (or $ALFWORLD_DATA) is required")
    env_kwargs = {"split": args.split, "data_path": str(Path(args.data_path).resolve())}
    rows = []
    for workers in args.workers:
        row = bench(workers, args.slots_per_worker, args.steps, env_kwargs, args.seed, args.backend, args.ray_address)
        if args.backend == "ray" and args.ray_address is None:
            import ray

            ray.shutdown()  # the next worker count gets a cluster of its own size
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        atomic_write_text(Path(args.out), json.dumps({"cpu_count": os.cpu_count(), "results": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

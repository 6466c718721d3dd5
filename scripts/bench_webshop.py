"""Benchmark WebShop-v0: reset time, steps per second (with search), expert and random agents' scores.

    python scripts/bench_webshop.py --episodes 500 --split test [--data-path DIR] [--out results.jsonl]

The random agent picks uniformly among the admissible actions; on the search page that is the one
listed search, the instruction as query. Scores are WebShop's: mean reward ×100 ("score") and the
share of purchases with reward 1 ("success"). Prints one JSON object and, with ``--out``, appends it
to a JSONL file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from ptgpo_envs.webshop import WebShopEnv
from ptgpo_envs.webshop.data import get_catalog


def _run_agent(env: WebShopEnv, episodes: int, choose, desc: str) -> dict[str, float]:
    scores, steps, start = [], 0, time.perf_counter()
    for episode in tqdm(range(episodes), desc=desc, leave=False):
        observation, info = env.reset(seed=episode, options={"goal_index": episode % len(env.goal_indices)})
        while not env.done:
            observation, _, _, _, info = env.step(choose(env, info))
            steps += 1
        scores.append(info["score"])
    elapsed = time.perf_counter() - start
    return {
        "score": 100 * statistics.fmean(scores),
        "success": 100 * sum(s == 1.0 for s in scores) / len(scores),
        "steps": steps,
        "steps_per_s": steps / elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--split", default="test")
    parser.add_argument("--data-path", default=None, help="folder of the original WebShop files")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random agent")
    parser.add_argument("--out", type=Path, default=None, help="append the result to this JSONL file")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be positive")

    with tempfile.TemporaryDirectory() as cold_cache:
        start = time.perf_counter()
        get_catalog(args.data_path)
        catalog_s = time.perf_counter() - start
        start = time.perf_counter()
        WebShopEnv(data_path=args.data_path, split=args.split, cache_dir=cold_cache)
        index_build_s = time.perf_counter() - start
    env = WebShopEnv(data_path=args.data_path, split=args.split)
    start = time.perf_counter()
    for seed in range(200):
        env.reset(seed=seed)
    reset_ms = (time.perf_counter() - start) / 200 * 1000

    rng = random.Random(args.seed)
    result = {
        "env": "ptgpo/WebShop-v0",
        "split": args.split,
        "data": args.data_path or "bundled",
        "episodes": args.episodes,
        "catalog_load_s": catalog_s,
        "index_build_s": index_build_s,
        "reset_ms": reset_ms,
        "expert": _run_agent(env, args.episodes, lambda e, info: e.expert_action(), "expert"),
        "random": _run_agent(
            env, args.episodes, lambda e, info: rng.choice(info["admissible_actions"]), "random"
        ),
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    if args.out is not None:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

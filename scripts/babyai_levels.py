"""Every BabyAI level's difficulty: random-play success and the expert's plan lengths, as a table.

For each level of ``ptgpo/BabyAI-v0`` (or those named), plays seeds ``0..N-1`` with the uniformly
random admissible-action agent and with ``expert_action()``, and prints the random success, the
expert's success and its steps (min / median / max over the episodes it solved), with the horizon.
A level worth training a small model on has a random success of a few percent (so group-based RL sees
some wins) and short expert plans; ``--max-steps`` plays every level with a shorter horizon than its
own, which lowers random success.

    python scripts/babyai_levels.py --seeds 500
    python scripts/babyai_levels.py KeyCorridorS6R3 --seeds 500 --expert-seeds 100
    python scripts/babyai_levels.py GoToLocalS5N2 DoorKey-5x5 --seeds 100 --max-steps 20 --json levels.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from baselines.expert_agent import ExpertAgent
from baselines.random_agent import RandomAgent
from leaderboard.records import atomic_write_text
from ptgpo_algos.rollouts.evaluation import evaluate
from ptgpo_envs.babyai.levels import LEVELS, get_level

ENV_ID = "ptgpo/BabyAI-v0"


@dataclass
class LevelDifficulty:
    level: str
    horizon: int
    seeds: int
    expert_seeds: int
    random_success: float
    random_mean_length: float
    expert_success: float
    expert_steps_min: int
    expert_steps_median: float
    expert_steps_max: int
    seconds: float


def measure(
    level: str, seeds: int, expert_seeds: int, agent_seed: int = 0, max_steps: int | None = None
) -> LevelDifficulty:
    start = time.perf_counter()
    kwargs = {"level": level}
    randomly = evaluate(RandomAgent(seed=agent_seed), ENV_ID, range(seeds), kwargs, max_steps=max_steps, batch_size=50)
    expert = evaluate(ExpertAgent(), ENV_ID, range(expert_seeds), kwargs, max_steps=max_steps, batch_size=50)
    solved = [episode.length for episode in expert.episodes if episode.won] or [0]
    return LevelDifficulty(
        level=level,
        horizon=max_steps or get_level(level).horizon,
        seeds=seeds,
        expert_seeds=expert_seeds,
        random_success=randomly.success_rate,
        random_mean_length=randomly.mean_length,
        expert_success=expert.success_rate,
        expert_steps_min=min(solved),
        expert_steps_median=statistics.median(solved),
        expert_steps_max=max(solved),
        seconds=time.perf_counter() - start,
    )


def format_row(row: LevelDifficulty) -> str:
    return (
        f"| `{row.level}` | {row.horizon} | {row.random_success:.1%} | {row.expert_success:.1%} ({row.expert_seeds}) | "
        f"{row.expert_steps_min} / {row.expert_steps_median:g} / {row.expert_steps_max} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("levels", nargs="*", help=f"levels to measure (default: all {len(LEVELS)})")
    parser.add_argument("--seeds", type=int, default=500, help="episodes per agent and level (default 500)")
    parser.add_argument("--expert-seeds", type=int, help="episodes for the expert (default: --seeds); "
                        "the BabyAI bot replans in pure Python, slowly on large mazes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random agent (default 0)")
    parser.add_argument("--max-steps", type=int, help="horizon for every level (default: each level's own)")
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    expert_seeds = args.seeds if args.expert_seeds is None else args.expert_seeds
    if args.seeds < 1 or expert_seeds < 1:
        parser.error("--seeds and --expert-seeds must be at least 1")
    if args.max_steps is not None and args.max_steps < 1:
        parser.error("--max-steps must be at least 1")
    try:
        levels = [get_level(name).name for name in args.levels] or list(LEVELS)
    except ValueError as error:
        parser.error(str(error))
    print(f"| level | horizon | random success ({args.seeds} seeds) | expert success (seeds) | expert steps min / median / max |")
    print("|---|---|---|---|---|")
    rows = []
    for level in levels:
        rows.append(measure(level, args.seeds, expert_seeds, args.seed, args.max_steps))
        print(format_row(rows[-1]), flush=True)
    if args.json:
        payload = {"seeds": args.seeds, "expert_seeds": expert_seeds, "max_steps": args.max_steps, "results": [asdict(r) for r in rows]}
        atomic_write_text(args.json, json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

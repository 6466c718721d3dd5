"""``ptgpo demo``: play the fast environments with the random and the expert agent, print success."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "play environments with a random and an expert agent on N seeds and print their success rates"

#: The pure-Python environments, fast enough to play hundreds of episodes in seconds.
FAST_ENVS = ("ptgpo/Household-v0", "ptgpo/FrozenLake-v0", "ptgpo/Sokoban-v0")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo demo``'s arguments: the environments, the number of seeds, constructor kwargs and the random
    agent's seed."""
    parser.add_argument(
        "--env", action="append", dest="envs", metavar="ID",
        help=f"environment to play (repeatable; default: {', '.join(FAST_ENVS)})",
    )
    parser.add_argument("--seeds", type=int, default=100, help="episodes per agent, seeds 0..N-1 (default 100)")
    parser.add_argument("--kwargs", type=json.loads, default={}, metavar="JSON",
                        help="constructor kwargs for every environment played, e.g. '{\"size\": 8}'")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random agent (default 0)")


def _fail(message: str) -> int:
    print(f"ptgpo demo: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Play each environment with a random and an expert agent and print their success rates; the exit
    status."""
    import ptgpo_envs
    from baselines.expert_agent import ExpertAgent
    from baselines.random_agent import RandomAgent
    from ptgpo_algos.rollouts.evaluation import evaluate

    if args.seeds < 1:
        return _fail(f"--seeds must be at least 1, got {args.seeds}")
    if not isinstance(args.kwargs, dict):
        return _fail(f"--kwargs must be a JSON object of keyword arguments, got {args.kwargs!r}")
    envs = args.envs or [env_id for env_id in FAST_ENVS if env_id in ptgpo_envs.env_ids()]
    for env_id in envs:
        try:
            ptgpo_envs.check_env_kwargs(env_id, args.kwargs, "--kwargs")
        except ValueError as error:
            return _fail(str(error))
    header = ("environment", "agent", "success", "return", "length", "invalid")
    rows = []
    for env_id in envs:
        for agent in (RandomAgent(seed=args.seed), ExpertAgent()):
            result = evaluate(agent, env_id, range(args.seeds), args.kwargs, progress=True)
            rows.append((env_id, agent.name, f"{result.success_rate:.1%}", f"{result.mean_return:.3f}",
                         f"{result.mean_length:.1f}", f"{result.invalid_rate:.1%}"))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    return 0

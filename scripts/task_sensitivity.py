"""Does a policy read its task? How much its action distribution moves when only the task changes.

A diagnostic, not a training method: at states of Household episodes (reached by the expert with
random detours, from held-out seeds), compare a ``choose``-mode policy's distribution over the
admissible actions under the episode's own task with the distribution under another episode's task
(the task line and its copy in the first observation swapped, nothing else). The mean total variation
distance is 0 for a policy that ignores the task, and near 1 for one whose choice follows it. A
policy that imitates the expert must move a lot: which object to take and where to carry it depend
on the task alone.

Usage::

    OMP_NUM_THREADS=1 python scripts/task_sensitivity.py runs/easy/final_model runs/other/final_model
    OMP_NUM_THREADS=1 python scripts/task_sensitivity.py ~/.cache/ptgpo/tiny-<hash> --history-length 1

Each target is a saved policy (a run's ``final_model/``) or a model folder; its saved acting settings
are used unless ``--history-length`` overrides them. Prints one JSON line per target.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence


def sample_contexts(episodes: int, first_seed: int, seed: int, difficulty: str = "easy"):
    """Contexts (with their whole history) of Household states, and the same states under another
    episode's task. The expert plays 70 % of the steps, so states are typical of a competent policy."""
    import numpy as np

    import ptgpo_envs  # noqa: F401  (registers the environments)
    from ptgpo_envs import make_env
    from ptgpo_algos.records import Context

    rng = np.random.default_rng(seed)
    env = make_env("ptgpo/Household-v0", {"difficulty": difficulty}).unwrapped
    own: list[Context] = []
    for episode_seed in range(first_seed, first_seed + episodes):
        observation, info = env.reset(seed=episode_seed)
        history: list[tuple[str, str]] = []
        for _ in range(int(rng.integers(0, 8))):
            admissible = info["admissible_actions"]
            action = env.expert_action() if rng.random() < 0.7 else admissible[int(rng.integers(len(admissible)))]
            history.append((observation, action))
            observation, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        else:
            own.append(Context(info["task"], observation, list(info["admissible_actions"]), history))
    tasks = sorted({c.task for c in own})
    if len(tasks) < 2:
        raise ValueError("need episodes with at least two different tasks: raise --episodes")
    other = []
    for context in own:
        task = context.task
        while task == context.task:
            task = tasks[int(rng.integers(len(tasks)))]
        other.append(context.with_task(task))
    return own, other


def task_sensitivity(policy, own: Sequence, other: Sequence) -> dict[str, float]:
    """Mean total variation between the action distributions at ``own`` and ``other`` (paired), and
    the mean entropy (nats) at ``own``."""
    p, q = policy.action_distribution(own), policy.action_distribution(other)
    distances = [0.5 * float((a - b).abs().sum()) for a, b in zip(p, q)]
    entropies = [float(-(a * a.clamp_min(1e-12).log()).sum()) for a in p]
    return {"mean_tv": sum(distances) / len(distances), "mean_entropy": sum(entropies) / len(entropies),
            "states": len(distances)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="+", help="saved policies or model folders")
    parser.add_argument("--episodes", type=int, default=200, help="held-out episodes to draw states from")
    parser.add_argument("--first-seed", type=int, default=3_000_000)
    parser.add_argument("--seed", type=int, default=0, help="seed of the detours and of the task swaps")
    parser.add_argument("--history-length", type=int, help="override the saved history length")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.episodes < 2:
        parser.error("--episodes must be at least 2")

    from ptgpo_algos.policy.hf import CausalLMPolicy

    own, other = sample_contexts(args.episodes, args.first_seed, args.seed)
    for target in args.targets:
        settings = {"mode": "choose"}
        if args.history_length is not None:
            settings["history_length"] = args.history_length
        policy = CausalLMPolicy.from_pretrained(target, **settings)
        print(json.dumps({"target": target, **task_sensitivity(policy, own, other)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

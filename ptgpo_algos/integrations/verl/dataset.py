"""The dataset of verl's default-trainer route: one row per leaf, a group's rows one after another.

verl's ``RLHFDataset`` reads a parquet file of prompts; with the ``ptgpo_tree_leaf`` agent loop
(:mod:`ptgpo_algos.integrations.verl.leaves`) each row is one sample of a group: the episode
(``env_id``, ``seed``, ``env_kwargs``), the tree (:class:`~ptgpo_algos.integrations.verl.tree.TreeSpec`'s
keys) and the group's key in ``extra_info``, the loop's name in ``agent_name``. A group's
``group_size`` rows come one after another, so that verl's dataloader (``data.shuffle=False``, a
``data.train_batch_size`` that the group size divides) keeps every group in one batch; the groups are
shuffled here, once, by ``--shuffle-seed``.

``python -m ptgpo_algos.integrations.verl.dataset --env-id ptgpo/ALFWorld-v0 --seeds 0:64 --group-size 8
--env-kwargs '{"split": "train"}' --tree '{"initial_rollouts": 2}' --out train.parquet`` writes one.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Mapping, Sequence

import numpy as np

from ptgpo_algos.files import atomic_path
from ptgpo_algos.integrations.verl.agent_loop import AGENT_NAME
from ptgpo_algos.integrations.verl.leaves import GROUP_KEY, LEAF_AGENT_NAME
from ptgpo_algos.integrations.verl.tree import tree_spec

__all__ = ["group_rows", "main", "write_dataset"]


def group_rows(env_id: str, seeds: Sequence[int], group_size: int, *, env_kwargs: Mapping[str, Any] | None = None,
               tree: Mapping[str, Any] | None = None, shuffle_seed: int | None = 0,
               agent_name: str = LEAF_AGENT_NAME) -> list[dict[str, Any]]:
    """``group_size`` rows per seed (one group each: the task instance the group's leaves play), the
    groups in an order shuffled by ``shuffle_seed`` (None: the seeds' order). ``tree`` holds the
    tree's keys other than ``group_size``; a bad key raises ``ValueError`` naming it. ``agent_name``
    ``ptgpo_env`` plays each row as one linear episode with no group (a validation set: verl's
    validation computes no advantages, so it grows no trees)."""
    if agent_name not in (LEAF_AGENT_NAME, AGENT_NAME):
        raise ValueError(f"agent_name: {LEAF_AGENT_NAME} or {AGENT_NAME}, got {agent_name!r:.80}")
    tree = {**dict(tree or {}), "group_size": group_size}
    tree_spec(tree, {"logprobs": True})  # checks the keys and values now, not in verl's workers
    order = list(seeds)
    if shuffle_seed is not None:
        np.random.default_rng(shuffle_seed).shuffle(order)
    rows = []
    for seed in order:
        info = {"env_id": env_id, "seed": int(seed), "tree": tree, GROUP_KEY: f"{env_id}/{seed}"}
        if env_kwargs:  # parquet cannot store an empty mapping; the loop reads a missing one as {}
            info["env_kwargs"] = dict(env_kwargs)
        rows += [{"data_source": env_id, "agent_name": agent_name,
                  # verl's dataset reads a prompt; the agent loop writes each turn's own from the environment.
                  "prompt": [{"role": "user", "content": f"{env_id} seed {seed}"}],
                  "reward_model": {"style": "rule", "ground_truth": ""},
                  "extra_info": {**info, "index": len(rows) + k}} for k in range(group_size)]
    return rows


def write_dataset(rows: Sequence[Mapping[str, Any]], path: str) -> None:
    """``rows`` as the parquet file verl's ``data.train_files`` reads, written atomically."""
    import pandas as pd

    with atomic_path(path) as tmp:
        pd.DataFrame(list(rows)).to_parquet(tmp, index=False)


def _seeds(text: str) -> list[int]:
    if ":" in text:
        low, high = (int(part) for part in text.split(":", 1))
        return list(range(low, high))
    return [int(part) for part in text.split(",")]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring): 0 when written, 2 for a bad argument (the file is
    left as it was)."""
    parser = argparse.ArgumentParser(prog="python -m ptgpo_algos.integrations.verl.dataset",
                                     description="Write the parquet dataset of verl's default-trainer route.")
    parser.add_argument("--env-id", required=True)
    parser.add_argument("--seeds", required=True, help="LOW:HIGH or a comma-separated list: one group per seed")
    parser.add_argument("--group-size", type=int, required=True)
    parser.add_argument("--env-kwargs", default="{}", help="a JSON object of the environment's keyword arguments")
    parser.add_argument("--tree", default="{}", help="a JSON object of the tree's keys (initial_rollouts, branch...)")
    parser.add_argument("--shuffle-seed", type=int, default=0)
    parser.add_argument("--agent-name", default=LEAF_AGENT_NAME,
                        help=f"{LEAF_AGENT_NAME} (training: a group's leaves) or {AGENT_NAME} "
                             "(validation: linear episodes)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        seeds = _seeds(args.seeds)
        env_kwargs, tree = json.loads(args.env_kwargs), json.loads(args.tree)
        if not isinstance(env_kwargs, dict) or not isinstance(tree, dict):
            raise ValueError("--env-kwargs and --tree: JSON objects, e.g. '{\"split\": \"train\"}'")
        rows = group_rows(args.env_id, seeds, args.group_size, env_kwargs=env_kwargs, tree=tree,
                          shuffle_seed=args.shuffle_seed, agent_name=args.agent_name)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    write_dataset(rows, args.out)
    print(f"{args.out}: {len(rows)} rows, {len(seeds)} groups of {args.group_size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

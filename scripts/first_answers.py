"""What a model writes in ``generate`` mode: the first answer of each environment's first held-out episode.

For each response budget (``--max-new-tokens``, several allowed) and environment, one answer greedy and one
sampled at temperature 1 (the generator seeded by ``--seed``), with whether it holds an ``<action>`` tag,
what it parses into and whether that is admissible. The zero-shot page quotes these answers beside the
invalid-action rates of ``configs/bench_zero_shot_smollm2_generate.yaml``.

Usage: ``python scripts/first_answers.py --out answers.json [--model smollm2] [--envs frozenlake webshop]
[--max-new-tokens 64 256]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: The environments by label: id and keyword arguments (the zero-shot tables' settings).
ENVIRONMENTS = {
    "household-easy": ("ptgpo/Household-v0", {"difficulty": "easy"}),
    "frozenlake": ("ptgpo/FrozenLake-v0", {}),
    "multiroom": ("ptgpo/BabyAI-v0", {"level": "MultiRoom-N2-S4"}),
    "webshop": ("ptgpo/WebShop-v0", {"split": "test"}),
}
#: The first held-out seed of the benchmark's evaluation range.
FIRST_HELD_OUT = 1_000_000


def first_answers(model: str, labels: list[str], budgets: list[int], seed: int) -> list[dict]:
    """One row per (budget, environment, greedy or sampled): the answer and how it parses."""
    import torch

    from ptgpo_algos.policy import load_policy, parse_response
    from ptgpo_algos.records import Context
    from ptgpo_envs import make_env

    rows = []
    for budget in budgets:
        policy = load_policy(model, mode="generate", history_length=0, max_new_tokens=budget)
        for label in labels:
            env_id, kwargs = ENVIRONMENTS[label]
            env = make_env(env_id, kwargs)
            observation, info = env.reset(seed=FIRST_HELD_OUT)
            context = Context(info["task"], observation, list(info["admissible_actions"]))
            for greedy in (True, False):
                generator = torch.Generator().manual_seed(seed)
                [decision] = policy.decide([context], greedy=greedy, generator=generator,
                                           temperature=None if greedy else 1.0)
                parsed = parse_response(decision.text)
                rows.append({"env": label, "max_new_tokens": budget, "greedy": greedy,
                             "tokens": len(decision.response_ids), "has_action_tag": "<action>" in decision.text.lower(),
                             "action": parsed.action, "error": parsed.error,
                             "admissible": parsed.action in info["admissible_actions"], "text": decision.text})
            env.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--model", default="smollm2", help="a model name, folder or .gguf file [smollm2]")
    parser.add_argument("--envs", nargs="+", default=list(ENVIRONMENTS), choices=list(ENVIRONMENTS), metavar="LABEL",
                        help=f"environments ({', '.join(ENVIRONMENTS)}; default: all)")
    parser.add_argument("--max-new-tokens", nargs="+", type=int, default=[64, 256], metavar="N",
                        help="response budgets [64 256]")
    parser.add_argument("--seed", type=int, default=0, help="the sampling generator's seed [0]")
    args = parser.parse_args(argv)
    if any(budget < 1 for budget in args.max_new_tokens):
        parser.error("--max-new-tokens: every budget must be at least 1")
    from ptgpo_algos.files import atomic_write_text

    rows = first_answers(args.model, args.envs, args.max_new_tokens, args.seed)
    for row in rows:
        print(f"{row['env']:>15} {row['max_new_tokens']:>4} {'greedy' if row['greedy'] else 't=1':>6} "
              f"{row['tokens']:>4} tokens, action tag: {row['has_action_tag']}: {row['text'][:80]!r}")
    atomic_write_text(args.out, json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How far can a policy get by imitating the expert? Behaviour cloning on expert decisions of Household.

A reference for RL, not a training method of the suite: what a model of a given size, acting on a
given prompt (history length), reaches when every label is right. The expert knows what the agent
has seen so far (``expert_action()``), so its decisions can in principle be imitated from the
episode's history, but not from a truncated one. Give it enough demonstrations: with 400 episodes
(2,656 decisions) the easy config's model overfits and stalls near 0.7, with the default 4,000 it
reaches ~0.9 (docs/results/household-tiny-model.md has the curves).

The policy is built exactly as ``ptgpo train`` builds it from ``--config`` (plus ``--set`` overrides;
``choose`` mode), trained by minimising the negative log-probability of the expert's action under the
softmax over admissible actions (the quantity PPO trains in ``choose`` mode), ``--batch`` decisions per
AdamW step, and evaluated with the run's protocol (held-out seeds, ``eval_temperature``) every
``--eval-every`` steps. Writes one JSON row per evaluation to ``--out`` (held-out success, per task
type, and the mean training loss since the previous row), and with ``--save DIR`` the final policy.

Usage::

    OMP_NUM_THREADS=1 python scripts/imitation_ceiling.py                                    # the easy config
    OMP_NUM_THREADS=1 python scripts/imitation_ceiling.py --set history_length=2 --steps 1500
    OMP_NUM_THREADS=1 python scripts/imitation_ceiling.py --set 'tiny={hidden_size: 128, num_attention_heads: 4, intermediate_size: 256}'
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/train_household_easy_gigpo.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="TrainConfig field override; VALUE is parsed as YAML (repeatable)")
    parser.add_argument("--demo-seeds", type=int, default=4000, help="expert episodes on training seeds 0..N-1")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--eval-every", type=int, default=200)
    parser.add_argument("--out", default="runs/imitation_ceiling.jsonl")
    parser.add_argument("--save", metavar="DIR", help="save the final policy there (a model folder for ptgpo evaluate)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    import numpy as np
    import torch

    from ptgpo_algos.files import atomic_write_text
    from ptgpo_harness.commands.train import parse_set
    from ptgpo_algos.config import TrainConfig
    from ptgpo_envs import make_env
    from ptgpo_algos.records import Context
    from ptgpo_algos.policy.backends import build_policy
    from ptgpo_algos.training.run_evaluation import evaluate_policy

    try:
        config = TrainConfig.from_yaml(args.config, parse_set(args.set))
    except ValueError as error:
        parser.error(str(error))
    if config.policy.mode != "choose" or not config.env.id.startswith("ptgpo/Household"):
        parser.error("imitation needs choose mode on ptgpo/Household-v0 (its expert_action())")
    torch.manual_seed(config.run.seed)
    policy = build_policy(config, "cpu")

    contexts, labels = [], []
    for seed in range(args.demo_seeds):
        env = make_env(config.env.id, config.env.kwargs, config.env.max_steps)
        observation, info = env.reset(seed=seed)
        history: list[tuple[str, str]] = []
        done = False
        while not done:
            action = env.unwrapped.expert_action()
            admissible = list(info["admissible_actions"])
            contexts.append(Context(info["task"], observation, admissible, list(history)))
            labels.append(admissible.index(action))
            history.append((observation, action))
            observation, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
    print(f"{len(contexts)} expert decisions from {args.demo_seeds} episodes", flush=True)

    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr)
    rng = np.random.default_rng(config.run.seed)
    rows: list[dict] = []
    started = time.time()

    def record(step: int, loss: float | None) -> None:
        summary = evaluate_policy(policy, config)
        rows.append({"step": step, "mean_loss": loss, "success": summary["success"],
                     "success_by_type": summary["success_by_type"], "wall_time_s": time.time() - started})
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(args.out), "".join(json.dumps(r) + "\n" for r in rows))
        print(f"step {step:5d}  loss {loss if loss is None else round(loss, 3)}  held-out success "
              f"{summary['success']:.3f}  ({time.time() - started:.0f} s)", flush=True)

    record(0, None)
    losses: list[float] = []
    for step in range(1, args.steps + 1):
        index = rng.choice(len(contexts), size=min(args.batch, len(contexts)), replace=False)
        # decide() builds the prompts and candidates; the chosen index is then set to the expert's.
        decisions = policy.decide([contexts[i] for i in index], greedy=True)
        for decision, i in zip(decisions, index):
            decision.choice = labels[i]
        loss = -policy.score(decisions).logprobs[:, 0].mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if step % args.eval_every == 0 or step == args.steps:
            record(step, sum(losses) / len(losses))
            losses = []
    if args.save:
        policy.save_pretrained(args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())

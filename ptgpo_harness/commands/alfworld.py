"""``ptgpo alfworld``: evaluate agents on ALFWorld's official splits, and generate training games.

Examples::

    ptgpo alfworld eval --split eval_out_of_distribution --agent expert --data-path ../shared/alfworld/json_2.1.1 --out runs/alfworld
    ptgpo alfworld eval --split eval_in_distribution --agent random --seed 0 --out runs/alfworld
    ptgpo alfworld eval --split eval_in_distribution --agent runs/ptgpo --out runs/alfworld
    ptgpo alfworld generate 600            # the train split's default set (~/.cache/ptgpo/alfworld/generated)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

HELP = "evaluate an agent on ALFWorld's evaluation splits (per task type), or generate training games"

ENV_ID = "ptgpo/ALFWorld-v0"
SPLIT_LABELS = {
    "eval_in_distribution": "ALFWorld-ID",
    "eval_out_of_distribution": "ALFWorld-OOD",
    "valid_train": "ALFWorld-valid_train",
    "train": "ALFWorld-train",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo alfworld``'s actions: ``eval`` (play a split) and ``generate`` (make training games)."""
    sub = parser.add_subparsers(dest="alfworld_command", metavar="ACTION", required=True)

    ev = sub.add_parser("eval", help="play every game of a split with an agent; report success per task type")
    ev.add_argument("--split", default="eval_out_of_distribution", choices=list(SPLIT_LABELS))
    ev.add_argument("--agent", default="expert", help="'expert', 'random', a training run folder or a saved model folder")
    ev.add_argument("--data-path", default=None, help="ALFWorld data root or its json_2.1.1 folder (default $ALFWORLD_DATA)")
    ev.add_argument("--episodes", type=int, default=None, help="play only the first N games (default: all)")
    ev.add_argument("--max-steps", type=int, default=50)
    ev.add_argument("--seed", type=int, default=0, help="seed of the random agent / the policy's sampling")
    ev.add_argument("--batch-size", type=int, default=8, help="episodes played side by side (LLM batching)")
    ev.add_argument("--sample", action="store_true", help="sample a checkpoint's actions instead of greedy")
    ev.add_argument("--env-label", default=None, help="leaderboard column label (default ALFWorld-ID / ALFWorld-OOD)")
    ev.add_argument("--out", default=None, help="results directory: a leaderboard record + per-episode JSONL")

    gen = sub.add_parser("generate", help="generate N new ALFWorld games (all six task types), planner-checked")
    gen.add_argument("count", type=int)
    gen.add_argument(
        "--out",
        default=None,
        help="data root to write <out>/train/<task folder>/<trial>/ into (default: the cache that "
        "ALFWorld-v0's train split reads without a data path, ~/.cache/ptgpo/alfworld/generated)",
    )
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument(
        "--task-types", nargs="+", default=None, help="only these task types (Pick Look Clean Heat Cool Pick2)"
    )


def run(args: argparse.Namespace) -> int:
    """Run the chosen ``ptgpo alfworld`` action; its exit status."""
    if args.alfworld_command == "eval":
        return _evaluate(args)
    return _generate(args)


def _make_agent(spec: str, seed: int, sample: bool):
    if spec == "expert":
        from baselines.expert_agent import ExpertAgent

        return ExpertAgent(), "baseline"
    if spec == "random":
        from baselines.random_agent import RandomAgent

        return RandomAgent(seed=seed), "baseline"
    if not Path(spec).exists():
        raise SystemExit(f"--agent must be 'expert', 'random', a training run folder or a saved model folder; "
                         f"{spec!r} does not exist")
    from ptgpo_harness.commands.evaluate import load_target
    from ptgpo_algos.device import resolve_device
    from ptgpo_algos.rollouts.agent import PolicyAgent

    policy, _ = load_target(spec, resolve_device("auto", where="--agent"))
    return PolicyAgent(policy, greedy=not sample, name=Path(spec).name, seed=seed), "rl"


def _evaluate(args: argparse.Namespace) -> int:
    from ptgpo_harness.commands.evaluate import print_summary
    from ptgpo_algos.rollouts.evaluation import evaluate
    from ptgpo_envs.alfworld import ALFWorldEnv

    env_kwargs = {"split": args.split}
    if args.data_path is not None:
        env_kwargs["data_path"] = str(Path(args.data_path).expanduser().resolve())
    try:
        games = ALFWorldEnv(**env_kwargs).games
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"ptgpo alfworld eval: {error}")
    count = len(games) if args.episodes is None else min(args.episodes, len(games))
    if count < 1:
        raise SystemExit("--episodes must be at least 1")
    agent, kind = _make_agent(args.agent, args.seed, args.sample)

    started = time.time()
    result = evaluate(
        agent,
        ENV_ID,
        seeds=range(count),
        env_kwargs=env_kwargs,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        progress=True,
    )
    wall = time.time() - started
    print_summary(f"{agent.name} on {args.split} ({wall:.0f} s)", result)

    if args.out is not None:
        _write_results(args, agent.name, kind, games, result, count, wall)
    return 0


def _write_results(args: argparse.Namespace, name: str, kind: str, games, result, count: int, wall: float) -> None:
    """A leaderboard record of the evaluation, and every episode as JSON lines beside it."""
    from leaderboard.records import ResultRecord, cell_name, write_record
    from ptgpo_algos.files import atomic_write_text

    summary = result.summary()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    label = args.env_label or SPLIT_LABELS[args.split]
    record = ResultRecord(
        method=name,
        method_kind=kind,
        env_id=ENV_ID,
        env_label=label,
        env_kwargs={"split": args.split, "max_steps": args.max_steps},
        seed=args.seed,
        status="ok",
        eval_episodes=count,
        final_success=summary["success"],
        best_success=summary["success"],
        success_by_type=summary["success_by_type"],
        final_return=summary["return"],
        wall_time_s=wall,
        config={"agent": args.agent, "games": count, "batch_size": args.batch_size},
        source=f"ptgpo alfworld eval --split {args.split} --agent {args.agent}",
    )
    path = write_record(out, record)
    episodes_path = out / "episodes" / f"{cell_name(label, name, args.seed)}.jsonl"
    rows = [dict(episode, gamefile=games[episode["seed"]].path) for episode in result.to_dict()["per_episode"]]
    atomic_write_text(episodes_path, "".join(json.dumps(row) + "\n" for row in rows))
    print(f"record: {path}\nepisodes: {episodes_path}")


def _generate(args: argparse.Namespace) -> int:
    from ptgpo_envs.alfworld.data import default_generated_root
    from ptgpo_envs.alfworld.generator import generate_games

    out = Path(args.out).expanduser() if args.out else default_generated_root()
    try:
        paths = generate_games(args.count, out, seed=args.seed, task_types=args.task_types, progress=True)
    except ValueError as error:
        raise SystemExit(f"ptgpo alfworld generate: {error}")
    print(f"wrote {len(paths)} planner-checked games under {out / 'train'}")
    return 0

"""``ptgpo evaluate``: play a trained policy on held-out seeds and report success, per task type.

Examples::

    ptgpo evaluate runs/household-gigpo                       # the run's own evaluation, again
    ptgpo evaluate runs/household-gigpo --episodes 256 --first-seed 2000000 --temperature 1.0
    ptgpo evaluate runs/household-gigpo/final_model --env ptgpo/Household-v0 --difficulty hard --temperature 0
    ptgpo evaluate ~/.cache/ptgpo/tiny-<hash> --env ptgpo/Household-v0 --difficulty easy --history-length 1
    ptgpo evaluate smollm2 --env ptgpo/FrozenLake-v0 --episodes 8         # a pretrained model, zero-shot
    ptgpo evaluate runs/household-gigpo --trials 8            # each task 8 times: pass@k and pass^k

A run folder (the ``--out`` of ``ptgpo train``) brings its environment, evaluation seeds and evaluation
temperature; any of them can be overridden, and it acts as it was trained. A saved model folder
(or a pretrained model's name, :mod:`ptgpo_algos.policy.pretrained`) needs ``--env``; it acts with the settings saved with it (``ptgpo_policy.json``), else the loader's
defaults, and ``--history-length`` overrides how many observation/action pairs its prompts show (to
evaluate the untrained tiny model as a config with ``history_length: 1`` acts, say).

``--trials K`` plays the same panel of held-out tasks K times, trial ``t`` sampling with seed
``--seed + t`` (the first trial is the evaluation without ``--trials``), and reports the success rate,
pass@k and pass^k for k = 1..K with 95 % intervals over the tasks (:mod:`leaderboard.passk`). Trials
differ only in the policy's sampling, so they need a temperature above 0.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

#: The most trials of one panel: pass^k's interest lies in k up to 8 or 32; beyond this, a mistyped count.
MAX_TRIALS = 1000

HELP = "evaluate a trained policy (a run folder or a saved model) on held-out seeds of an environment"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo evaluate``'s arguments: what to evaluate, and the protocol settings that override the run's."""
    parser.add_argument("target", help="a training run folder (final_model/ or checkpoint.pt), a saved model folder, "
                        "or a pretrained model's name or .gguf file (untrained: its zero-shot success)")
    parser.add_argument("--env", help="environment id (default: the run's)")
    parser.add_argument("--difficulty", help="shortcut for the environment's difficulty keyword (Household)")
    parser.add_argument("--max-steps", type=int, help="episode step limit (default: the run's / the environment's)")
    parser.add_argument("--episodes", type=int, help="number of held-out seeds (default: the run's evaluation seeds, else 64)")
    parser.add_argument("--first-seed", type=int, help="first held-out seed (default 1,000,000, the evaluation range)")
    parser.add_argument("--temperature", type=float,
                        help="sample at this temperature; 0 = greedy (default: the run's evaluation protocol)")
    parser.add_argument("--seed", type=int, help="seed of the sampling generator (default: the run's seed, else 0)")
    parser.add_argument("--history-length", type=int,
                        help="a model folder: observation/action pairs in its prompts (default: as saved, else 2)")
    parser.add_argument("--batch-size", type=int, help="episodes played side by side (default: the run's, else 64)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto [auto]")
    parser.add_argument("--trials", type=int, default=1,
                        help="play each held-out task K times (sampling seeds --seed .. --seed+K-1) and report "
                             "pass@k and pass^k for k = 1..K [1]")
    parser.add_argument("--record", help="with --trials: add pass@k and pass^k to this result record (a benchmark "
                        "cell's RESULTS/<cell>.json, the run being RESULTS/runs/<cell>): the leaderboard's columns")
    parser.add_argument("--out", help="write the summary and every episode to this JSON file (atomically)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _fail(message: str) -> int:
    print(f"ptgpo evaluate: {message}", file=sys.stderr)
    return 2


@dataclass
class _Plan:
    """What to play, resolved from the flags and the run's config before any model is loaded."""

    is_run: bool
    env_id: str
    env_kwargs: dict
    max_steps: int | None
    seeds: list[int]
    temperature: float
    seed: int
    batch_size: int
    device: str


def _check_flags(args: argparse.Namespace) -> None:
    from ptgpo_algos.config import MAX_STEPS
    from ptgpo_algos.rollouts.settings import MAX_EPISODES_PER_ITERATION as MAX_EPISODES
    from ptgpo_algos.training.settings import MAX_SEED

    from ptgpo_algos.policy.pretrained import is_pretrained_source

    if not Path(args.target).is_dir() and not is_pretrained_source(args.target):
        raise ValueError(f"{args.target!r} is not a folder: pass a training run folder, a saved model folder or a "
                         "pretrained model's name (`ptgpo models list`)")
    checks = [
        (args.episodes is None or 1 <= args.episodes <= MAX_EPISODES,
         f"--episodes must be in [1, {MAX_EPISODES}], got {args.episodes}"),
        (args.temperature is None or (math.isfinite(args.temperature) and args.temperature >= 0),
         f"--temperature must be a number >= 0 (0 = greedy), got {args.temperature}"),
        (args.first_seed is None or args.first_seed >= 0,
         f"--first-seed must be >= 0 (environment seeds are non-negative), got {args.first_seed}"),
        (args.seed is None or 0 <= args.seed <= MAX_SEED, f"--seed must be in [0, {MAX_SEED}], got {args.seed}"),
        (args.max_steps is None or 1 <= args.max_steps <= MAX_STEPS,
         f"--max-steps must be in [1, {MAX_STEPS}], got {args.max_steps}"),
        (args.batch_size is None or 1 <= args.batch_size <= MAX_EPISODES,
         f"--batch-size must be in [1, {MAX_EPISODES}], got {args.batch_size}"),
        (args.history_length is None or args.history_length >= 0,
         f"--history-length must be >= 0, got {args.history_length}"),
        (1 <= args.trials <= MAX_TRIALS, f"--trials must be in [1, {MAX_TRIALS}], got {args.trials}"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def _plan(args: argparse.Namespace) -> _Plan:
    """The flags over the run's own evaluation (or a model folder's defaults), every part checked."""
    from ptgpo_algos.rollouts.settings import EVAL_SEED_BASE, default_evaluation_temperature
    from ptgpo_algos.training.settings import MAX_SEED
    from ptgpo_algos.device import resolve_device
    from ptgpo_algos.files import check_writable
    from ptgpo_algos.policy.tiny import TINY_MARKER
    from ptgpo_algos.training.run_folder import is_run_folder, load_run_config
    from ptgpo_envs import check_env_kwargs

    _check_flags(args)
    target = Path(args.target)
    is_run = is_run_folder(target)
    if not is_run and args.env is None:
        raise ValueError(f"{args.target!r} is a model folder, not a run folder: say which environment with --env")
    if is_run and args.history_length is not None:
        raise ValueError("--history-length applies to a model folder; a run acts with the history it was trained "
                         f"with: pass {str(target / 'final_model')!r} to override it")
    plan = _Plan(is_run, args.env, {}, args.max_steps, [], args.temperature, args.seed, args.batch_size,
                 resolve_device(args.device, where="--device"))
    seeds = None
    if is_run:
        config = load_run_config(target)
        if plan.env_id is None or plan.env_id == config.env.id:
            plan.env_id, plan.env_kwargs = config.env.id, config.env.evaluation_kwargs
            plan.max_steps = plan.max_steps if plan.max_steps is not None else config.env.max_steps
        seeds = config.evaluation.seeds
        plan.temperature = plan.temperature if plan.temperature is not None else config.evaluation.temperature
        plan.seed = plan.seed if plan.seed is not None else config.run.seed
        plan.batch_size = plan.batch_size or config.evaluation.batch_size
    elif plan.temperature is None:
        plan.temperature = default_evaluation_temperature(tiny=(target / TINY_MARKER).exists())
    if args.difficulty is not None:
        plan.env_kwargs = {**plan.env_kwargs, "difficulty": args.difficulty}
    if seeds is None or args.episodes is not None or args.first_seed is not None:
        first = args.first_seed if args.first_seed is not None else EVAL_SEED_BASE
        seeds = list(range(first, first + (args.episodes or 64)))
    plan.seeds, plan.seed, plan.batch_size = seeds, plan.seed or 0, plan.batch_size or 64
    kwargs = {**plan.env_kwargs, **({"max_steps": plan.max_steps} if plan.max_steps is not None else {})}
    try:
        check_env_kwargs(plan.env_id, kwargs, "--env")
    except ValueError as error:
        raise ValueError(f"{error} (`ptgpo envs` lists the environments)") from None
    if args.trials > 1 and plan.temperature == 0.0:
        raise ValueError(f"--trials {args.trials} at temperature 0 plays the same greedy episodes {args.trials} times; "
                         "give --temperature above 0 (trials differ only in the policy's sampling)")
    if args.trials > 1 and plan.seed + args.trials - 1 > MAX_SEED:
        raise ValueError(f"--seed {plan.seed} with --trials {args.trials} passes the largest sampling seed {MAX_SEED}; "
                         "give a smaller --seed")
    if args.record is not None:
        _check_record(args.record, args.trials, plan.env_id)
    if args.out:
        check_writable(args.out, "--out")
    return plan


def _check_record(path: str, trials: int, env_id: str) -> None:
    """``--record`` names a readable result record of this environment, and trials to add to it."""
    from leaderboard.records import read_record
    from ptgpo_algos.files import check_writable

    if trials < 2:
        raise ValueError("--record adds pass@k and pass^k to a result record: give --trials 2 or more")
    try:
        record = read_record(path)
    except ValueError as error:
        raise ValueError(f"--record {path!r}: {error}") from None
    if record.env_id != env_id:
        raise ValueError(f"--record {path!r} is a record of {record.env_id}, not of {env_id}: give the record of "
                         "this run's benchmark cell")
    check_writable(path, "--record")


def load_target(target: str | Path, device: str, history_length: int | None = None):
    """The policy of a training run folder (as it was trained) or of a saved model folder (its saved
    settings, ``history_length`` overriding its prompts' history), and where it came from: the one place
    the commands that evaluate a policy resolve it."""
    from ptgpo_algos.policy import load_policy
    from ptgpo_algos.training.run_folder import is_run_folder
    from ptgpo_algos.training.run_evaluation import load_trained_policy

    if is_run_folder(target):
        policy, _, source = load_trained_policy(target, device)
        return policy, source
    overrides = {"history_length": history_length} if history_length is not None else {}
    return load_policy(target, device=device, **overrides), str(target)


def print_summary(head: str, result) -> None:
    """One evaluation's summary lines: success, return, length, invalid actions, success per task type."""
    summary = result.summary()
    counts: dict[str, int] = {}
    for episode in result.episodes:
        counts[episode.task_type] = counts.get(episode.task_type, 0) + 1
    print(f"{head}: {summary['success']:.1%} success over {len(result.episodes)} episodes")
    print(f"  return {summary['return']:.3f}, length {summary['length']:.1f}, invalid actions {summary['invalid_rate']:.1%}")
    for task_type, rate in (summary.get("success_by_type") or {}).items():
        print(f"  {task_type:<8} {rate:6.1%}  ({counts.get(task_type, 0)} episodes)")


def trial_figures(results, key):
    """pass@k and pass^k (:func:`leaderboard.passk.pass_k`) of evaluations of the same seeds, one per trial."""
    from leaderboard.passk import pass_k

    outcomes = [[result.episodes[task].won for result in results] for task in range(len(results[0].episodes))]
    return pass_k(outcomes, key=key)


def _add_to_record(path: str, trials) -> None:
    """Write the trials' points into the result record at ``path`` (atomically, the rest unchanged)."""
    import dataclasses

    from leaderboard.records import read_record, write_record

    figures = {"trials": trials.trials, "tasks": trials.tasks,
               "pass_at": {str(k): e.point for k, e in trials.pass_at.items()},
               "pass_hat": {str(k): e.point for k, e in trials.pass_hat.items()}}
    write_record(path, dataclasses.replace(read_record(path), trials=figures))
    print(f"added pass@k and pass^k of {trials.trials} trials to {path}")


def print_trials(trials) -> None:
    """The success rate, pass@k and pass^k of the trials, with their intervals."""
    def shown(estimate) -> str:
        interval = f" [{estimate.low:.1%}, {estimate.high:.1%}]" if estimate.has_interval else ""
        return f"{estimate.point:6.1%}{interval}"

    print(f"  {trials.trials} trials of {trials.tasks} tasks: success {shown(trials.success)} (95 % over tasks)")
    for k in trials.pass_at:
        print(f"  k={k:<3} pass@k {shown(trials.pass_at[k])}   pass^k {shown(trials.pass_hat[k])}")


def run(args: argparse.Namespace) -> int:
    """Evaluate a run folder or a saved model on held-out seeds and print (and save) the result; the exit
    status."""
    from ptgpo_algos.rollouts.evaluation import evaluate
    from ptgpo_algos.files import atomic_write_text
    from ptgpo_algos.rollouts.agent import PolicyAgent

    # Everything but the weights first, so that a bad flag or environment fails before a model is loaded.
    try:
        plan = _plan(args)
        policy, source = load_target(args.target, plan.device, None if plan.is_run else args.history_length)
    except (ValueError, OSError) as error:
        return _fail(str(error))
    started = time.time()
    results = []
    for trial in range(args.trials):
        agent = PolicyAgent.at_temperature(policy, plan.temperature, name=Path(args.target).name,
                                           seed=plan.seed + trial)
        results.append(evaluate(agent, plan.env_id, plan.seeds, plan.env_kwargs, max_steps=plan.max_steps,
                                batch_size=plan.batch_size, progress=not args.no_progress))
    result = results[0]
    wall = time.time() - started
    protocol = "greedy" if plan.temperature == 0.0 else f"sampled at {plan.temperature:g}"
    print_summary(f"{source} on {plan.env_id} {plan.env_kwargs or ''} (seeds {plan.seeds[0]}..{plan.seeds[-1]}, "
                  f"{protocol}, {wall:.0f} s)", result)
    trials = trial_figures(results, key=(source, plan.env_id)) if args.trials > 1 else None
    if trials is not None:
        print_trials(trials)
    if args.record is not None:
        _add_to_record(args.record, trials)
    if args.out:
        payload = {
            "source": source, "env_id": plan.env_id, "env_kwargs": plan.env_kwargs, "max_steps": plan.max_steps,
            "temperature": plan.temperature, "seed": plan.seed, "history_length": policy.prompts.history_length,
            "wall_time_s": wall, **result.to_dict(),
            **({"trials": trials.to_dict(),
                "trial_success": [[e.won for e in r.episodes] for r in results]} if trials is not None else {}),
        }
        atomic_write_text(args.out, json.dumps(payload, indent=1))
        print(f"wrote {args.out}")
    return 0

"""``ptgpo train``: train a policy with one of the group estimators (see :mod:`ptgpo_algos.training.trainer`).

The options are the config's own fields: every field with a ``flag`` in its metadata
(:func:`ptgpo_algos.config.cli_fields`) is an option with that field's help, and ``--set KEY=VALUE``
sets any other (a dotted path such as ``optim.lr`` or a flat name such as ``learning_rate``). The help
ends with every rollout strategy's own settings (``rollouts.<name>.<key>``), built-in and plugin alike.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HELP = "train a policy (tiny model or a Hugging Face model) with any registered advantage estimator"
#: The title of the help's last section, the rollout strategies' settings (:func:`strategy_settings_help`).
STRATEGY_SETTINGS = "rollout strategies' settings (set with --set rollouts.NAME.KEY=VALUE):"


class _StrategySettingsFormatter(argparse.RawDescriptionHelpFormatter):
    """Fills in the strategies' settings under their title when the help is shown: reading them when the
    parser is built would load every strategy plugin on every ``ptgpo`` command line."""

    def add_text(self, text: str | None) -> None:
        super().add_text(strategy_settings_help() if text == STRATEGY_SETTINGS else text)


def strategy_settings_help() -> str:
    """The rollout strategies with settings of their own (the registry's, plugins' too), each setting
    as ``rollouts.<name>.<key> (default): help``; imports no strategy's collection."""
    import shutil
    import textwrap

    from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES

    width = max(shutil.get_terminal_size().columns - 2, 40)
    lines = [STRATEGY_SETTINGS]
    for name, strategy in ROLLOUT_STRATEGIES.items():
        settings = strategy.documented_settings()
        if not settings:
            continue
        origin = ROLLOUT_STRATEGIES.origins.get(name)
        summary = f": {strategy.summary}" if strategy.summary else ""
        lines.append(f"  {name}" + (f" [plugin: {origin}]" if origin else "") + summary)
        for key, default, help_text in settings:
            lines += textwrap.wrap(f"rollouts.{key} ({default!r})" + (f": {help_text}" if help_text else ""), width,
                                   initial_indent="    ", subsequent_indent="        ")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo train``'s arguments: ``--config``, one flag per field of
    :func:`~ptgpo_algos.config.cli_fields`, ``--set`` and the shortcuts."""
    from ptgpo_algos.config import cli_fields

    parser.add_argument("--config", metavar="YAML", help="YAML file of config keys (sections, dotted or flat names); flags "
                        "override it")
    for spec in cli_fields():
        dest = "cfg:" + spec.path
        if spec.type is bool:
            parser.add_argument(f"--{spec.flag}", dest=dest, action="store_const", const=True, default=None,
                                help=spec.help)
        else:
            default = "" if spec.default in (None, "") else f" [{spec.default}]"
            metavar = {int: "N", float: "NUMBER"}.get(spec.type, spec.flag.upper().replace("-", "_"))
            parser.add_argument(f"--{spec.flag}", dest=dest, type=spec.type, default=None, metavar=metavar,
                                help=spec.help + ("" if "[" in spec.help else default))
    parser.add_argument("--difficulty", metavar="LEVEL", help="shortcut for env.kwargs.difficulty (Household)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any config field by dotted path (optim.lr=1e-3) or flat name (learning_rate=1e-3); "
                             "VALUE is parsed as YAML (repeatable)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--nproc", type=int, default=None, metavar="N",
                        help="train on N processes of this machine (one per GPU; or CPU processes on gloo, at most "
                             "two per core), the model sharded with FSDP2 (optim.fsdp); under torchrun leave it out")
    parser.formatter_class = _StrategySettingsFormatter
    parser.epilog = STRATEGY_SETTINGS


def _set_items(items: list[str]) -> list[tuple[str, object]]:
    """``--set KEY=VALUE`` items as ``(KEY, VALUE)``, each VALUE parsed as YAML."""
    import yaml

    from ptgpo_algos.yaml_safe import load_yaml

    pairs = []
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set takes KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        try:
            pairs.append((key.strip(), load_yaml(value, name="--set")))
        except yaml.YAMLError as error:
            raise ValueError(f"--set {item!r}: the value is not valid YAML ({' '.join(str(error).split())})") from None
    return pairs


def parse_set(items: list[str]) -> dict:
    """``--set KEY=VALUE`` items as config overrides, each VALUE parsed as YAML; a field set twice among
    them (``seed=1`` and ``run.seed=2``) is refused (:func:`~ptgpo_algos.config.check_spellings`)."""
    from ptgpo_algos.config import check_spellings

    pairs = _set_items(items)
    check_spellings((key, value, f"--set {key}") for key, value in pairs)
    return dict(pairs)


def build_config(args: argparse.Namespace):
    """The :class:`~ptgpo_algos.config.TrainConfig` the parsed arguments describe: the config file, with
    the command line on top. The command line is one source: a field set by a flag and by ``--set`` (or
    twice by ``--set``) is refused, as in a file."""
    from ptgpo_algos.config import TrainConfig, check_spellings, cli_fields

    flag_of = {spec.path: spec.flag for spec in cli_fields()}
    flags = {name[4:]: value for name, value in vars(args).items() if name.startswith("cfg:") and value is not None}
    entries = [(path, value, f"--{flag_of[path]}") for path, value in flags.items()]
    if args.difficulty is not None:
        entries.append(("env.kwargs.difficulty", args.difficulty, "--difficulty"))
    entries += [(key, value, f"--set {key}") for key, value in _set_items(args.set)]
    check_spellings(entries)
    overrides = {key: value for key, value, _ in entries}
    if args.config:
        return TrainConfig.from_yaml(args.config, overrides)
    return TrainConfig.from_dict(overrides)


def run(args: argparse.Namespace) -> int:
    """Build the config, train, and print the summary; the exit status (2 for a bad configuration). A rank
    that ``torchrun`` started ends its process here, once it has reported
    (:func:`~ptgpo_algos.distributed.process_group.end_rank_process` says why)."""
    status = _run(args)
    from ptgpo_algos.distributed.process_group import end_rank_process, joined_a_group

    if joined_a_group():
        end_rank_process(status)
    return status


def _run(args: argparse.Namespace) -> int:
    try:
        config = build_config(args)
    except ValueError as error:
        print(f"ptgpo train: bad configuration: {error}", file=sys.stderr)
        return 2
    from ptgpo_algos.distributed.launch import RankFailed
    from ptgpo_algos.files import FolderBusyError
    from ptgpo_envs.vector import WorkerError

    try:
        summary = _train(config, args)
    except (ValueError, FolderBusyError) as error:
        print(f"ptgpo train: {error}", file=sys.stderr)
        return 2
    except RankFailed as failure:
        print(f"ptgpo train: {describe_rank_failure(failure)}", file=sys.stderr)
        return 2
    except (WorkerError, ConnectionError) as error:
        # A worker's error carries its traceback: its first and last lines say what failed and why.
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        print(f"ptgpo train: {lines[0]}" + (f" ... {lines[-1]}" if len(lines) > 1 else ""), file=sys.stderr)
        return 2
    if summary is None:  # a rank other than 0 under torchrun: rank 0 reports
        return 0
    print(json.dumps({
        "final_eval": {k: v for k, v in summary.final_eval.items() if k not in ("success_by_type", "environment", "layouts")},
        "best_success": summary.best_success,
        "iterations": summary.iterations,
        "protocol": summary.protocol,
        "decisions": summary.decisions,
        "decisions_saved": summary.decisions_saved,
        "tokens_saved": summary.tokens_saved,
        "wall_time_s": round(summary.wall_time_s, 1),
        "cost": summary.cost,
        "budget_overshoot": summary.budget_overshoot,
        "out_dir": str(summary.checkpoint_dir),
    }, indent=1))
    return 0


def _train(config, args: argparse.Namespace):
    """The run in this process, or across ranks with ``--nproc N`` or under ``torchrun``
    (:mod:`ptgpo_algos.distributed.run`); its summary (None on a rank other than 0)."""
    from ptgpo_algos.distributed.launch import under_launcher

    if args.nproc is None and not under_launcher():
        from ptgpo_algos.training.trainer import Trainer

        return Trainer(config, progress=not args.no_progress).train()
    from ptgpo_algos.distributed.run import run_sharded

    nproc = args.nproc if args.nproc is not None else int(os.environ["WORLD_SIZE"])
    return run_sharded(config, nproc, progress=not args.no_progress)


def describe_rank_failure(failure) -> str:
    """A rank's failure on one line: which rank and why (an error of the system as the CLI words one),
    and that the other ranks were stopped."""
    from ptgpo_harness.cli import describe_os_error

    os_error = failure.os_error()
    cause = failure.cause if os_error is None else describe_os_error(os_error)
    return f"rank {failure.rank} failed: {cause}; the other ranks were stopped"

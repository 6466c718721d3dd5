"""Two small recorded runs for the ``ptgpo show`` tests and the viewer's screenshots: PTGPO on tree
rollouts and GiGPO on linear ones, a tiny model on a 3x3 lake, two iterations, both recorded."""

from __future__ import annotations

from pathlib import Path

from ptgpo_algos.config import TrainConfig

LAKE = {"desc": ["SFF", "FHF", "FFG"]}


def recorded_config(out_dir: Path, algo: str, strategy: str, **change) -> TrainConfig:
    """A two-iteration tiny-model run on the small lake that records every iteration."""
    data = dict(env_id="ptgpo/FrozenLake-v0", env_kwargs=LAKE, max_steps=6, algo=algo, group_size=4,
                tasks_per_iteration=2, iterations=2, eval_every=2, eval_seeds=2, checkpoint_every=2,
                ppo_epochs=1, minibatch_size=16, out_dir=str(out_dir),
                tiny={"hidden_size": 32, "pretrain_steps": 0})
    data.update(change)
    return TrainConfig.from_dict({**data, "rollouts.strategy": strategy, "run.record_rollouts": 1})


def train_recorded(out_dir: Path, algo: str, strategy: str, **change) -> Path:
    """Train :func:`recorded_config` into ``out_dir``; the run folder."""
    from ptgpo_algos.training.trainer import run_training

    run_training(recorded_config(out_dir, algo, strategy, **change), progress=False)
    return out_dir

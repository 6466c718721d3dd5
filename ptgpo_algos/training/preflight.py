"""What a run needs of this machine, checked before a model is built or a file written.

A :class:`~ptgpo_algos.config.TrainConfig` is checked and resolved when it is built, from its own
values and the registries' rules; it asks nothing of the machine, so a config written on one machine
builds on any other (a run folder copied from a GPU node, a benchmark planned on a laptop). What
depends on the machine the run starts on is checked here, by the trainer's pre-flight
(:meth:`ptgpo_algos.training.trainer.Trainer.train`): the model's folder or its place in the Hugging Face
cache, the optional packages the config asks for and the rollout backend (plugins register backends
on the machine that runs them). The run folder is checked where it is locked
(:func:`ptgpo_algos.files.folder_lock`).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import ptgpo_envs
from ptgpo_algos.config import TrainConfig, label
from ptgpo_algos.objectives import objective_needs
from ptgpo_algos.policy.backends import ROLLOUT_BACKENDS
from ptgpo_algos.policy.pretrained import check_pretrained, is_pretrained_source
from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES
from ptgpo_algos.validation import check_registered
from ptgpo_envs import check_env_kwargs, make_env

__all__ = ["check_environment", "check_machine", "check_model_source", "is_hub_name", "run_needs"]

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_machine(config: TrainConfig) -> None:
    """Everything the run needs of this machine (see the module docstring); ``ValueError`` names the
    field and says how to fix it."""
    check_model_source(config.policy.model)
    if config.policy.lora is not None and importlib.util.find_spec("peft") is None:
        raise ValueError(f"{label('policy.lora')}: needs the peft package; pip install 'ptgpo[lora]'")
    if config.run.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ValueError(f"{label('run.tensorboard')}: the tensorboard package is not installed; pip install "
                         "'ptgpo[tensorboard]', or leave it off (metrics.jsonl has it all)")
    if config.run.wandb is not None and importlib.util.find_spec("wandb") is None:
        raise ValueError(f"{label('run.wandb')}: the wandb package is not installed; pip install 'ptgpo[wandb]', "
                         "or leave it out (metrics.jsonl has it all)")
    check_registered(label("rollouts.backend"), config.rollouts.backend, ROLLOUT_BACKENDS)


def is_hub_name(model: str) -> bool:
    """Whether ``model`` has the form of a Hugging Face hub name (``org/name``) and not of a path."""
    return not model.startswith((".", "/", "~")) and bool(_HUB_NAME.match(model))


def check_model_source(model: str) -> None:
    """``policy.model`` names what this machine can load: ``tiny``, an installed pretrained model or a
    GGUF file (:mod:`ptgpo_algos.policy.pretrained`), a Hugging Face model folder, or a hub name (in the
    local cache when ``HF_HUB_OFFLINE=1``)."""
    where = label("policy.model")
    if model == "tiny":
        return
    if is_pretrained_source(model):
        check_pretrained(model, where)
        return
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ValueError(f"{where}: {model!r} has no config.json; point at a Hugging Face model folder")
        return
    if not is_hub_name(model):
        raise ValueError(f"{where}: no model folder at {model!r}; give 'tiny', a model `ptgpo models list` names, "
                         "an existing folder or .gguf file, or a hub name like Qwen/Qwen2.5-7B-Instruct")
    first = Path(model.split("/")[0])
    if first.is_dir():
        # `runs/x` beside a local runs/ folder is a path that is missing, not a hub name to download.
        raise ValueError(f"{where}: no model folder at {model!r} (there is a folder {str(first)!r} here, but no "
                         f"{path.name!r} in it); give an existing folder, or a hub name that is not also a local path")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(model, "config.json"), str):
            raise ValueError(f"{where}: {model!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1; "
                             "download it first or give a local folder")


def check_environment(config: TrainConfig) -> None:
    """What the run needs of its environment, checked before any model or file: the keywords, then
    the environment built once against what its components need (:func:`run_needs`,
    :func:`ptgpo_envs.check_environment`)."""
    env = config.env
    check_env_kwargs(env.id, env.kwargs, label("env.kwargs"))
    if env.eval_kwargs:
        check_env_kwargs(env.id, env.evaluation_kwargs, label("env.eval_kwargs"))
    made = make_env(env.id, env.kwargs, env.max_steps)
    try:
        ptgpo_envs.check_environment(made, run_needs(config), seed=env.train_seeds[0], name=env.id)
    finally:
        made.close()


def run_needs(config: TrainConfig) -> dict[str, str]:
    """What the configured components need of the run (feature -> who): the rollout strategy's and
    the objectives' (:data:`ptgpo_envs.FEATURES`)."""
    needs = dict(ROLLOUT_STRATEGIES.get(config.rollouts.strategy).needs(config.rollouts))
    for need, name in objective_needs(config.algorithm.objectives).items():
        needs.setdefault(need, f"{label('algorithm.objectives')}: {name}")
    return needs

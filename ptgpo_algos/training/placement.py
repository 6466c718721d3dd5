"""Where a training run executes: the few operations that differ between one process and N ranks.

:class:`~ptgpo_algos.training.trainer.Trainer` is one class; what it does not decide itself it asks its
placement. :class:`OneProcess` is this process alone; :class:`ptgpo_algos.distributed.placement.Ranks`
is one rank of a run across processes, the model sharded by FSDP2. The operations:

* **the run folder** -- :meth:`Placement.claim` (lock, check, say whether the run resumes),
  :attr:`Placement.is_main` (who writes the logs), the checkpoint's :meth:`~Placement.save_checkpoint`,
  :meth:`~Placement.load_checkpoint`, :meth:`~Placement.drop_checkpoint` and ``final_model/``;
* **the models** -- :meth:`Placement.build_policy`, what plays (:meth:`~Placement.rollout_policy`),
  how the trainable model is wrapped (:meth:`~Placement.wrap`), which updater trains it
  (:meth:`~Placement.updater`) and how the acting copy gets its weights (:meth:`~Placement.push_weights`);
* **the work** -- the rollouts (:meth:`Placement.collector`), the evaluation's seeds
  (:meth:`~Placement.evaluation`);
* **agreement** -- :meth:`Placement.gather` (every rank's value, in rank order), :meth:`~Placement.total`
  (a sum over ranks) and :meth:`~Placement.agree` (true on every rank when true on one).

Everything else -- the state, the estimate, the metrics row, evaluation timing, the restore of every
component's state -- is the trainer's, the same code on one process and on N ranks.
"""

from __future__ import annotations

import contextlib
import shutil
from abc import ABC, abstractmethod
from typing import Any, Callable

from ptgpo_algos.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ptgpo_algos.training.collectors import AsyncCollector, SyncCollector, restore_weights, snapshot_weights
from ptgpo_algos.config import TrainConfig, label
from ptgpo_algos.critic.files import save_critic
from ptgpo_algos.device import resolve_device
from ptgpo_algos.rollouts.evaluation import EvalResult
from ptgpo_algos.files import atomic_folder, folder_lock
from ptgpo_algos.policy.backends import build_policy, build_rollout_policy, push_weights
from ptgpo_algos.training.run_folder import SHARDED_CHECKPOINT, continued_config, prepare_run_folder
from ptgpo_algos.updates.updater import Updater

__all__ = ["CHECKPOINT_FILE", "OneProcess", "Placement", "check_disk", "check_memory", "claim_folder",
           "restore_checkpoint_weights"]

#: A single process's checkpoint in the run folder (N ranks write ``checkpoint/``, :data:`SHARDED_CHECKPOINT`).
CHECKPOINT_FILE = "checkpoint.pt"


class Placement(ABC):
    """The operations a :class:`~ptgpo_algos.training.trainer.Trainer` asks of where it runs (module docstring).
    ``trainer`` in each is the run (its config, device, state, policies, optimiser, logger)."""

    world_size: int = 1
    rank: int = 0
    #: The checkpoint's name in the run folder.
    checkpoint_name: str = CHECKPOINT_FILE

    @property
    def is_main(self) -> bool:
        """Whether this process writes the run folder's logs, ``config.json`` and ``final_model/``."""
        return self.rank == 0

    @abstractmethod
    def device(self, config: TrainConfig) -> str:
        """The device this process computes on."""

    def check(self, config: TrainConfig) -> None:
        """Refuse what this placement does not run, naming the setting (before anything is built)."""

    @abstractmethod
    def claim(self, trainer: Any, stack: contextlib.ExitStack) -> bool:
        """Check memory and disk, take the run folder's lock (held in ``stack``) and prepare the folder;
        whether the run resumes."""

    def build_policy(self, config: TrainConfig, device: str) -> Any:
        """The trainable policy."""
        return build_policy(config, device)

    @abstractmethod
    def rollout_policy(self, trainer: Any) -> Any:
        """What plays the rollouts and the evaluation."""

    @abstractmethod
    def plays_elsewhere(self, trainer: Any) -> bool:
        """Whether the rollouts are played by other weights than the trainer's (a separate engine, a
        collector running ahead): pi_old is then recomputed by default (:func:`~ptgpo_algos.updates.updater.old_logprobs_mode`)."""

    def wrap(self, trainer: Any) -> None:
        """Prepare the trainable policy (and its reference) for the update: here, as they are."""

    def updater(self, trainer: Any, **keywords: Any) -> Updater:
        """The update of this placement, built with ``keywords`` (:class:`~ptgpo_algos.updates.updater.Updater`'s)."""
        config = trainer.config
        return Updater(trainer.policy, trainer.optimizer, config.optim, config.algorithm, **keywords)

    @abstractmethod
    def collector(self, trainer: Any) -> Any:
        """What collects each iteration's rollouts (:mod:`ptgpo_algos.training.collectors`)."""

    def push_weights(self, trainer: Any) -> dict[str, Any]:
        """The trained weights into what plays; what was sent."""
        return push_weights(trainer.rollout_policy, trainer.policy)

    def evaluation(self, seeds: list[int], play: Callable[[list[int]], EvalResult]) -> dict[str, Any]:
        """The evaluation summary of ``seeds``, played by ``play``."""
        return play(seeds).summary()

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order."""
        return [value]

    def total(self, value: float) -> float:
        """``value`` summed over the ranks."""
        return value

    def agree(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on one."""
        return flag

    @abstractmethod
    def save_checkpoint(self, trainer: Any, run_state: dict[str, Any]) -> int:
        """Write the checkpoint: the weights, the optimiser and ``run_state``; its size in bytes."""

    @abstractmethod
    def load_checkpoint(self, trainer: Any) -> dict[str, Any]:
        """Restore the weights and the optimiser from the run's checkpoint; the rest of it (the run state)."""

    def save_final_model(self, trainer: Any) -> None:
        """``final_model/``: the trained policy, ``save_pretrained``, and a learned critic beside it
        (:mod:`ptgpo_algos.critic.files`)."""
        with atomic_folder(trainer.config.run_dir / "final_model") as folder:
            trainer.policy.save_pretrained(folder)
            if trainer.critic is not None:
                save_critic(trainer.critic, folder)

    @abstractmethod
    def drop_checkpoint(self, trainer: Any) -> None:
        """Delete the checkpoint (``run.keep_checkpoint`` off)."""

    def close(self, trainer: Any) -> None:
        """Release what this placement started (a rank's own rollout engine)."""


class OneProcess(Placement):
    """The whole run in this process: the collector of the config (in this process, or a second one
    with ``rollouts.asynchronous``), ``checkpoint.pt`` in the run folder."""

    def device(self, config: TrainConfig) -> str:
        """``policy.device``, resolved."""
        return resolve_device(config.policy.device, where=label("policy.device"))

    def claim(self, trainer: Any, stack: contextlib.ExitStack) -> bool:
        """The memory plan (GPUs) and the disk checked, the lock taken, the folder checked: one writer at
        a time, a resume only of a single process's checkpoint, which plays its rollouts as the run
        began (:func:`~ptgpo_algos.training.run_folder.continued_config`)."""
        config = trainer.config
        resumed = claim_folder(trainer, stack)
        if resumed and not (config.run_dir / CHECKPOINT_FILE).is_file():
            raise ValueError(f"{str(config.run_dir)!r} holds a checkpoint written across ranks "
                             f"({SHARDED_CHECKPOINT}/): resume it with --nproc N (any number of processes, 1 "
                             "included)")
        if resumed:
            trainer.config = continued_config(config)
        return resumed

    def rollout_policy(self, trainer: Any) -> Any:
        """The trained policy itself, or the separate engine ``rollouts.backend`` names."""
        return build_rollout_policy(trainer.config, trainer.policy, trainer.device)

    def plays_elsewhere(self, trainer: Any) -> bool:
        """A separate engine, or the asynchronous collector's worker (one update behind)."""
        return trainer.rollout_policy is not trainer.policy or trainer.config.rollouts.asynchronous

    def collector(self, trainer: Any) -> Any:
        """Collected here, or in a second process during the update (``rollouts.asynchronous``)."""
        return AsyncCollector(trainer) if trainer.config.rollouts.asynchronous else SyncCollector(trainer)

    def save_checkpoint(self, trainer: Any, run_state: dict[str, Any]) -> int:
        """``checkpoint.pt``, written atomically."""
        path = trainer.config.run_dir / CHECKPOINT_FILE
        save_checkpoint(path, {"weights": snapshot_weights(trainer.policy), "optimizer": trainer.optimizer.state_dict(),
                               **run_state})
        return path.stat().st_size

    def load_checkpoint(self, trainer: Any) -> dict[str, Any]:
        """``checkpoint.pt``'s weights and optimiser restored; the checkpoint."""
        path = trainer.config.run_dir / CHECKPOINT_FILE
        checkpoint = load_checkpoint(path, trainer.device)
        restore_checkpoint_weights(trainer.policy, checkpoint, path)
        trainer.optimizer.load_state_dict(checkpoint["optimizer"])
        return checkpoint

    def drop_checkpoint(self, trainer: Any) -> None:
        """Delete ``checkpoint.pt``."""
        (trainer.config.run_dir / CHECKPOINT_FILE).unlink(missing_ok=True)


def claim_folder(trainer: Any, stack: contextlib.ExitStack) -> bool:
    """Check the memory plan (GPUs) and the disk, take the run folder's lock (held in ``stack``) and
    prepare the folder (:func:`~ptgpo_algos.training.run_folder.prepare_run_folder`); whether the run resumes."""
    if trainer.device.startswith("cuda"):
        check_memory(trainer.config, trainer.device, trainer.placement.world_size, trainer.progress)
    check_disk(trainer.config, trainer.device)
    stack.enter_context(folder_lock(trainer.config.run_dir, "training run"))
    return prepare_run_folder(trainer.config)


def check_memory(config: TrainConfig, device: str, world_size: int, progress: bool) -> None:
    """Predict the run's peak GPU memory (one rank's of ``world_size``) from the model's config before
    loading it (:mod:`ptgpo_algos.training.memory_plan`); print the plan with ``progress``, and refuse one that cannot
    fit unless ``run.memory_check`` is off."""
    from ptgpo_algos.training.memory_plan import GpuDoesNotFit, plan_for_config, total_device_memory

    plan = plan_for_config(config, device, total_device_memory(device), world_size)
    if progress:
        print(plan.table(), flush=True)
    if not plan.fits and config.run.memory_check:
        raise GpuDoesNotFit(plan.refusal())


def check_disk(config: TrainConfig, device: str) -> None:
    """Refuse a run whose checkpoints and final model cannot fit the free disk of its folder (unless
    ``run.memory_check`` is off): found before the model is built, not hours later at a checkpoint."""
    from ptgpo_algos.training.memory_plan import DiskDoesNotFit, disk_plan_for_config

    plan = disk_plan_for_config(config, device)
    folder = config.run_dir
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    held = (folder / CHECKPOINT_FILE).stat().st_size if (folder / CHECKPOINT_FILE).exists() else 0
    free = shutil.disk_usage(existing).free + held
    if free < plan.peak_bytes and config.run.memory_check:
        raise DiskDoesNotFit(plan.refusal(str(folder), free))


def restore_checkpoint_weights(policy: Any, checkpoint: dict[str, Any], path: Any) -> None:
    """``checkpoint``'s weights into ``policy``, or a :class:`CheckpointError` naming ``path`` when they do not fit."""
    try:
        restore_weights(policy, checkpoint["weights"])
    except (KeyError, RuntimeError) as error:
        raise CheckpointError(f"{path}: its weights do not fit the run's model ({type(error).__name__}: "
                              f"{str(error)[:200]}); it belongs to another run") from None


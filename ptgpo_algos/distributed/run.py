"""A training run across ranks: ``ptgpo train --nproc N`` starts N local processes, or this process is
one of those ``torchrun`` started. Each rank runs the one :class:`~ptgpo_algos.training.trainer.Trainer` with
its :class:`~ptgpo_algos.distributed.placement.Ranks` placement."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ptgpo_algos.config import TrainConfig, label
from ptgpo_algos.device import resolve_device
from ptgpo_algos.distributed.launch import RankFailed, launch
from ptgpo_algos.distributed.placement import Ranks, check_sharded_config
from ptgpo_algos.distributed.process_group import RankInfo
from ptgpo_algos.training.run_folder import RANKS_LOG
from ptgpo_algos.training.state import TrainSummary
from ptgpo_algos.training.trainer import Trainer

__all__ = ["run_sharded", "train_on_rank"]


def train_on_rank(info: RankInfo, config: dict[str, Any], progress: bool) -> TrainSummary | None:
    """What each rank runs: the :class:`Trainer` on ``config`` (plain data) placed on this rank; rank 0's summary."""
    summary = Trainer(TrainConfig.from_dict(config), placement=Ranks(info), progress=progress).train()
    return summary if info.is_main else None


def run_sharded(config: TrainConfig, nproc: int, progress: bool = True) -> TrainSummary | None:
    """Train on ``nproc`` local processes (or as one rank of those ``torchrun`` started); the run's
    summary (None on a rank other than 0 under torchrun). The config is checked here first, so that a
    refusal comes before any process starts."""
    check_sharded_config(config)
    device = resolve_device(config.policy.device, where=label("policy.device"))
    kind = "cuda" if device.startswith("cuda") else "cpu"
    try:
        return launch(train_on_rank, nproc, config.to_dict(), progress, device=kind)[0]
    except RankFailed as failure:
        error = failure.error
        if error is not None and set(error.lineage) & set(_REFUSALS):
            raise ValueError(f"rank {failure.rank} failed: {error.message}") from None
        if error is None or error.errno is not None:  # killed, or an error of the system: the message says it all
            raise
        raise _with_traceback_saved(failure, config.run_dir / RANKS_LOG) from None


#: The errors a rank refuses a run with (its folder, its config, its checkpoint: CheckpointError is a
#: ValueError): their message says what to change, and their traceback would add nothing.
_REFUSALS = ("ValueError", "FolderBusyError")


def _with_traceback_saved(failure: RankFailed, log: Path) -> RankFailed:
    """``failure`` with its rank's traceback appended to ``log`` (the run folder's ``ranks.log``), or as it
    is where that cannot be written."""
    try:
        log.parent.mkdir(parents=True, exist_ok=True)  # a rank may fail before rank 0 made the folder
        with open(log, "a", encoding="utf-8") as handle:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            handle.write(f"{stamp} rank {failure.rank} failed:\n{failure.error.traceback}\n")
    except OSError:
        return failure
    return failure.saved_to(str(log))

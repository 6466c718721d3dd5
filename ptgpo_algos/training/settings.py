"""The training stage's section of the run config: ``run`` (when to stop, checkpoints, logs, the seed
and the output folder), and which of its fields a resumed run may change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ptgpo_algos.cost import Budget
from ptgpo_algos.sections import field_labels, option
from ptgpo_algos.validation import check_bool, check_choice, check_int, check_number, check_string, settings_from_mapping

__all__ = ["MAX_SEED", "RESUMABLE_FIELDS", "WANDB_MODES", "RunConfig", "WandbSettings"]

#: The largest run seed (numpy's and torch's seeding accept 32-bit seeds everywhere the run uses one).
MAX_SEED = 2**32 - 1
#: The fields a resumed run may change: they say when to stop (and where the folder is, what it keeps),
#: not what the run does. A resume with any other field changed is refused (:mod:`ptgpo_algos.training.run_folder`).
RESUMABLE_FIELDS = frozenset({"run.iterations", "run.total_decisions", "run.time_limit_s", "run.budget",
                              "run.resume", "run.out_dir", "run.keep_checkpoint", "run.keep_final_model"})

#: Weights & Biases' run modes (``disabled``: wandb's calls do nothing).
WANDB_MODES = ("online", "offline", "disabled")


@dataclass(frozen=True)
class WandbSettings:
    """``run.wandb``: where :class:`~ptgpo_algos.training.callbacks.WandbLogger` logs. ``name`` None: the run
    folder's name; ``mode`` None: wandb's own choice (``WANDB_MODE``, else online)."""

    project: str = "ptgpo"
    name: str | None = None
    mode: str | None = None

    def __post_init__(self) -> None:
        check_string("run.wandb.project", self.project)
        if self.name is not None:
            check_string("run.wandb.name", self.name)
        if self.mode is not None:
            check_choice("run.wandb.mode", self.mode, WANDB_MODES)

    @classmethod
    def from_mapping(cls, values: Any) -> WandbSettings:
        """The settings from a config's ``run.wandb`` mapping (``{}``: the defaults)."""
        return settings_from_mapping(cls, values, "run.wandb")


@dataclass(frozen=True)
class RunConfig:
    """When to stop, where to write, and the run's seed."""

    iterations: int = option(100, "maximum number of iterations", flag="iterations")
    total_decisions: int | None = option(None, "stop once this many policy decisions are spent (a matched "
                                         "budget)", flag="total-decisions")
    time_limit_s: float | None = option(None, "stop after this many seconds of wall time",
                                        flag="time-limit")
    budget: Budget | None = option(None, "stop once the run has spent this much in another unit than decisions: "
                                   "{unit: trained_tokens, optimizer_updates, train_cpu_s or gpu_s, amount: N, "
                                   "stop: reached or nearest}: at the first iteration boundary at or after it "
                                   "(reached), or at the boundary nearest it (nearest; ptgpo_algos.cost)", flat=False)
    checkpoint_every: int = option(10, "checkpoint every N iterations")
    keep_checkpoint: bool = option(True, "keep checkpoint.pt once the run has finished (false: removed after "
                                   "final_model/ is saved, so a finished run cannot be extended; benchmark cells "
                                   "default to false)")
    keep_final_model: bool = option(True, "save final_model/ when the run finishes (false: the records and "
                                    "curves are the result; a benchmark of fully fine-tuned 1.5B models keeps "
                                    "3.1 GB a cell otherwise)")
    memory_check: bool = option(True, "predict the peak GPU memory and the disk a run needs before loading a "
                                "model, and refuse a config that cannot fit (false: print the plan and go on)")
    tensorboard: bool = option(False, "also write TensorBoard logs", flag="tensorboard")
    wandb: WandbSettings | None = option(None, "also log to Weights & Biases: {project, name, mode}, each optional "
                                         "(pip install 'ptgpo[wandb]'); None: off", flat=False)
    record_rollouts: int | None = option(None, "keep every Nth iteration's groups in rollouts/ (`ptgpo export` "
                                         "reads them); None: none", flat=False, flag="record-rollouts")
    seed: int = option(0, "run seed", flag="seed")
    out_dir: str | None = option(None, "output folder [runs/<env>-<algo>-s<seed>]", flag="out")
    resume: bool = option(False, "continue the run in out_dir from its checkpoint", flag="resume")
    reproducible: bool = option(False, "CPU kernels and one thread that give the same numbers on every x86-64 "
                                "processor (slower; the ptgpo command sets them before torch starts)",
                                flag="reproducible")

    def __post_init__(self) -> None:
        check_int(label("run.iterations"), self.iterations, 1)
        if self.total_decisions is not None:
            check_int(label("run.total_decisions"), self.total_decisions, 1)
        if self.time_limit_s is not None:
            check_number(label("run.time_limit_s"), self.time_limit_s, 0.0, exclusive_low=True)
        if self.budget is not None and not isinstance(self.budget, Budget):
            object.__setattr__(self, "budget", Budget.from_mapping(self.budget))
        check_int(label("run.checkpoint_every"), self.checkpoint_every, 1)
        check_bool(label("run.keep_checkpoint"), self.keep_checkpoint)
        check_bool(label("run.keep_final_model"), self.keep_final_model)
        check_bool(label("run.memory_check"), self.memory_check)
        check_bool(label("run.tensorboard"), self.tensorboard)
        if self.wandb is not None and not isinstance(self.wandb, WandbSettings):
            object.__setattr__(self, "wandb", WandbSettings.from_mapping(self.wandb))
        if self.record_rollouts is not None:
            check_int(label("run.record_rollouts"), self.record_rollouts, 1, hint="every N iterations; null: off")
        check_int(label("run.seed"), self.seed, 0, MAX_SEED)
        if self.out_dir is not None and (not isinstance(self.out_dir, str) or not self.out_dir.strip()):
            raise ValueError(f"{label('run.out_dir')}: expected a folder path (a string), got {self.out_dir!r}")
        check_bool(label("run.resume"), self.resume)
        check_bool(label("run.reproducible"), self.reproducible)


#: How messages name a field of this module's sections: its path and the flat name files spell it by.
label = field_labels({"run": RunConfig})

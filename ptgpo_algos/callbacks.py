"""What the trainer tells the outside world: callbacks, observers of the run.

A :class:`Callback` is called at fixed points of :class:`~ptgpo_algos.trainer.Trainer.train` with a
:class:`RunView` (the config and a read-only view of the run's state, not the trainer itself):
``on_train_start`` (after the run's state is built or restored), ``after_update`` (after the update of
an iteration, with its batch: figures returned join the iteration's metrics row), ``on_iteration_end``
(the row), ``on_evaluation`` (the curve row), and ``on_train_end``. A component that trains is an
objective (:mod:`ptgpo_algos.objectives`), not a callback. A callback with state that must survive a resume returns it from ``state_dict``
(plain data and tensors only) and takes it back in ``load_state_dict``.

The run's logs are callbacks too: :class:`JsonlLogger` (``metrics.jsonl``, ``curve.jsonl``),
:class:`TensorBoardLogger` and :class:`ProgressBar`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.data import Batch

__all__ = ["Callback", "JsonlLogger", "ProgressBar", "ReadOnly", "RunView", "TensorBoardLogger"]


class ReadOnly:
    """Reads ``target``'s attributes; refuses to set them (a callback observes the run's state)."""

    def __init__(self, target: Any):
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_target"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{name}: a callback observes the run's state and cannot set it")


class RunView:
    """What a callback sees of the run: its ``config`` and ``state`` (counters, the last evaluation;
    :class:`~ptgpo_algos.trainer.TrainState`), read-only."""

    def __init__(self, config: TrainConfig, state: Any):
        self.config = config
        self.state = ReadOnly(state)


class Callback:
    """A no-op at every point; override what you need (see the module docstring)."""

    #: The key of this callback's state in the checkpoint (None: it has none).
    state_key: str | None = None

    def on_train_start(self, run: RunView) -> None:
        """After the run's state is built or restored, before the first iteration."""

    def after_update(self, run: RunView, batch: Batch) -> dict[str, Any]:
        """After an iteration's PPO update, with its batch; figures returned join the metrics row."""
        return {}

    def on_iteration_end(self, run: RunView, row: dict[str, Any]) -> None:
        """At the end of an iteration, with its metrics row (``metrics.jsonl``)."""

    def on_evaluation(self, run: RunView, row: dict[str, Any]) -> None:
        """After a held-out evaluation, with its row (``curve.jsonl``)."""

    def on_train_end(self, run: RunView) -> None:
        """When the run stops, whatever stopped it."""

    def state_dict(self) -> Any:
        """State to keep in the checkpoint under :attr:`state_key` (plain data and tensors); None: none."""
        return None

    def load_state_dict(self, state: Any) -> None:
        """Take back what :meth:`state_dict` returned, on resume."""


def _append_jsonl(path: Path, row: dict[str, Any]) -> None:
    with path.open("a") as handle:
        handle.write(json.dumps(row) + "\n")
        handle.flush()


class JsonlLogger(Callback):
    """``metrics.jsonl`` (one row per iteration), ``curve.jsonl`` (one row per evaluation) and, written
    by the trainer, ``cost.jsonl`` (one row per iteration: the cost so far in every unit)."""

    def __init__(self, out_dir: Path):
        self.metrics_path = out_dir / "metrics.jsonl"
        self.curve_path = out_dir / "curve.jsonl"
        self.cost_path = out_dir / "cost.jsonl"

    def on_iteration_end(self, run: RunView, row: dict[str, Any]) -> None:
        """Append the row to ``metrics.jsonl``."""
        _append_jsonl(self.metrics_path, row)

    def on_evaluation(self, run: RunView, row: dict[str, Any]) -> None:
        """Append the row to ``curve.jsonl``."""
        _append_jsonl(self.curve_path, row)

    def log_cost(self, row: dict[str, Any]) -> None:
        """Append the trainer's cost row to ``cost.jsonl`` (:mod:`ptgpo_algos.cost`)."""
        _append_jsonl(self.cost_path, row)


class TensorBoardLogger(Callback):
    """The numbers of both logs as TensorBoard scalars (``train/...``, ``eval/...``) in ``tensorboard/``."""

    def __init__(self, out_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(out_dir / "tensorboard"))

    def on_iteration_end(self, run: RunView, row: dict[str, Any]) -> None:
        """Write the row's numbers as ``train/`` scalars."""
        self._scalars("train", row)

    def on_evaluation(self, run: RunView, row: dict[str, Any]) -> None:
        """Write the row's numbers as ``eval/`` scalars."""
        self._scalars("eval", row)

    def _scalars(self, prefix: str, row: dict[str, Any]) -> None:
        for key, value in row.items():
            if isinstance(value, (int, float)) and key != "iteration":
                self.writer.add_scalar(f"{prefix}/{key}", value, row["iteration"])
        self.writer.flush()

    def on_train_end(self, run: RunView) -> None:
        """Close the writer."""
        self.writer.close()


class ProgressBar(Callback):
    """A progress bar (:func:`ptgpo_envs.progress.progress_bar`): decisions when a decision budget ends
    the run (a matched budget), else iterations."""

    def __init__(self) -> None:
        self.bar = None

    def on_train_start(self, run: RunView) -> None:
        """Open the bar, in decisions when the run has a decision budget, else in iterations."""
        from ptgpo_envs.progress import progress_bar

        budget, state = run.config.run, run.state
        desc = f"{run.config.algorithm.name} {run.config.env.id}"
        if budget.total_decisions is not None:
            self.bar = progress_bar(total=budget.total_decisions, initial=min(state.decisions, budget.total_decisions),
                                    unit="decision", desc=desc)
        else:
            self.bar = progress_bar(total=budget.iterations, initial=state.iteration, unit="it", desc=desc)

    def on_iteration_end(self, run: RunView, row: dict[str, Any]) -> None:
        """Advance the bar."""
        budget, state = run.config.run, run.state
        if budget.total_decisions is not None:
            self.bar.update(max(0, min(state.decisions, budget.total_decisions) - self.bar.n))
        else:
            self.bar.update(1)
        self.bar.set_postfix(success=f"{state.last_eval.get('success', 0.0):.2f}",
                             rollout=f"{row['rollout_success']:.2f}", decisions=state.decisions)

    def on_train_end(self, run: RunView) -> None:
        """Close the bar."""
        self.bar.close()

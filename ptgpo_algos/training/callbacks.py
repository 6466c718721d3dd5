"""What the trainer tells the outside world: callbacks, observers of the run.

A :class:`Callback` is called at fixed points of :class:`~ptgpo_algos.training.trainer.Trainer.train` with a
:class:`RunView` (the config and a read-only view of the run's state, not the trainer itself):
``on_train_start`` (after the run's state is built or restored), ``on_rollouts`` (the iteration's
groups and their advantages, after the estimator), ``after_update`` (after the update of
an iteration, with its batch: figures returned join the iteration's metrics row), ``on_iteration_end``
(the row), ``on_evaluation`` (the curve row), and ``on_train_end``. A component that trains is an
objective (:mod:`ptgpo_algos.objectives`), not a callback. A callback with state that must survive a resume returns it from ``state_dict``
(plain data and tensors only) and takes it back in ``load_state_dict``.

The run's logs are callbacks too: :class:`JsonlLogger` (``metrics.jsonl``, ``curve.jsonl``),
:class:`TensorBoardLogger`, :class:`WandbLogger` and :class:`ProgressBar`; :class:`RolloutRecorder`
keeps the groups of every Nth iteration (``run.record_rollouts``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.records import Batch

__all__ = ["Callback", "JsonlLogger", "ProgressBar", "ReadOnly", "RolloutRecorder", "RunView", "TensorBoardLogger",
           "WandbLogger"]


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
    :class:`~ptgpo_algos.training.state.TrainState`), read-only."""

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
        """After an iteration's PPO update, with its batch; figures returned join the metrics row as
        ``callback/<ClassName>/<figure>``."""
        return {}

    def on_rollouts(self, run: RunView, iteration: int, batch: Batch, advantages: Any) -> None:
        """After the estimator, with the iteration's groups and their advantages (a
        :class:`~ptgpo_algos.advantages.StepAdvantages`: one per step, in group, trajectory, time
        order; ``advantages.nested()`` splits them by group and trajectory), before the update."""

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
    """The numbers of both logs as TensorBoard scalars in ``tensorboard/``: the metrics rows' under their
    sections' names (``rollout/...``, ``update/...``: :mod:`ptgpo_algos.metrics`), the curve rows' as ``eval/...``."""

    def __init__(self, out_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(out_dir / "tensorboard"))

    def on_iteration_end(self, run: RunView, row: dict[str, Any]) -> None:
        """Write the row's numbers as scalars, each under its section's name."""
        self._scalars("", row)

    def on_evaluation(self, run: RunView, row: dict[str, Any]) -> None:
        """Write the row's numbers as ``eval/`` scalars."""
        self._scalars("eval", row)

    def _scalars(self, prefix: str, row: dict[str, Any]) -> None:
        for key, value in row.items():
            if isinstance(value, (int, float)) and key != "iteration":
                self.writer.add_scalar(f"{prefix}/{key}" if prefix else key, value, row["iteration"])
        self.writer.flush()

    def on_train_end(self, run: RunView) -> None:
        """Close the writer."""
        self.writer.close()


class WandbLogger(Callback):
    """The run in Weights & Biases (``run.wandb``): the config, the metrics rows (under their sections'
    names: ``rollout/...``, ``update/...``) and the curve rows (``eval/...``) at their iteration, files
    under the run folder's ``wandb/``. A resumed run continues the same wandb run: its id is kept in
    the checkpoint. A run that recorded rollouts (``run.record_rollouts``) ends by drawing them
    (:mod:`ptgpo_algos.viewer`, into the run folder's ``show/``, as ``ptgpo show`` does) and logging the
    pages as an artifact of type ``rollout-viewer``."""

    state_key = "wandb"

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.run_id: str | None = None
        self.wandb_run = None

    def on_train_start(self, run: RunView) -> None:
        """Start (or resume) the wandb run, with the config."""
        import wandb

        settings = run.config.run.wandb
        self.wandb_run = wandb.init(
            project=settings.project, name=settings.name or self.out_dir.name, mode=settings.mode,
            dir=str(self.out_dir), config=run.config.to_dict(), id=self.run_id,
            resume="allow" if self.run_id else None)
        self.run_id = self.wandb_run.id

    def on_iteration_end(self, run: RunView, row: dict[str, Any]) -> None:
        """Log the row's numbers at its iteration, each under its section's name."""
        self._log("", row)

    def on_evaluation(self, run: RunView, row: dict[str, Any]) -> None:
        """Log the row's numbers as ``eval/`` metrics at its iteration (the learning curve)."""
        self._log("eval", row)

    def _log(self, prefix: str, row: dict[str, Any]) -> None:
        numbers = {f"{prefix}/{key}" if prefix else key: value for key, value in row.items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "iteration"}
        self.wandb_run.log(numbers, step=row["iteration"])

    def on_train_end(self, run: RunView) -> None:
        """Log the viewer's pages of the recorded rollouts, if any, and finish the wandb run (an offline
        one is then complete on disk, for ``wandb sync``)."""
        if self.wandb_run is None:
            return
        if run.config.run.record_rollouts:
            self._log_viewer()
        self.wandb_run.finish()

    def _log_viewer(self) -> None:
        import wandb

        from ptgpo_algos.rollouts.recordings import recording_paths
        from ptgpo_algos.viewer import write_pages

        if not recording_paths(self.out_dir / "rollouts"):
            return  # the run ended before its first recorded iteration
        folder = self.out_dir / "show"
        pages = write_pages(self.out_dir, folder)
        artifact = wandb.Artifact(f"rollouts-{self.wandb_run.id}", type="rollout-viewer",
                                  description=f"ptgpo show: {len(pages)} recorded iteration(s) as HTML pages")
        artifact.add_dir(str(folder))
        self.wandb_run.log_artifact(artifact)

    def state_dict(self) -> Any:
        """The wandb run's id, so that a resume logs on to the same run."""
        return {"id": self.run_id}

    def load_state_dict(self, state: Any) -> None:
        """Take back the wandb run's id (None: a checkpoint written without wandb)."""
        self.run_id = (state or {}).get("id")


class RolloutRecorder(Callback):
    """Every ``every``-th iteration's groups, with their advantages, in ``rollouts/iteration-NNNNNN.jsonl``
    (:mod:`ptgpo_algos.rollouts.recordings`), each file written atomically; the recordings of the iterations
    a resumed run plays again are removed when it starts, as its logs are cut back."""

    def __init__(self, out_dir: Path, every: int):
        self.folder = out_dir / "rollouts"
        self.every = every

    def on_train_start(self, run: RunView) -> None:
        """Remove the recordings of iterations after the one the run starts from."""
        from ptgpo_algos.rollouts.recordings import remove_recordings

        remove_recordings(self.folder, after=run.state.iteration)

    def on_rollouts(self, run: RunView, iteration: int, batch: Batch, advantages: Any) -> None:
        """Write the iteration's groups when it is a multiple of ``every``."""
        from ptgpo_algos.rollouts.recordings import write_iteration

        if iteration % self.every == 0:
            write_iteration(self.folder, iteration, run.config.env.id, batch, advantages)


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
                             rollout=f"{row['rollout/success']:.2f}", decisions=state.decisions)

    def on_train_end(self, run: RunView) -> None:
        """Close the bar."""
        self.bar.close()

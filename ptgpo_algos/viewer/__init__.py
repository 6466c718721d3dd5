"""``ptgpo show``: a run's recorded iterations (``run.record_rollouts``) as self-contained HTML pages,
one per iteration, each group drawn as its tree or its trajectories with the credit of every decision
under every registered estimator (:mod:`ptgpo_algos.viewer.page`, :mod:`ptgpo_algos.viewer.credit`)."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Sequence

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.files import atomic_write_text, read_jsonl
from ptgpo_algos.rollouts.recordings import RECORDING, recording_paths
from ptgpo_algos.training.run_folder import load_run_config
from ptgpo_algos.viewer.credit import decision_credit, estimator_credits, forks, step_table
from ptgpo_algos.viewer.page import CSP, IterationView, iteration_page

__all__ = ["PAGE", "recorded_iterations", "write_pages"]

#: The name of an iteration's page in the output folder.
PAGE = "iteration-{:06d}.html"


def recorded_iterations(run_dir: Path) -> list[int]:
    """The iterations ``run_dir`` recorded, in order; ``ValueError`` saying how to record when none."""
    paths = recording_paths(run_dir / "rollouts")
    if not paths:
        raise ValueError(f"{run_dir}: no recorded rollouts in {run_dir / 'rollouts'}; train with "
                         "run.record_rollouts: N (--record-rollouts N) to keep every Nth iteration's groups")
    return [int(path.stem.split("-")[1]) for path in paths]


def _notes(config: TrainConfig, rows: list[dict], credits: list) -> list[str]:
    """What the page must say about its figures: recorded advantages that the run's estimator, computed
    again, does not give, and why."""
    run = credits[0]
    if run.advantages is not None and all(abs(decision_credit(row, run) - row["advantage"]) <= 1e-6 for row in rows):
        return []
    if config.algorithm.placebo:
        reason = "the run is a placebo, whose advantages are permuted"
    elif any("response_tokens" not in row for row in rows):
        reason = ("the recording predates the response lengths and entropies that some estimators read, so those "
                  "are computed without them")
    else:
        reason = "the run's schedule over training (progress) is read here as the iteration's share of run.iterations"
    return [f"The recorded advantages (shown under {run.name}) differ from {run.name} computed again on these "
            f"groups: {reason}."]


def _view(run_dir: Path, config: TrainConfig, iteration: int) -> IterationView:
    rows = list(read_jsonl(run_dir / "rollouts" / RECORDING.format(iteration)))
    credits = estimator_credits(config, iteration, rows)
    return IterationView(run_dir.resolve().name, config.env.id, config.rollouts.strategy, iteration, rows, credits,
                         forks(step_table(rows)[0]), _notes(config, rows, credits))


def write_pages(run_dir: Path, out_dir: Path, iterations: Sequence[int] | None = None) -> list[Path]:
    """Write the page of each of ``iterations`` (None: every recorded one) and an ``index.html`` linking
    them into ``out_dir``; the pages' paths. ``ValueError`` for an iteration the run did not record."""
    recorded = recorded_iterations(run_dir)
    chosen = list(recorded if iterations is None else iterations)
    missing = [i for i in chosen if i not in recorded]
    if missing:
        raise ValueError(f"--iteration {missing[0]}: not recorded by {run_dir}; it recorded iterations "
                         f"{', '.join(map(str, recorded))}")
    config = load_run_config(run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pages = []
    for iteration in chosen:
        path = out_dir / PAGE.format(iteration)
        atomic_write_text(path, iteration_page(_view(run_dir, config, iteration)))
        pages.append(path)
    links = "".join(f'<li><a href="{PAGE.format(i)}">iteration {i}</a></li>' for i in chosen)
    title = escape(f"{run_dir.resolve().name}: recorded iterations", quote=True)
    atomic_write_text(out_dir / "index.html",
                      f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv='
                      f'"Content-Security-Policy" content="{CSP}"><title>{title}</title></head><body>'
                      f"<h1>{title}</h1><ul>{links}</ul></body></html>\n")
    return pages

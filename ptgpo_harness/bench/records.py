"""One cell run in this process, and the result record it leaves (:mod:`leaderboard.records`)."""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from pathlib import Path
from typing import Any

from leaderboard.records import PROTOCOL_KEYS, ResultRecord, record_path, write_record
from ptgpo_harness.bench.plan import Cell
from ptgpo_algos.files import FileFormatError, folder_lock
from ptgpo_algos.metrics import read_metrics
from ptgpo_algos.provenance import provenance

__all__ = ["run_cell"]


def run_cell(cell: Cell, out_dir: str | os.PathLike) -> ResultRecord:
    """Run one cell in this process and write its record (ok or failed); return the record."""
    out_dir = Path(out_dir)
    run_dir = out_dir / "runs" / cell.name
    start, cpu_start = time.monotonic(), time.process_time()
    try:
        with folder_lock(run_dir, "benchmark cell"):
            outcome = _run_rl(cell, run_dir) if cell.kind == "rl" else _run_baseline(cell, run_dir)
        status, error = "ok", None
    except Exception as exc:  # noqa: BLE001 - a failing cell must not stop the benchmark
        traceback.print_exc()
        outcome, status = {}, "failed"
        error = traceback.format_exception_only(type(exc), exc)[-1].strip() or type(exc).__name__
    wall_time_s, cpu_time_s = round(time.monotonic() - start, 3), round(time.process_time() - cpu_start, 3)
    curve = outcome.pop("curve_path", None)
    if curve is not None:
        curve = os.path.relpath(curve, out_dir)
    resolved = outcome.pop("resolved_config", None)
    device = outcome.pop("device", None)
    record = ResultRecord(
        method=cell.method,
        method_kind=cell.kind,
        env_id=cell.env.id,
        env_label=cell.env.label,
        env_kwargs=cell.env.kwargs,
        seed=cell.seed,
        budget=cell.budget,
        budget_unit=cell.budget_unit,
        status=status,
        error=error,
        wall_time_s=wall_time_s,
        cpu_time_s=cpu_time_s,
        curve_path=curve,
        # Evaluation seeds can be thousands; eval_episodes and config.yaml say which were used.
        config=_jsonable({k: v for k, v in cell.spec.items() if k != "eval_seeds"}),
        provenance=provenance(_jsonable(resolved), device),
        **outcome,
    )
    write_record(record_path(out_dir, cell.name), record)
    return record


def _eval_fields(final: dict[str, Any], best: float | None, overlap: float | None) -> dict[str, Any]:
    """Record fields from an ``EvalResult.summary()`` and the measured ``overlap`` with training;
    environment scores in [0, 1] become ×100."""
    score = final.get("score")
    layouts = final.get("layouts") or []
    return {
        "eval_layouts": len(set(layouts)) if layouts and None not in layouts else None,
        "eval_overlap": overlap,
        "eval_invalid_rate": None if final.get("invalid_rate") is None else float(final["invalid_rate"]),
        "final_success": float(final["success"]),
        "best_success": None if best is None else float(max(best, final["success"])),
        "eval_episodes": int(final["episodes"]),
        "success_by_type": {k: float(v) for k, v in (final.get("success_by_type") or {}).items()},
        "score": None if score is None else round(100.0 * float(score), 4),
        "final_return": float(final["return"]),
    }


def _run_rl(cell: Cell, run_dir: Path) -> dict[str, Any]:
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.device import resolve_device
    from ptgpo_algos.training.trainer import run_training

    config = TrainConfig.from_dict({**cell.spec, "out_dir": str(run_dir), "resume": True})
    summary = run_training(config, progress=False)
    return {
        # What the trainer resolved policy.device to: a record of ``auto`` would not say CPU or GPU.
        "device": resolve_device(config.policy.device),
        **_eval_fields(summary.final_eval, summary.best_success, summary.final_eval.get("overlap")),
        **_training_counts(summary.metrics_path),
        "decisions": int(summary.decisions),
        "tokens": int(summary.tokens or 0),
        "iterations": int(summary.iterations),
        "budget_overshoot": summary.budget_overshoot,
        **{name: summary.cost[name] for name in _COST_FIELDS},
        "setup_cpu_s": summary.setup_cpu_s,
        "curve_path": str(summary.curve_path) if summary.curve_path else None,
        "protocol": _protocol(summary.recipe, summary.final_eval),
        "resolved_config": config.to_dict(),
    }


#: The run's cost counters (:class:`ptgpo_algos.cost.Cost`) a record keeps besides episodes and trained tokens.
_COST_FIELDS = ("unique_tokens", "optimizer_updates", "train_cpu_s", "eval_cpu_s", "gpu_s")


def _training_counts(metrics_path: Path) -> dict[str, int | None]:
    """Training episodes and trained tokens, summed over the run's metrics rows (one per iteration;
    a resume trims them to its checkpoint, so each iteration counts once; a run's rows of either
    naming, :func:`~ptgpo_algos.metrics.read_metrics`)."""
    try:
        rows = read_metrics(metrics_path)
    except (OSError, FileFormatError):
        return {"episodes": None, "trained_tokens": None}
    return {"episodes": int(sum(row.get("rollout/episodes", 0) for row in rows)),
            "trained_tokens": int(sum(row.get("update/train_tokens", 0) for row in rows))}


def _run_baseline(cell: Cell, run_dir: Path) -> dict[str, Any]:
    from baselines.registry import BASELINES, BaselineRun, run_baseline

    job = BaselineRun(
        env_id=cell.env.id,
        env_kwargs=cell.env.kwargs,
        eval_env_kwargs=cell.env.evaluation_kwargs,
        max_steps=cell.env.max_steps,
        train_seeds=range(*cell.env.train_seeds),
        eval_seeds=cell.env.eval_seeds,
        seed=cell.seed,
        budget=cell.budget or 0,
        out_dir=run_dir,
        policy=cell.spec.get("policy", {}),
        options=cell.spec["options"],
    )
    outcome = run_baseline(cell.spec["baseline"], job)
    # A baseline that does not train has seen no layout; one that does is not instrumented (None).
    trains = BASELINES.get(cell.spec["baseline"]).trains
    return {
        **_eval_fields(outcome.final_eval, outcome.best_success, None if trains else 0.0),
        "resolved_config": {**dataclasses.asdict(job), "baseline": cell.spec["baseline"]},
        "decisions": int(outcome.decisions),
        "tokens": int(outcome.tokens or 0),
        "curve_path": outcome.curve_path,
        "protocol": _protocol(cell.recipe, outcome.final_eval),
    }


def _protocol(recipe: str | None, final: dict[str, Any]) -> dict[str, Any]:
    """The record's ``protocol``: the recipe, and what the evaluation environment reported of itself."""
    environment = final.get("environment") or {}
    return {"recipe": recipe, **{key: environment[key] for key in PROTOCOL_KEYS if key in environment}}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)

"""Hand-made result records for the leaderboard tests (see the fixture table in test_leaderboard.py)."""

from __future__ import annotations

import json
from pathlib import Path

from leaderboard.records import ResultRecord, write_record


def record(method, env, seed, success, kind="rl", **extra) -> ResultRecord:
    env_id = {"A": "ptgpo/Household-v0", "B": "ptgpo/Sokoban-v0"}[env]
    extra.setdefault("budget", 100 if kind == "rl" else None)
    extra.setdefault("status", "ok")
    return ResultRecord(
        method=method,
        method_kind=kind,
        env_id=env_id,
        env_label=env,
        seed=seed,
        final_success=success,
        created_at="2026-11-29T09:00:00+00:00",
        **extra,
    )


def measured_on(results: Path, *envs: tuple[str, str]) -> None:
    """An expert record (a reference row: no rank changes) on each ``(env_label, env_id)``, so that the
    papers' numbers on those environments join the board's reported table."""
    for label, env_id in envs:
        write_record(results, ResultRecord(method="expert", method_kind="baseline", env_id=env_id, env_label=label,
                                           seed=0, final_success=1.0, budget=None, status="ok",
                                           created_at="2026-11-29T09:00:00+00:00"))


def write_fixture(results: Path) -> None:
    # Env A: per seed (All, Pick, Look) as fractions; RL runs also get a three-point curve.
    a = [
        ("grpo", "rl", [(0.5, 0.4, 0.6), (0.7, 0.6, 0.8), (0.6, 0.5, 0.7)]),
        ("ptgpo", "rl", [(0.8, 0.9, 0.7), (0.6, 0.7, 0.5)]),
        ("random", "baseline", [(0.1, 0.2, 0.0)]),
        ("expert", "baseline", [(1.0, 1.0, 1.0), (1.0, 1.0, 1.0)]),
    ]
    for method, kind, seeds in a:
        for seed, (overall, pick, look) in enumerate(seeds):
            curve = None
            if kind == "rl":
                curve = f"curves/{method}-{seed}.jsonl"
                (results / "curves").mkdir(exist_ok=True)
                rows = [{"decisions": d + 5 * seed, "success": overall * d / 100} for d in (0, 50, 100)]
                (results / curve).write_text("".join(json.dumps(r) + "\n" for r in rows))
            write_record(
                results,
                record(
                    method,
                    "A",
                    seed,
                    overall,
                    kind,
                    success_by_type={"Pick": pick, "Look": look},
                    curve_path=curve,
                ),
            )
    b = [
        ("grpo", "rl", [0.3, 0.3, 0.6]),
        ("ptgpo", "rl", [0.2, 0.4]),
        ("random", "baseline", [0.05]),
        ("zero-shot", "baseline", [0.9]),
        ("expert", "baseline", [1.0]),
    ]
    for method, kind, seeds in b:
        for seed, overall in enumerate(seeds):
            write_record(results, record(method, "B", seed, overall, kind))
    write_record(
        results, record("gigpo", "B", 0, None, status="failed", error="CUDA out of memory | at step 3")
    )

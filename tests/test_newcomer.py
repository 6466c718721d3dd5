"""What a newcomer meets in the first hour: near-miss ids, missing folders, ``ptgpo plan`` on a CPU-only
offline machine, FrozenLake's layouts, and a benchmark that says how to retry its failed cells."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest

import ptgpo_envs  # noqa: F401  (registers the environments)
from ptgpo_harness.cli import main
from ptgpo_envs.registry import check_env_id

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("typed, meant", [("FrozenLake-v0", "ptgpo/FrozenLake-v0"),
                                          ("household-v0", "ptgpo/Household-v0"),
                                          ("ptgpo/Sokoban-v1", "ptgpo/Sokoban-v0"),
                                          ("CartPol-v1", "CartPole-v1")])
def test_a_near_miss_id_suggests_ours_before_gymnasiums(typed, meant):
    with pytest.raises(ValueError) as error:
        check_env_id(typed)
    assert f"did you mean {meant!r}?" in str(error.value)


def test_a_missing_relative_model_folder_is_named_as_a_folder_not_tried_on_the_hub(tmp_path, monkeypatch, capsys):
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    code = main(["plan", str(ROOT / "configs" / "train_household_hard_qwen7b.yaml"), "--set", "model=runs/smoke"])
    err = capsys.readouterr().err
    assert code == 2
    assert "no model folder at 'runs/smoke'" in err and "'runs'" in err


def test_plan_as_the_readme_writes_it_runs_on_a_cpu_only_offline_machine(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")  # nothing cached
    code = main(["plan", str(ROOT / "configs" / "bench" / "alfworld_qwen2.5-7b.yaml")])
    out = capsys.readouterr().out
    assert code == 0
    assert "planned with its architecture in" in out and "qwen2.5-7b" in out
    assert "there is no GPU here: planned for one of 79.6 GiB" in out
    assert "fits:" in out


def _layouts(env, seeds):
    return {env.reset(seed=seed)[1]["layout"] for seed in seeds}


def test_frozenlake_generated_maps_have_layouts_of_their_own():
    env = gymnasium.make("ptgpo/FrozenLake-v0", size=4)
    maps, layouts = set(), set()
    for seed in range(20):
        _, info = env.reset(seed=seed)
        maps.add(tuple(env.unwrapped._rows))
        layouts.add(info["layout"])
    assert len(maps) > 1 and len(layouts) == len(maps)
    # The layout is the start's: the same at every step of the episode.
    _, info = env.reset(seed=3)
    _, _, _, _, after = env.step(info["admissible_actions"][0])
    assert after["layout"] == info["layout"]


def test_frozenlake_held_out_keeps_some_maps_for_evaluation():
    from ptgpo_envs.core import held_out

    env = gymnasium.make("ptgpo/FrozenLake-v0", size=4)
    kept = [held_out(layout, 0.5) for layout in _layouts(env, range(40))]
    assert 0 < sum(kept) < len(kept)


def test_the_time_left_is_priced_from_the_finished_cells():
    from ptgpo_harness.bench.eta import remaining_seconds

    # 2 training cells done: 30 CPU s for 1,000 decisions, 90 for 2,000 -> 0.04 s a decision.
    finished = [(1000, 30.0), (2000, 90.0), (None, 4.0), (None, 6.0)]
    # 3,000 decisions (120 s) and two baselines (5 s each) on 2 workers.
    assert remaining_seconds(finished, [1000, 2000, None, None], 2) == pytest.approx(65.0)
    # One cell left: one core busy, whatever the workers.
    assert remaining_seconds(finished, [1000], 4) == pytest.approx(40.0)
    assert remaining_seconds([(None, 5.0)], [1000], 2) is None  # no training cell has finished yet
    assert remaining_seconds([(1000, 5.0)], [None], 2) is None
    assert remaining_seconds(finished, [], 2) == 0.0


def test_a_cells_log_notices_reach_the_console_once(tmp_path):
    from ptgpo_harness.bench.pool import _NoticeWatch

    log = tmp_path / "runs" / "c" / "cell.log"
    log.parent.mkdir(parents=True)
    log.write_text("starting\npretraining the tiny model (1000 steps; once per spec, then cached): about 9 min")
    watch = _NoticeWatch(tmp_path)
    assert watch.new_notices("c") == []  # the line is not finished yet
    with open(log, "a") as handle:
        handle.write(" at this pace\nbuilding\n")
    assert watch.new_notices("c") == ["pretraining the tiny model (1000 steps; once per spec, then cached): "
                                      "about 9 min at this pace"]
    assert watch.new_notices("c") == []
    assert watch.new_notices("missing") == []


def _failing_bench(tmp_path):
    import yaml

    config = {
        "name": "t", "budget": 100, "seeds": [0],
        "environments": [{"label": "easy", "id": "ptgpo/Household-v0", "kwargs": {"difficulty": "easy"},
                          "train_seeds": {"count": 1}, "eval_seeds": [1, 2]}],
        "methods": [],
        "baselines": [{"name": "random", "options": {"epsilon": 0.1}}, "expert"],
    }
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_bench_says_what_each_cell_did_and_how_to_retry_the_failed(tmp_path, capsys):
    path = _failing_bench(tmp_path)
    out = tmp_path / "out"
    assert main(["bench", str(path), "--out", str(out), "--workers", "1", "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "1 of 2 cells" not in captured.err and "2 of 2 cells to run" in captured.err
    assert "[1/2]" in captured.err and "[2/2]" in captured.err
    assert "easy__expert__seed0: ok, final success 1.000" in captured.err
    assert "easy__random__seed0: FAILED" in captured.err
    assert f"ptgpo bench {path} --retry-failed --out {out}" in captured.out
    # A plain re-run skips the failed cell and says how to run it again.
    assert main(["bench", str(path), "--out", str(out), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "1 cell(s) failed in an earlier run and are skipped: --retry-failed runs them again" in captured.err
    assert "--retry-failed" in captured.out


def test_every_extra_the_docs_and_messages_name_exists():
    import re
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "ptgpo_algos").rglob("*.py"),
             *(ROOT / "ptgpo_envs").rglob("*.py")]
    named = {}
    for path in files:
        for match in re.finditer(r"ptgpo\[([\w,-]+)\]", path.read_text(encoding="utf-8")):
            for extra in match.group(1).split(","):
                named.setdefault(extra, path)
    assert "tensorboard" in named
    missing = {extra: str(path) for extra, path in named.items() if extra not in extras}
    assert not missing, f"extras named but not in pyproject.toml: {missing}"

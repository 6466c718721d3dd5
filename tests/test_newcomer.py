"""What a newcomer meets in the first hour: near-miss ids, missing folders, ``ptgpo plan`` on a CPU-only
offline machine, FrozenLake's layouts, and a benchmark that says how to retry its failed cells."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest

import ptgpo_envs  # noqa: F401  (registers the environments)
from ptgpo_algos.cli import main
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

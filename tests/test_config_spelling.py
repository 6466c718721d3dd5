"""Config values as people write them: numbers in YAML and ``--set`` spellings (``1e-3``, ``.5``), names in
any case, and suggestions that point at the key meant."""

from __future__ import annotations

import pytest

from ptgpo_harness.commands.train import parse_set
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.validation import as_number, check_number


@pytest.mark.parametrize("text, number", [("1e-3", 0.001), ("3e-5", 3e-5), (".5", 0.5), ("+2.0E3", 2000.0),
                                          ("-4", -4.0), ("1_000.5", 1000.5), (" 5e-1 ", 0.5)])
def test_a_string_that_spells_a_number_is_that_number(text, number):
    assert as_number(text) == number and isinstance(as_number(text), float)
    assert check_number("optim.lr", text, -1e9) == number


@pytest.mark.parametrize("text", ["abc", "1e", "e3", "1.2.3", "", "nan", "inf", "0x10", "1e-3x"])
def test_other_strings_stay_strings_and_are_refused(text):
    assert as_number(text) == text
    with pytest.raises(ValueError, match=f"optim.lr: expected a number >= 0.0, got {text!r}"):
        check_number("optim.lr", text, 0.0)


def test_yaml_and_set_spellings_reach_every_kind_of_numeric_field(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("learning_rate: 1e-3\nclip_ratio: .5\nalgo: gigpo\nalgo_config: {gamma: 9.5e-1}\n"
                    "rollout: patr\npatr: {alpha: 5e-1}\nobjectives: [{name: seed, weight: 2e-1}]\n")
    overrides = parse_set(["optim.kl_coef=1e-2", "evaluation.temperature=.5"])
    config = TrainConfig.from_yaml(path, overrides)
    assert config.optim.lr == 1e-3 and config.optim.clip_ratio == 0.5 and config.optim.kl_coef == 0.01
    assert config.evaluation.temperature == 0.5
    assert config.algorithm.config == {"gamma": 0.95}  # an estimator's key
    assert config.rollouts.patr.alpha == 0.5  # a PATR setting
    assert config.algorithm.objectives[0]["weight"] == 0.2  # an objective's weight
    assert TrainConfig.from_dict(config.to_dict()) == config  # the saved config holds numbers


def test_names_are_found_in_any_case_and_misspellings_get_the_closest():
    assert TrainConfig.from_dict({"algo": "GiGPO"}).algorithm.name == "gigpo"
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'GIPO' \(did you mean 'gigpo'\?\)"):
        TrainConfig.from_dict({"algo": "GIPO"})


def test_a_flag_used_as_a_config_key_points_at_the_key():
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'lr' \(did you mean 'learning_rate'\?\)"):
        TrainConfig.from_dict({"lr": 1e-3})


def test_flat_names_and_labels_come_from_the_field_metadata():
    import dataclasses

    from ptgpo_algos.config import FLAT_KEYS, SECTIONS, flat_name, label

    named = [(f"{section}.{f.name}", flat_name(f)) for section, cls in SECTIONS.items()
             for f in dataclasses.fields(cls) if flat_name(f)]
    assert len(FLAT_KEYS) == len(named)  # no two fields share a flat name
    assert {flat: path for path, flat in named} == FLAT_KEYS
    # A field's own name unless its metadata names an older one; newer fields have none.
    assert (FLAT_KEYS["group_size"], FLAT_KEYS["learning_rate"]) == ("rollouts.group_size", "optim.lr")
    assert (label("optim.lr"), label("env_workers.backend")) == ("optim.lr (learning_rate)", "env_workers.backend")
    assert "loss_config" not in FLAT_KEYS


def test_a_config_whose_model_folder_is_gone_still_loads(tmp_path):
    # A run folder copied off the machine that holds its model: the config builds (to read its
    # records, to plan a rerun); the trainer's pre-flight is what refuses to train it here.
    saved = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "tensorboard": True}).to_dict()
    saved["policy"]["model"] = str(tmp_path / "moved-away")
    assert TrainConfig.from_dict(saved).policy.model == str(tmp_path / "moved-away")

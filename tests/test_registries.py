"""The open registries: one pattern for estimators, losses, rollout backends, baselines and environments,
queried when a config is validated, extended in code or by another package's entry points; and the
extensions work end to end (a new estimator and a new environment train; processes step environments
exactly as the in-process backend does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ptgpo_envs
from ptgpo_algos.advantages import ESTIMATORS, Estimate, register_estimator
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.updates.loss_registry import LOSSES
from ptgpo_algos.updates.losses import ppo_clip_loss
from ptgpo_algos.policy.backends import ROLLOUT_BACKENDS
from ptgpo_envs.plugins import Registry, RegistryError

ROOT = Path(__file__).resolve().parents[1]


def test_a_registry_names_its_entries_and_suggests_the_closest():
    registry: Registry[int] = Registry("widget")
    registry.register("alpha", 1)
    registry.register("alpha", 1)  # the same entry again is fine
    with pytest.raises(RegistryError, match="a widget named 'alpha' is already registered"):
        registry.register("alpha", 2)
    registry.register("alpha", 2, replace=True)
    assert registry.get("alpha") == 2 and "alpha" in registry and list(registry) == ["alpha"]
    with pytest.raises(RegistryError, match=r"unknown widget 'alpa' \(did you mean 'alpha'\?\); choose one of alpha"):
        registry.get("alpa")


def test_entry_points_are_loaded_when_a_registry_is_first_asked(tmp_path, monkeypatch):
    import json

    from ptgpo_envs.plugins import PINNED_PLUGINS_ENV

    (tmp_path / "gadget_plugin.py").write_text(
        "CALLS = []\n"
        "def register():\n"
        "    from tests_gadget_registry import REGISTRY\n"
        "    CALLS.append(1)\n"
        "    REGISTRY.register('from-plugin', 'yes')\n")
    registry: Registry[str] = Registry("gadget", "ptgpo.test_gadgets")
    (tmp_path / "tests_gadget_registry.py").write_text("REGISTRY = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import gadget_plugin
    import tests_gadget_registry

    tests_gadget_registry.REGISTRY = registry
    monkeypatch.setenv(PINNED_PLUGINS_ENV, json.dumps([{"group": "ptgpo.test_gadgets", "name": "gadgets",
                                                       "value": "gadget_plugin:register", "dist": "gadgets"}]))
    assert gadget_plugin.CALLS == []  # nothing is loaded at import
    assert registry.get("from-plugin") == "yes" and registry.names() == ["from-plugin"]
    registry.names()
    assert gadget_plugin.CALLS == [1]  # once


def test_every_extensible_part_is_a_registry_of_one_kind():
    from baselines.registry import BASELINES

    from ptgpo_algos.objectives import OBJECTIVES

    from ptgpo_algos.updates.optimizer_registry import OPTIMIZERS

    for registry in (ESTIMATORS, LOSSES, OPTIMIZERS, OBJECTIVES, ROLLOUT_BACKENDS, BASELINES, ptgpo_envs.ENVIRONMENTS):
        assert isinstance(registry, Registry) and registry.group.startswith("ptgpo.")
    assert {"isdpo", "seed", "mcgpo", "hindsight"} <= set(OBJECTIVES)
    assert {"grpo", "gigpo", "ptgpo", "g2po"} <= set(ESTIMATORS)
    assert set(ROLLOUT_BACKENDS) >= {"transformers", "vllm"} and "ppo-clip" in LOSSES
    assert {"adamw", "sgd"} <= set(OPTIMIZERS)


LAKE = {"desc": ["SFF", "FHF", "FFG"]}


def _run(tmp_path, **change):
    from ptgpo_algos.training.trainer import run_training

    data = dict(env_id="ptgpo/FrozenLake-v0", env_kwargs=LAKE, max_steps=6, group_size=4, tasks_per_iteration=2,
                iterations=2, eval_every=2, eval_seeds=2, out_dir=str(tmp_path / "run"),
                tiny={"hidden_size": 32, "pretrain_steps": 0})
    data.update(change)
    return run_training(TrainConfig.from_dict(data), progress=False)


def test_an_estimator_and_a_loss_registered_from_outside_train(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    seen = []

    # A plugin's estimator: the return itself as every step's advantage, with a key of its own.
    from ptgpo_algos.advantages.config import ConfigKey

    def scaled_return(table, signal, *, scale: float = 1.0) -> Estimate:
        seen.append(scale)
        return Estimate(scale * signal.episode[table.trajectory])

    def halved(logprobs, old_logprobs, advantages, *, clip_ratio=0.2):
        loss, clipped = ppo_clip_loss(logprobs, old_logprobs, advantages, clip_ratio)
        return 0.5 * loss, clipped

    register_estimator("scaled_return", keys={"scale": ConfigKey("scale", "a number", float)})(scaled_return)
    LOSSES.register("halved-ppo", halved)
    try:
        with pytest.raises(ValueError, match="scale=.* is invalid"):
            TrainConfig.from_dict({"algo": "scaled_return", "algo_config": {"scale": "big"}})
        summary = _run(tmp_path, algo="scaled_return", algo_config={"scale": 2.0}, **{"algorithm.loss": "halved-ppo"})
        assert summary.iterations == 2 and seen == [2.0, 2.0]
    finally:
        ESTIMATORS.unregister("scaled_return")
        LOSSES.unregister("halved-ppo")
    with pytest.raises(ValueError, match="unknown advantage estimator 'scaled_return'"):
        TrainConfig.from_dict({"algo": "scaled_return"})


def test_an_environment_registered_from_outside_trains(tmp_path, monkeypatch):
    # Any Gymnasium id whose environment honours the contract: here a TextEnv of this test module.
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    spec = ptgpo_envs.EnvSpec("testpkg/Corridor-v0", f"{__name__}:Corridor", "walk right to the end")
    ptgpo_envs.register(spec)
    try:
        assert "testpkg/Corridor-v0" in ptgpo_envs.env_ids()
        summary = _run(tmp_path, env_id="testpkg/Corridor-v0", env_kwargs={}, algo="ptgpo",
                       tiny={"hidden_size": 32, "pretrain_steps": 0})
        assert summary.iterations == 2 and summary.decisions > 0
    finally:
        ptgpo_envs.ENVIRONMENTS.unregister("testpkg/Corridor-v0")


class Corridor(ptgpo_envs.TextEnv):
    """Five cells; the agent starts at the left end and wins at the right one."""

    default_max_steps = 8

    def _new_episode(self, options):
        self._world = 0
        return "You are at cell 0 of a corridor."

    def _admissible_actions(self):
        return ["go right", "go left"]

    def _apply(self, action):
        self._world = max(0, self._world + (1 if action == "go right" else -1))
        return f"You are at cell {self._world}.", float(self._world == 4), self._world == 4

    def _state_key(self):
        return str(self._world)

    def _task(self):
        return "reach cell 4"

    def _won(self):
        return self._world == 4


def test_processes_step_environments_exactly_as_in_process(tmp_path):
    from ptgpo_algos.records import Task
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model
    from ptgpo_algos.policy import load_policy
    from ptgpo_algos.rollouts.collection import collect_rollouts

    path = build_tiny_model(TinyModelSpec(hidden_size=32, pretrain_steps=0), env_ids=["ptgpo/Household-v0"],
                            cache_dir=tmp_path / "cache")
    policy = load_policy(path)
    tasks = [Task("ptgpo/Household-v0", seed, {"difficulty": "easy"}, 8) for seed in (3, 4)]

    def played(backend):
        batch, stats = collect_rollouts(policy, tasks, group_size=4, mode="tree", rng=np.random.default_rng(1),
                                        generator=torch.Generator().manual_seed(1), env_backend=backend,
                                        env_workers=2)
        return [[[(s.state_key, s.action, s.reward, s.achieved) for s in t] for t in g] for g in batch], stats.decisions

    assert played("processes") == played("in-process")


def test_a_matched_budget_is_spent_exactly(tmp_path, monkeypatch):
    # Tree rollouts take a variable number of decisions an iteration: the last one stops at the budget.
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    summary = _run(tmp_path, algo="ptgpo", iterations=1000, total_decisions=57)
    assert summary.decisions == 57


def test_a_lazy_entry_is_named_checked_and_listed_without_its_import(tmp_path, monkeypatch):
    (tmp_path / "lazy_entry_module.py").write_text("IMPORTS = []\nIMPORTS.append(1)\ndef entry():\n    return 'ran'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("thing")
    registry.register_lazy("lazy", "lazy_entry_module:entry")
    registry.register("eager", len)
    assert "lazy" in registry and registry.names() == ["lazy", "eager"]
    assert "lazy_entry_module" not in sys.modules
    assert registry.get("lazy")() == "ran" and sys.modules["lazy_entry_module"].IMPORTS == [1]
    assert registry.items() == [("lazy", sys.modules["lazy_entry_module"].entry), ("eager", len)]
    with pytest.raises(RegistryError, match="'module:attribute'"):
        registry.register_lazy("bad", "no_colon_here")
    with pytest.raises(RegistryError, match="already registered"):
        registry.register_lazy("eager", "lazy_entry_module:entry")
    monkeypatch.delitem(sys.modules, "lazy_entry_module")


def _fresh_python(code: str) -> str:
    """``code`` run by a new interpreter on this checkout (what it imports is its own); its stdout."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_checking_a_config_that_names_a_strategy_imports_none_of_its_collection():
    # The settings and the scorers' names are checked apart from the collections, which a run imports.
    code = ("import sys\n"
            "from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES\n"
            "from ptgpo_algos.config import TrainConfig\n"
            "for data in ({'rollouts': {'strategy': 'linear'}}, {'rollouts': {'strategy': 'tree', 'initial_rollouts': 2}},\n"
            "             {'rollout': 'patr', 'patr': {'scorer': 'value', 'judge': 'progress'}},\n"
            "             {'algo': '3spo', 'spo3': {'g_max': 4}}, {'algo': 'bpo', 'bpo': {'forks': 3}}):\n"
            "    TrainConfig.from_dict(data)\n"
            "print(sorted(m for m in ('ptgpo_algos.rollouts.collection', 'ptgpo_algos.rollouts.patr.collection',\n"
            "                         'ptgpo_algos.rollouts.spo3.collection', 'ptgpo_algos.rollouts.bpo.collection')\n"
            "             if m in sys.modules))\n")
    stdout = _fresh_python(code)
    assert stdout.strip() == "[]"


def test_each_built_in_estimator_declares_the_keys_its_function_takes():
    # The table is what configs are checked against without importing the functions: it must not drift.
    import importlib

    from ptgpo_algos.advantages.registry import BUILT_IN_ESTIMATORS, get_estimator, own_keys

    assert [built_in.name for built_in in BUILT_IN_ESTIMATORS] == ESTIMATORS.names()[:len(BUILT_IN_ESTIMATORS)]
    for built_in in BUILT_IN_ESTIMATORS:
        module, _, attribute = built_in.target.partition(":")
        function = getattr(importlib.import_module(module), attribute)
        assert list(own_keys(function).items()) == list(built_in.own.items()), built_in.name
        assert get_estimator(built_in.name).function is function


def test_checking_and_listing_the_built_in_estimators_imports_none_of_their_modules():
    # Every built-in named with each of its own keys set, then listed; its module comes on first use.
    code = ("import argparse, contextlib, io, sys\n"
            "from ptgpo_algos.config import TrainConfig\n"
            "from ptgpo_algos.advantages.registry import BUILT_IN_ESTIMATORS, get_estimator\n"
            "from ptgpo_harness.commands import algos\n"
            "modules = [built_in.target.partition(':')[0] for built_in in BUILT_IN_ESTIMATORS]\n"
            "for built_in in BUILT_IN_ESTIMATORS:\n"
            "    policy = {'mode': 'generate'} if built_in.name == 'hiper' else {}\n"
            "    TrainConfig.from_dict({'algorithm': {'name': built_in.name, 'config': dict(built_in.own)},\n"
            "                           'policy': policy})\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    algos.run(argparse.Namespace())\n"
            "print(sorted(m for m in modules if m in sys.modules))\n"
            "get_estimator('gigpo').function\n"
            "print(sorted(m for m in modules if m in sys.modules))\n")
    stdout = _fresh_python(code)
    assert stdout.split("\n")[:2] == ["[]", "['ptgpo_algos.advantages.gigpo']"]


def test_each_built_in_optimiser_names_a_factory_that_builds_one():
    # The table is what configs are checked against without importing torch's optimisers: it must resolve.
    import importlib

    from ptgpo_algos.updates.optimizer_registry import BUILT_IN_OPTIMIZERS, OPTIMIZERS

    assert list(BUILT_IN_OPTIMIZERS) == OPTIMIZERS.names()[:len(BUILT_IN_OPTIMIZERS)] == ["adamw", "sgd"]
    parameter = torch.nn.Parameter(torch.zeros(2))
    for name, target in BUILT_IN_OPTIMIZERS.items():
        module, _, attribute = target.partition(":")
        factory = getattr(importlib.import_module(module), attribute)
        assert OPTIMIZERS.get(name) is factory
        optimizer = factory([{"params": [parameter]}], lr=0.1, weight_decay=0.0)
        assert isinstance(optimizer, torch.optim.Optimizer) and type(optimizer).__name__.lower() == name


def test_checking_a_config_s_optimiser_its_state_and_listing_them_import_none_of_the_optimisers():
    code = ("import argparse, contextlib, io, sys\n"
            "from ptgpo_algos.config import TrainConfig\n"
            "from ptgpo_harness.commands import algos\n"
            "from ptgpo_algos.updates.optimizer_registry import optimizer_state\n"
            "for name in ('adamw', 'sgd'):\n"
            "    TrainConfig.from_dict({'optim': {'optimizer': name}})\n"
            "    optimizer_state(name)\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    algos.run(argparse.Namespace())\n"
            "print('ptgpo_algos.updates.optimizer' in sys.modules)\n")
    stdout = _fresh_python(code)
    assert stdout.strip() == "False"


def test_each_built_in_loss_declares_what_its_function_s_signature_says():
    # The table is what configs are checked against without importing the losses: it must not drift.
    import importlib

    from ptgpo_algos.updates.loss_registry import BUILT_IN_LOSSES, LossSpec, get_loss

    assert [spec.name for spec in BUILT_IN_LOSSES] == LOSSES.names()[:len(BUILT_IN_LOSSES)]
    for declared in BUILT_IN_LOSSES:
        module, _, attribute = declared.implementation.partition(":")
        function = getattr(importlib.import_module(module), attribute)
        read = LossSpec.of(declared.name, function, declared.keys)
        assert (read.common_parameters, dict(read.defaults), dict(read.keys)) == \
               (declared.common_parameters, dict(declared.defaults), dict(declared.keys)), declared.name
        assert get_loss(declared.name).function is function


def test_checking_the_default_config_imports_no_loss_and_no_optimiser():
    # Building a config checks the loss and the optimiser by their registries' tables; the update's
    # modules come with a run.
    code = ("import sys\n"
            "from ptgpo_algos.config import TrainConfig\n"
            "TrainConfig.from_dict({})\n"
            "TrainConfig.from_dict({'algorithm': {'loss': 'ppo-clip'}, 'optim': {'clip_ratio_c': 2.0}})\n"
            "print(sorted(m for m in ('ptgpo_algos.updates.losses', 'ptgpo_algos.updates.optimizer',\n"
            "                         'ptgpo_algos.updates.updater', 'ptgpo_algos.updates.samples') if m in sys.modules))\n")
    stdout = _fresh_python(code)
    assert stdout.strip() == "[]"


def test_each_built_in_objective_declares_the_keys_its_class_takes():
    # The table is what configs are checked against without importing the objectives: it must not drift.
    import importlib
    import inspect

    from ptgpo_algos.objectives import OBJECTIVES
    from ptgpo_algos.objectives.base import Objective
    from ptgpo_algos.objectives.registry import BUILT_IN_OBJECTIVES

    assert [spec.name for spec in BUILT_IN_OBJECTIVES] == OBJECTIVES.names()[:len(BUILT_IN_OBJECTIVES)]
    for declared in BUILT_IN_OBJECTIVES:
        module, _, attribute = declared.build.partition(":")
        builder = getattr(importlib.import_module(module), attribute)
        parameters = inspect.signature(builder).parameters.values()
        assert [p.name for p in parameters] == list(declared.defaults), declared.name
        assert all(p.kind is p.KEYWORD_ONLY for p in parameters), declared.name
        given = {p.name: p.default for p in parameters if p.default is not p.empty}
        assert given == {key: declared.defaults[key] for key in given}, declared.name
        assert OBJECTIVES.get(declared.name).builder is builder and issubclass(builder, Objective)
        # Every default passes its own rule unchanged, so the builder gets what the config check gives.
        assert {key: declared.keys[key].convert(value) for key, value in declared.defaults.items()} == \
               dict(declared.defaults), declared.name


def test_checking_a_config_s_objectives_imports_none_of_their_modules():
    # Every built-in named with each of its keys set to its default, then listed; its module comes when
    # a run builds it.
    code = ("import argparse, contextlib, io, sys\n"
            "from ptgpo_algos.config import TrainConfig\n"
            "from ptgpo_algos.objectives.registry import BUILT_IN_OBJECTIVES\n"
            "from ptgpo_harness.commands import algos\n"
            "modules = ['ptgpo_algos.objectives.base'] + [spec.build.partition(':')[0] for spec in BUILT_IN_OBJECTIVES]\n"
            "for spec in BUILT_IN_OBJECTIVES:\n"
            "    TrainConfig.from_dict({'algorithm': {'objectives': [{'name': spec.name, **spec.defaults}]}})\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    algos.run(argparse.Namespace())\n"
            "print(sorted(m for m in modules if m in sys.modules))\n"
            "from ptgpo_algos.objectives import Objectives\n"
            "Objectives.from_config([{'name': 'mcgpo'}])\n"
            "print(sorted(m for m in modules if m in sys.modules))\n")
    stdout = _fresh_python(code)
    assert stdout.split("\n")[:2] == [
        "[]", "['ptgpo_algos.objectives.base', 'ptgpo_algos.objectives.mcgpo']"]

"""Environments on Ray actors (``env_workers: {backend: ray}``): the same results as in process, a dead
actor replaced mid-rollout with nothing lost or doubled, and the config's checks.

Runs on a local two-CPU cluster (the ``ray_cluster`` fixture: ``ray.init(num_cpus=2)``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from ptgpo_envs.ray_vector import RayVectorTextEnv
from ptgpo_envs.vector import InProcessVectorTextEnv

HOUSEHOLD = "ptgpo/Household-v0"


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from ptgpo_algos.policy import load_policy
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    path = build_tiny_model(TinyModelSpec(hidden_size=32, pretrain_steps=0), env_ids=[HOUSEHOLD],
                            cache_dir=tmp_path_factory.mktemp("cache"))
    return load_policy(path)


def _played(policy, backend: str, **options):
    from ptgpo_algos.records import Task
    from ptgpo_algos.rollouts.collection import collect_rollouts

    tasks = [Task(HOUSEHOLD, seed, {"difficulty": "easy"}, 8) for seed in (3, 4)]
    batch, stats = collect_rollouts(policy, tasks, group_size=4, mode="tree", rng=np.random.default_rng(1),
                                    generator=torch.Generator().manual_seed(1), env_backend=backend,
                                    env_workers=2, **options)
    return [[[(s.state_key, s.action, s.reward, s.achieved) for s in t] for t in g] for g in batch], stats.decisions


def test_ray_actors_step_environments_exactly_as_in_process(ray_cluster, policy):
    # Tree rollouts snapshot every step and restore branches into other slots, on other actors.
    assert _played(policy, "ray") == _played(policy, "in-process")


def test_a_killed_actor_is_replaced_and_its_episodes_replayed(ray_cluster, policy, monkeypatch):
    import ptgpo_algos.rollouts.collection as rollout

    made = []

    def recording(*args, **kwargs):
        made.append(rollout_make(*args, **kwargs))
        return made[-1]

    rollout_make = rollout.make_vector_env
    monkeypatch.setattr(rollout, "make_vector_env", recording)

    class Killer:
        """The policy, killing actor 1 before its third decision and actor 0 before its sixth."""

        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def decide(self, contexts, generator=None):
            self.calls += 1
            if self.calls in (3, 6):
                made[0].kill_worker(self.calls % 2)
            return self.inner.decide(contexts, generator=generator)

    killed = _played(Killer(policy), "ray")
    assert made[0].replacements == 2
    assert killed == _played(policy, "in-process")


def test_snapshots_travel_by_value_between_actors(ray_cluster):
    kwargs = {"difficulty": "hard"}
    with RayVectorTextEnv(HOUSEHOLD, 4, num_workers=2, env_kwargs=kwargs) as far, \
            InProcessVectorTextEnv(HOUSEHOLD, 4, env_kwargs=kwargs) as near:
        assert len(set(far.actor_pids())) == 2
        slots = [0, 1, 2, 3]
        assert far.reset(slots, [5, 6, 7, 8]) == (starts := near.reset(slots, [5, 6, 7, 8]))
        infos = [info for _, info in starts]
        rng = random.Random(0)
        for k in range(10):
            actions = [rng.choice(info["admissible_actions"]) for info in infos]
            if k == 3:
                # Slot 0 lives on actor 0; its snapshot goes to slot 1, on actor 1.
                assert far.restore([1], far.snapshot([0])) == near.restore([1], near.snapshot([0]))
            if k == 6:
                far.kill_worker(1)
            steps = far.step(slots, actions)
            assert steps == near.step(slots, actions)
            infos = [step[4] for step in steps]
        assert far.replacements == 1
        assert far.call("expert_action", slots) == near.call("expert_action", slots)


def test_an_environment_error_is_raised_not_replayed(ray_cluster):
    from ptgpo_envs.vector import WorkerError

    with RayVectorTextEnv(HOUSEHOLD, 2, num_workers=2) as vector:
        with pytest.raises(WorkerError, match="reset"):
            vector.step([0], ["look"])  # before any reset
        assert vector.replacements == 0
    with pytest.raises(WorkerError, match="could not create"):
        RayVectorTextEnv(HOUSEHOLD, 2, env_kwargs={"difficulty": "impossible"})


def test_the_ray_backend_plays_an_evaluation_as_in_process(ray_cluster):
    from baselines.expert_agent import ExpertAgent
    from ptgpo_algos.rollouts.evaluation import evaluate

    def played(backend):
        # The expert reads each slot's environment through a proxy that runs on its actor.
        result = evaluate(ExpertAgent(), HOUSEHOLD, range(6), {"difficulty": "easy"}, batch_size=3,
                          env_backend=backend, env_workers=2, env_options={"num_cpus": 0.5})
        return [(e.seed, e.won, e.length, e.total_reward) for e in result.episodes]

    assert played("ray") == played("in-process")


def test_env_workers_config_checks_rays_fields():
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.rollouts.settings import EnvWorkersConfig

    config = TrainConfig.from_dict({"env_workers": {"backend": "ray", "num_workers": 64, "address": "auto"}})
    assert config.env_workers.options == {"address": "auto", "num_cpus": 1.0}
    assert EnvWorkersConfig(backend="processes").options == {}
    with pytest.raises(ValueError, match="env_workers.backend"):
        EnvWorkersConfig(backend="rays")
    with pytest.raises(ValueError, match="env_workers.num_cpus"):
        EnvWorkersConfig(backend="ray", num_cpus=0)
    with pytest.raises(ValueError, match="env_workers.address"):
        EnvWorkersConfig(backend="ray", address="")
    with pytest.raises(ValueError, match="set backend: ray"):
        EnvWorkersConfig(backend="processes", address="auto")

"""Classic-RL baseline: stable-baselines3 PPO over admissible-action slots of a hashed text state.

:class:`SlotActionEnv` exposes a PTGPO text environment through numeric spaces so that an
unmodified SB3 model can train on it:

* observation: ``Box`` vector from :class:`~baselines.text_features.SlotFeaturizer` (hashed bag of
  words of the task and the observation, plus a hashed description and a presence flag per slot);
* action: ``Discrete(max_slots)``; slot ``k`` plays admissible action ``k mod n``, where ``n`` is the
  number of admissible actions that fit in the slots. Wrapping around (instead of an invalid action)
  keeps every choice meaningful without sb3-contrib's action masks; an agent that needs actions beyond
  ``max_slots`` cannot reach them, so size ``max_slots`` to the environment;
* each ``reset`` plays a task seed drawn uniformly from ``task_seeds`` (the training seeds), so SB3
  trains on exactly the task distribution the LLM methods train on; ``reset(seed=s)`` reseeds that
  draw.

:func:`run` trains ``PPO("MlpPolicy", env).learn(total_timesteps=...)`` where one timestep is one
policy decision: the harness's matched budget, rounded down to whole PPO rollouts (SB3 never stops
mid-rollout). It evaluates the greedy policy on the held-out seeds at a few points along the way (the
learning curve) and at the end, through the same :func:`ptgpo_algos.rollouts.evaluation.evaluate` loop as
every other method.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from baselines.registry import BaselineOutcome, BaselineRun
from baselines.text_features import SlotFeaturizer
from ptgpo_algos.files import atomic_write_text
from ptgpo_algos.rollouts.evaluation import EpisodeView, evaluate
from ptgpo_envs import make_env

__all__ = ["SlotActionEnv", "SB3Agent", "slot_action", "run", "DEFAULT_PPO_KWARGS"]

#: Shorter rollouts than SB3's default of 2048 steps, so that the few thousand decisions of a CPU
#: benchmark still give PPO several updates, and the LLM methods' discount. The config's
#: ``options: {ppo: {...}}`` overrides any of them.
DEFAULT_PPO_KWARGS: dict[str, Any] = {
    "n_steps": 256,
    "batch_size": 64,
    "n_epochs": 4,
    "gamma": 0.95,
    "learning_rate": 3e-4,
    "ent_coef": 0.01,
}


def slot_action(slot: int, admissible: Sequence[str], max_slots: int) -> str:
    """The admissible action that ``slot`` plays (see the module docstring); ``""`` if there is none.

    An empty string is an invalid action: the environment spends a step and answers that it was not
    understood, which is the contract's behaviour for an agent with nothing to choose.
    """
    reachable = list(admissible[:max_slots])
    if not reachable:
        return ""
    return reachable[int(slot) % len(reachable)]


class SlotActionEnv(gym.Wrapper):
    """A text environment seen through ``Box`` observations and ``Discrete`` slot actions."""

    def __init__(
        self,
        env: gym.Env,
        featurizer: SlotFeaturizer,
        task_seeds: Sequence[int],
        seed: int = 0,
    ):
        super().__init__(env)
        if not task_seeds:
            raise ValueError("task_seeds must name at least one seed to train on")
        self.featurizer = featurizer
        self.task_seeds = task_seeds  # indexed, never copied: a range of a million seeds stays O(1)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(featurizer.size,), dtype=np.float32)
        self.action_space = spaces.Discrete(featurizer.max_slots)
        self._rng = np.random.default_rng(seed)
        self._info: dict[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode on a training seed drawn from the task seeds; its feature vector and info."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        task_seed = int(self.task_seeds[int(self._rng.integers(len(self.task_seeds)))])
        observation, info = self.env.reset(seed=task_seed, options=options)
        self._info = info
        return self._features(observation, info), {**info, "task_seed": task_seed}

    def step(self, action: int):
        """Play the admissible action in slot ``action``; features, reward, flags and info."""
        text = slot_action(action, self._info["admissible_actions"], self.featurizer.max_slots)
        observation, reward, terminated, truncated, info = self.env.step(text)
        self._info = info
        info = {**info, "action_text": text}
        return self._features(observation, info), reward, terminated, truncated, info

    def _features(self, observation: str, info: dict[str, Any]) -> np.ndarray:
        return self.featurizer(info["task"], observation, info["admissible_actions"])


class SB3Agent:
    """An evaluation :class:`~ptgpo_algos.rollouts.evaluation.Agent` that plays a trained SB3 slot policy greedily."""

    def __init__(self, model: Any, featurizer: SlotFeaturizer, name: str = "sb3_ppo"):
        self.model = model
        self.featurizer = featurizer
        self.name = name

    def act(self, episodes: Sequence[EpisodeView]) -> list[str]:
        """The trained SB3 policy's action for each episode, mapped from its slot to text."""
        features = np.stack(
            [
                self.featurizer(view.info["task"], view.observation, view.info["admissible_actions"])
                for view in episodes
            ]
        )
        slots, _ = self.model.predict(features, deterministic=True)
        return [
            slot_action(int(slot), view.info["admissible_actions"], self.featurizer.max_slots)
            for slot, view in zip(np.atleast_1d(slots), episodes)
        ]


def _options(job: BaselineRun) -> tuple[SlotFeaturizer, int, dict[str, Any]]:
    """``job.options`` and the budget checked: the featurizer, the number of evaluations and PPO's keyword
    arguments."""
    options = dict(job.options)
    featurizer = SlotFeaturizer(
        max_slots=options.pop("max_slots", SlotFeaturizer.max_slots),
        text_dims=options.pop("text_dims", SlotFeaturizer.text_dims),
        slot_dims=options.pop("slot_dims", SlotFeaturizer.slot_dims),
    )
    eval_points = options.pop("eval_points", 4)
    if not isinstance(eval_points, int) or isinstance(eval_points, bool) or eval_points < 1:
        raise ValueError(f"sb3_ppo option eval_points must be a positive integer, got {eval_points!r}")
    ppo_kwargs = {**DEFAULT_PPO_KWARGS, **options.pop("ppo", {})}
    if options:
        raise ValueError(
            f"unknown sb3_ppo option(s) {sorted(options)}; known: max_slots, text_dims, slot_dims, "
            "eval_points, ppo"
        )
    if job.budget < 1:
        raise ValueError(f"sb3_ppo needs a positive decision budget, got {job.budget}")
    return featurizer, eval_points, ppo_kwargs


def _spread_budget(budget: int, ppo_kwargs: dict[str, Any]) -> int:
    """The timesteps to train for, with ``n_steps`` (and ``batch_size``) set in ``ppo_kwargs``.

    SB3 always collects whole rollouts of n_steps, so it would overshoot a budget that n_steps does
    not divide: the budget is spread over equal rollouts instead (losing < one step per rollout).
    """
    rollouts = -(-budget // int(ppo_kwargs["n_steps"]))
    ppo_kwargs["n_steps"] = budget // rollouts
    ppo_kwargs["batch_size"] = min(int(ppo_kwargs["batch_size"]), ppo_kwargs["n_steps"])
    return ppo_kwargs["n_steps"] * rollouts


def run(job: BaselineRun) -> BaselineOutcome:
    """Train SB3 PPO for ``job.budget`` decisions, logging an eval curve; return the final evaluation.

    ``job.options`` may hold ``max_slots``, ``text_dims``, ``slot_dims`` (the featurizer),
    ``eval_points`` (evaluations along training, default 4) and ``ppo`` (keyword arguments of
    :class:`stable_baselines3.PPO`, over :data:`DEFAULT_PPO_KWARGS`).
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    featurizer, eval_points, ppo_kwargs = _options(job)
    torch.manual_seed(job.seed)
    env = SlotActionEnv(
        make_env(job.env_id, job.env_kwargs, job.max_steps), featurizer, job.train_seeds, seed=job.seed
    )
    total_timesteps = _spread_budget(job.budget, ppo_kwargs)
    model = PPO("MlpPolicy", env, seed=job.seed, device="cpu", verbose=0, **ppo_kwargs)
    agent = SB3Agent(model, featurizer)

    job.out_dir.mkdir(parents=True, exist_ok=True)
    curve_path = job.out_dir / "curve.jsonl"
    curve_rows: list[dict[str, Any]] = []

    def evaluate_now() -> dict[str, Any]:
        summary = evaluate(
            agent, job.env_id, job.eval_seeds, job.evaluation_kwargs, max_steps=job.max_steps
        ).summary()
        curve_rows.append(
            {
                "iteration": int(model.num_timesteps) // ppo_kwargs["n_steps"],  # PPO updates so far
                "decisions": int(model.num_timesteps),
                "tokens": None,
                "success": summary["success"],
                "return": summary["return"],
                "score": summary["score"],
            }
        )
        # Rewritten whole and atomically, so an interrupted run never leaves a torn curve.
        atomic_write_text(curve_path, "".join(json.dumps(row) + "\n" for row in curve_rows))
        return summary

    marks = sorted({max(1, total_timesteps * k // eval_points) for k in range(1, eval_points)})

    class EvalCurve(BaseCallback):
        def _on_step(self) -> bool:
            while marks and self.num_timesteps >= marks[0]:
                marks.pop(0)
                evaluate_now()
            return True

    evaluate_now()
    model.learn(total_timesteps=total_timesteps, callback=EvalCurve(), progress_bar=False)
    final = evaluate_now()
    env.close()
    return BaselineOutcome(
        final_eval=final,
        best_success=max(row["success"] for row in curve_rows),
        decisions=int(model.num_timesteps),
        tokens=None,
        curve_path=str(curve_path),
    )

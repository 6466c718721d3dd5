"""A new text environment: subclass TextEnv, register it, check it, and train on it.

    python examples/custom_env.py

``TextEnv`` owns the contract (action matching, bad input, the horizon, ``info``, forking); a new
environment implements the hooks that describe its world. In a package of your own, call
``ptgpo_envs.register`` from a module named in your ``pyproject.toml``
(``[project.entry-points."ptgpo.environments"]``) and the ``ptgpo`` commands see it.
"""

import gymnasium
from gymnasium.utils.env_checker import check_env

import ptgpo_envs
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.training.trainer import run_training


class Corridor(ptgpo_envs.TextEnv):
    """A corridor of ``length`` cells: start at the left end, win at the right one."""

    default_max_steps = 12

    def __init__(self, length: int = 5, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(length, int) or length < 2:
            raise ValueError(f"length must be an integer >= 2, got {length!r}")  # fails at make, named
        self.length = length

    # The world: what an episode is, what can be done, what happens. Everything that changes during
    # an episode lives in self._world, which snapshot()/restore() copy for forking (tree rollouts);
    # an environment whose state is elsewhere overrides _get_state/_set_state.
    def _new_episode(self, options):
        self._world = 0  # the agent's cell
        return f"You are at cell 0 of a corridor of {self.length} cells."

    def _admissible_actions(self):
        return ["go left", "go right"]

    def _apply(self, action):  # -> (observation, reward, terminated)
        self._world = max(0, self._world + (1 if action == "go right" else -1))
        won = self._won()
        return f"You are at cell {self._world}.", float(won), won

    def _task(self):
        return f"reach cell {self.length - 1}"

    def _state_key(self):  # equal keys = the same state, for step-level credit (GiGPO, PTGPO)
        return str(self._world)

    def _won(self):
        return self._world == self.length - 1

    def expert_action(self):
        """The optimal action: always right."""
        return "go right"


ptgpo_envs.register(ptgpo_envs.EnvSpec("example/Corridor-v0", f"{__name__}:Corridor", "walk right to the end"))

env = gymnasium.make("example/Corridor-v0", length=4)
check_env(env.unwrapped, skip_render_check=True)  # Gymnasium's own checks
observation, info = env.reset(seed=0)
print(observation, "| task:", info["task"], "| actions:", info["admissible_actions"])
observation, reward, terminated, truncated, info = env.step("fly")
print("> fly:", observation, "| valid:", info["action_valid"])

# Tree rollouts (PTGPO's default) fork episodes with snapshot()/restore().
summary = run_training(TrainConfig.from_dict({
    "env": {"id": "example/Corridor-v0", "kwargs": {"length": 4}},
    "algorithm": {"name": "ptgpo"},
    "policy": {"tiny": {"hidden_size": 32, "pretrain_steps": 0}},
    "rollouts": {"group_size": 4, "tasks_per_iteration": 2},
    "evaluation": {"every": 2, "seeds": 4},
    "run": {"iterations": 2, "out_dir": "runs/example-corridor"},
}), progress=False)
print(f"trained {summary.iterations} iterations of PTGPO on example/Corridor-v0, {summary.decisions} decisions")

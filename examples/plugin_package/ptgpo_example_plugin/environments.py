"""The Corridor environment: walk right to the end of ``length`` cells."""

import ptgpo_envs


class Corridor(ptgpo_envs.TextEnv):
    """A corridor of ``length`` cells: start at the left end, win at the right one."""

    default_max_steps = 12

    def __init__(self, length: int = 5, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(length, int) or length < 2:
            raise ValueError(f"length must be an integer >= 2, got {length!r}")
        self.length = length

    def _new_episode(self, options):
        self._world = 0
        return f"You are at cell 0 of a corridor of {self.length} cells."

    def _admissible_actions(self):
        return ["go left", "go right"]

    def _apply(self, action):
        self._world = max(0, self._world + (1 if action == "go right" else -1))
        won = self._won()
        return f"You are at cell {self._world}.", float(won), won

    def _task(self):
        return f"reach cell {self.length - 1}"

    def _state_key(self):
        return str(self._world)

    def _won(self):
        return self._world == self.length - 1

    def expert_action(self):
        """The optimal action: always right."""
        return "go right"


def register() -> None:
    """The ``ptgpo.environments`` entry point: add ``plugin/Corridor-v0``."""
    ptgpo_envs.register(ptgpo_envs.EnvSpec("plugin/Corridor-v0", "ptgpo_example_plugin.environments:Corridor",
                                           "walk right to the end of a corridor (an example plugin)"))

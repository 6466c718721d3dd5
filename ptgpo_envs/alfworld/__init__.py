"""ALFWorld on its real engine (``alfworld`` + TextWorld's PDDL engine): ``ptgpo/ALFWorld-v0``.

* :mod:`~ptgpo_envs.alfworld.env` - :class:`ALFWorldEnv`, the Gymnasium environment.
* :mod:`~ptgpo_envs.alfworld.data` - splits, the official folder layout, game lists.
* :mod:`~ptgpo_envs.alfworld.engine` - the TextWorld engine stack ALFWorld uses.
* :mod:`~ptgpo_envs.alfworld.grammar` - ``put X in/on Y`` and ``move X to Y`` matched to each other.
* :mod:`~ptgpo_envs.alfworld.generator` - new ALFWorld-format games for training.

Importing this package does not import ``alfworld``; the engine is loaded on the first ``reset``.
"""

from ptgpo_envs.alfworld.data import SPLITS, TASK_TYPES, GameRecord, list_games, resolve_split_dir
from ptgpo_envs.alfworld.env import ALFWorldEnv

__all__ = ["ALFWorldEnv", "GameRecord", "SPLITS", "TASK_TYPES", "list_games", "resolve_split_dir"]

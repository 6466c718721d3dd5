"""Text Sokoban: the environment, its room generator and its solver (see :mod:`.env`)."""

from ptgpo_envs.sokoban.env import SokobanEnv
from ptgpo_envs.sokoban.generator import generate_puzzle
from ptgpo_envs.sokoban.room import Puzzle, Room
from ptgpo_envs.sokoban.solver import solve, solve_pushes

__all__ = ["SokobanEnv", "Puzzle", "Room", "generate_puzzle", "solve", "solve_pushes"]

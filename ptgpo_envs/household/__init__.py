"""``ptgpo/Household-v0``: a fast, procedurally generated, ALFWorld-like household in pure Python.

ALFWorld's commands (``go to``, ``open``, ``close``, ``take X from Y``, ``move X to Y``, ``heat``,
``cool``, ``clean``, ``use``, ``examine``, ``look``, ``inventory``), its six task types and its text
style, on rooms generated from a seed; see :class:`HouseholdEnv`.
"""

from ptgpo_envs.household.env import HouseholdEnv
from ptgpo_envs.household.world import DIFFICULTIES, TASK_TYPES

__all__ = ["HouseholdEnv", "DIFFICULTIES", "TASK_TYPES"]

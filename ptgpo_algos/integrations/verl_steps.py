"""Moved to :mod:`ptgpo_algos.integrations.verl.steps`: this older path is that module (with a
``DeprecationWarning``), so imports and verl configs that name it keep working."""

from ptgpo_algos.old_paths import moved

moved(__name__, "ptgpo_algos.integrations.verl.steps")

"""Optimisers registered by name: what ``optim.optimizer`` names, checked without importing torch.

An optimiser is a factory ``fn(param_groups, *, lr, weight_decay) -> torch.optim.Optimizer``:
``param_groups`` is torch's list of parameter groups (the policy's trainable parameters first, then any
group with settings of its own, a critic's value head), and ``lr`` and ``weight_decay`` are the
``optim`` section's, each group's own values aside; the learning-rate schedule scales every group's
rate alike (:mod:`ptgpo_algos.updates.optimizer`). A torch optimiser class is such a factory already.

:data:`OPTIMIZERS` is an open registry (:mod:`ptgpo_envs.plugins`). The built-in optimisers are declared
in one table here, :data:`BUILT_IN_OPTIMIZERS`, each by its name and its factory's import string, so
that checking a config's name imports no implementation; the factory is imported when a run builds
its optimiser. Another package adds one from its own module, or through the ``ptgpo.optimizers``
entry points::

    @register_optimizer("lion")
    def lion(param_groups, *, lr, weight_decay):
        return Lion(param_groups, lr=lr, weight_decay=weight_decay)
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable

from ptgpo_envs.plugins import Registry

__all__ = ["BUILT_IN_OPTIMIZERS", "OPTIMIZERS", "register_optimizer"]

#: Optimiser factories by name; other packages add theirs through the ``ptgpo.optimizers`` entry points.
OPTIMIZERS: Registry[Callable[..., Any]] = Registry("optimiser", "ptgpo.optimizers")

#: The built-in optimisers: name -> their factory's ``"module:attribute"``, imported when a run builds one.
BUILT_IN_OPTIMIZERS: MappingProxyType[str, str] = MappingProxyType({
    "adamw": "ptgpo_algos.updates.optimizer:adamw",
    "sgd": "ptgpo_algos.updates.optimizer:sgd",
})

for _name, _target in BUILT_IN_OPTIMIZERS.items():
    OPTIMIZERS.register_lazy(_name, _target)


def register_optimizer(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``@register_optimizer("name")`` registers the decorated factory under ``name`` (see the module)."""
    return OPTIMIZERS.decorator(name)

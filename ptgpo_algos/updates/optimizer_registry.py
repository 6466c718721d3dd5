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

    @register_optimizer("lion", state=OptimizerState("Lion", "Lion momentum (float32)", 4))
    def lion(param_groups, *, lr, weight_decay):
        return Lion(param_groups, lr=lr, weight_decay=weight_decay)

Each optimiser declares what it keeps per trainable value between steps (:class:`OptimizerState`), which
the memory and disk plans count (:mod:`ptgpo_algos.training.memory_plan`): AdamW two float32 moments,
the built-in SGD nothing (it has no momentum), an SGD with momentum one float32 buffer; the built-ins'
are in :data:`BUILT_IN_STATES`. An optimiser that declares nothing (registered without ``state``, or
with ``OPTIMIZERS.register``) is planned as if it kept AdamW's two float32 moments (8 bytes a value:
more than SGD's momentum or Lion's, less than AMSGrad's three buffers), and the plan's line says that
it was assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable

from ptgpo_envs.plugins import Registry, RegistryError

__all__ = ["ADAMW_STATE", "BUILT_IN_OPTIMIZERS", "BUILT_IN_STATES", "OPTIMIZERS", "OptimizerState", "optimizer_state",
           "register_optimizer"]


@dataclass(frozen=True)
class OptimizerState:
    """What an optimiser keeps between steps, per trainable value: ``optimizer`` names the optimiser in a
    plan's lines (``"AdamW"``), ``label`` names its state's line (``"AdamW moments (float32)"``), and
    ``bytes_per_value`` is that state's size per trainable value (8: two float32 moments)."""

    optimizer: str
    label: str
    bytes_per_value: int

    def __post_init__(self) -> None:
        for name in ("optimizer", "label"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise RegistryError(f"OptimizerState.{name}: expected a non-empty string, got {value!r}")
        if not isinstance(self.bytes_per_value, int) or isinstance(self.bytes_per_value, bool) \
                or self.bytes_per_value < 0:
            raise RegistryError("OptimizerState.bytes_per_value: expected the bytes of state per trainable value, "
                                f"an integer >= 0 (AdamW's: 8), got {self.bytes_per_value!r}")


#: AdamW's state: two float32 moments per trainable value; also what an optimiser that declares none is
#: assumed to keep.
ADAMW_STATE = OptimizerState("AdamW", "AdamW moments (float32)", 8)

#: Optimiser factories by name; other packages add theirs through the ``ptgpo.optimizers`` entry points.
OPTIMIZERS: Registry[Callable[..., Any]] = Registry("optimiser", "ptgpo.optimizers")

#: The built-in optimisers: name -> their factory's ``"module:attribute"``, imported when a run builds one.
BUILT_IN_OPTIMIZERS: MappingProxyType[str, str] = MappingProxyType({
    "adamw": "ptgpo_algos.updates.optimizer:adamw",
    "sgd": "ptgpo_algos.updates.optimizer:sgd",
})

#: What each built-in optimiser keeps per trainable value between steps (the factories' docstrings say why).
BUILT_IN_STATES: MappingProxyType[str, OptimizerState] = MappingProxyType({
    "adamw": ADAMW_STATE,
    "sgd": OptimizerState("SGD", "SGD state (none: no momentum)", 0),
})

#: What each optimiser declares it keeps: the built-ins', and those registered with ``state``.
_STATES: dict[str, OptimizerState] = dict(BUILT_IN_STATES)

for _name, _target in BUILT_IN_OPTIMIZERS.items():
    OPTIMIZERS.register_lazy(_name, _target)


def register_optimizer(name: str, *, state: OptimizerState | None = None
                       ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``@register_optimizer("name", state=OptimizerState(...))`` registers the decorated factory under
    ``name`` with the state it keeps per trainable value (without ``state``: planned as AdamW's; see the
    module)."""
    if state is not None and not isinstance(state, OptimizerState):
        raise RegistryError(f"optimiser {name!r}: state must be an OptimizerState, got {state!r}")
    register = OPTIMIZERS.decorator(name)

    def decorate(factory: Callable[..., Any]) -> Callable[..., Any]:
        register(factory)
        if state is None:
            _STATES.pop(name, None)
        else:
            _STATES[name] = state
        return factory

    return decorate


def optimizer_state(name: str) -> OptimizerState:
    """The state the optimiser ``name`` declares; for one that declares none, AdamW's, labelled as assumed
    (a plan then counts the common case, not nothing). Imports no optimiser."""
    if name not in OPTIMIZERS:
        raise RegistryError(OPTIMIZERS.unknown(name))
    declared = _STATES.get(name)
    if declared is not None:
        return declared
    return OptimizerState(f"{name} (AdamW's state assumed)", f"{name} state (undeclared: AdamW's assumed)",
                          ADAMW_STATE.bytes_per_value)

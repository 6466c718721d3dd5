"""The policy-gradient losses by name (:data:`LOSSES`), what ``algorithm.loss`` names, checked with their
keys without importing torch or any loss's module.

A registered loss is the policy-gradient term only, as in verl: it takes ``(logprobs, old_logprobs,
advantages)`` and its keys, and returns the per-unit loss and which units were clipped (``None`` when
it has no clip); the update (:class:`ptgpo_algos.updates.losses.PolicyLoss`) does the rest. A loss's
keys are its parameters after the three tensors, with their defaults: ``clip_ratio`` and
``clip_ratio_c`` come from the ``optim`` section (a loss takes them by naming them), any other is the
loss's own and is set in ``algorithm.loss_config`` under the rule given at registration (the
estimators' rules, :class:`~ptgpo_algos.advantages.config.ConfigKey`)::

    @register_loss("my-loss", keys={"clip_low": ConfigKey("lower clip", "a number in (0, 1)", rule)})
    def my_loss(logprobs, old_logprobs, advantages, *, clip_ratio=0.2, clip_low=0.1):
        ...
        return per_unit_loss, clipped

The built-in losses are declared in one table here, :data:`BUILT_IN_LOSSES`: each by its name, its
function's import string, the common keys it takes and its own keys with their defaults (none has own
keys yet); its function is imported when a run first computes it (``tests/test_registries.py`` holds
each declaration equal to its function's signature).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from ptgpo_algos.advantages.config import ConfigKey, validate_config
from ptgpo_envs.plugins import Registry, RegistryError, imported

__all__ = ["BUILT_IN_LOSSES", "COMMON_LOSS_KEYS", "LOSSES", "LOSS_AGGREGATIONS", "LossSpec", "get_loss",
           "register_loss"]

#: How a batch's per-unit losses are averaged (:func:`ptgpo_algos.updates.samples.flatten_batch`).
LOSS_AGGREGATIONS = ("token-mean", "trajectory-mean")
#: Keys every loss may take by naming them, whose values are the ``optim`` section's fields.
COMMON_LOSS_KEYS = ("clip_ratio", "clip_ratio_c")
#: Policy-gradient losses by name (:class:`LossSpec`, or a plain function without keys of its own);
#: other packages add theirs through the ``ptgpo.losses`` entry points.
LOSSES: Registry = Registry("policy loss", "ptgpo.losses")

_TENSORS = 3  # logprobs, old_logprobs, advantages


@dataclass(frozen=True)
class LossSpec:
    """A registered policy-gradient loss: its function (or the function's ``"module:attribute"`` import
    string), the common keys it takes, and its own keys with their defaults and rules (``defaults`` and
    ``keys``, as an estimator's)."""

    name: str
    implementation: Callable[..., tuple[Any, Any]] | str
    common_parameters: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    keys: Mapping[str, ConfigKey] = field(default_factory=dict)

    @property
    def function(self) -> Callable[..., tuple[Any, Any]]:
        """The loss's function, its module imported here the first time where it is named by import string."""
        return imported(self.implementation) if isinstance(self.implementation, str) else self.implementation

    @classmethod
    def of(cls, name: str, function: Callable, keys: Mapping[str, ConfigKey] | None = None) -> LossSpec:
        """The spec of ``function``, read from its signature; ``RegistryError`` for a function that does
        not follow the protocol or has a key without a rule."""
        parameters = list(inspect.signature(function).parameters.values())
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = [p.name for p in positional if p.default is p.empty]
        if len(positional) < _TENSORS or len(required) > _TENSORS:
            raise RegistryError(
                f"policy loss {name!r}: a loss takes (logprobs, old_logprobs, advantages, *, keys...) and returns "
                f"(per-unit loss, clipped or None), got parameters ({', '.join(p.name for p in parameters)}); the "
                "update applies mask, weight, entropy, KL and importance weights itself (see ptgpo_algos.updates.losses)")
        named = {p.name: p.default for p in positional[_TENSORS:] + [p for p in parameters if p.kind is p.KEYWORD_ONLY]}
        rules = dict(keys or {})
        own = {key: default for key, default in named.items() if key not in COMMON_LOSS_KEYS}
        missing = sorted(set(own) - set(rules))
        if missing:
            raise RegistryError(f"policy loss {name!r}: keys {missing} have no rule; register it with "
                                "register_loss(name, keys={key: ConfigKey(...)})")
        common = tuple(key for key in named if key in COMMON_LOSS_KEYS)
        return cls(name, function, common, MappingProxyType(own), MappingProxyType({k: rules[k] for k in own}))

    def keywords(self, common: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
        """What the function is called with: the common keys it takes (from ``common``, the ``optim``
        section's values) and its own keys, ``config`` over their defaults, each checked by its rule."""
        own = validate_config(self, config, kind="policy loss")
        return {**{key: common[key] for key in self.common_parameters}, **own}


def register_loss(name: str, *, keys: Mapping[str, ConfigKey] | None = None) -> Callable:
    """Register the decorated function as the policy loss ``name`` (``keys``: the rules of its own keys)."""

    def decorator(function: Callable) -> Callable:
        LOSSES.register(name, LossSpec.of(name, function, keys))
        return function

    return decorator


def get_loss(name: str) -> LossSpec:
    """The loss registered as ``name`` (a plain registered function read as a spec without own keys)."""
    entry = LOSSES.get(name)
    return entry if isinstance(entry, LossSpec) else LossSpec.of(name, entry)


#: The built-in losses, each declared as :meth:`LossSpec.of` reads its function (which is imported when a
#: run first computes it).
BUILT_IN_LOSSES: tuple[LossSpec, ...] = (
    LossSpec("ppo-clip", "ptgpo_algos.updates.losses:ppo_clip_loss", COMMON_LOSS_KEYS),
)

for _spec in BUILT_IN_LOSSES:
    LOSSES.register(_spec.name, _spec)

"""What a training run needs of an environment beyond the contract, checked once on a built one.

A run's components declare what they need by name (an objective's or a rollout strategy's
``needs``); :func:`check_environment` checks a built environment against the union, so a plugin
author can run the same check on theirs::

    from ptgpo_envs import check_environment, make_env
    check_environment(make_env("my/Env-v0"), {"snapshot": "tree rollouts", "expert": "isdpo"})

The optional features (:data:`FEATURES`): ``snapshot`` (``snapshot()``/``restore()``: forking an
episode), ``expert`` (``expert_action()``), ``progress`` (``progress()``, reported after a reset)
and ``achieved_tasks`` (``achieved_tasks()``, reported after a reset). An environment that is not a
:class:`~ptgpo_envs.core.TextEnv` is played once to check the contract's observation and ``info``
keys; so is any environment when a feature is only reported after a reset (a reset can cost seconds
on engines such as ALFWorld, so only then).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ptgpo_envs.core import TextEnv

__all__ = ["FEATURES", "check_environment"]

#: Optional features of the contract: name -> (what it is, whether it is reported only after a reset,
#: whether an environment has it).
FEATURES: dict[str, tuple[str, bool, Callable[[Any], bool]]] = {
    "snapshot": ("snapshot()/restore() to fork an episode", False,
                 lambda env: hasattr(env, "snapshot") and hasattr(env, "restore")),
    "expert": ("an expert (expert_action())", False,
               lambda env: getattr(type(env), "expert_action", TextEnv.expert_action) is not TextEnv.expert_action),
    "progress": ("its progress() (with these kwargs)", True,
                 lambda env: getattr(env, "progress", lambda: None)() is not None),
    "achieved_tasks": ("the tasks its steps complete (achieved_tasks())", True,
                       lambda env: getattr(env, "achieved_tasks", lambda: None)() is not None),
}
#: The ``info`` keys of the contract's reset.
_INFO_KEYS = ("task", "admissible_actions", "state_key", "won")


def check_environment(env: Any, needs: Mapping[str, str], *, seed: int = 0, name: str | None = None) -> None:
    """Check the built ``env`` against ``needs`` (feature -> who needs it, for the message); needs
    that are not features of :data:`FEATURES` are left to their owners. Resets ``env`` at most once
    (with ``seed``). ``ValueError`` names the first missing feature, who needs it and the
    environment (``name``: its id)."""
    unwrapped = getattr(env, "unwrapped", env)
    name = name or type(unwrapped).__name__
    wanted = [feature for feature in needs if feature in FEATURES]
    if not isinstance(unwrapped, TextEnv) or any(FEATURES[feature][1] for feature in wanted):
        observation, info = env.reset(seed=seed)
        missing = [key for key in _INFO_KEYS if key not in info]
        if not isinstance(observation, str) or missing:
            raise ValueError(f"{name} is not a text environment of ptgpo's contract (its reset gave a "
                             f"{type(observation).__name__} observation; info lacks {missing})")
    for feature in wanted:
        what, _, present = FEATURES[feature]
        if not present(unwrapped):
            raise ValueError(f"{needs[feature]} needs {what}, which {name} does not have")

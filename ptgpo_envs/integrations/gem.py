"""Our environments in GEM's registry (``pip install gem-llm``, imported as ``gem``).

Importing this module registers every environment of :mod:`ptgpo_envs.registry` (plugins included)
in GEM's registry under ``ptgpo:<Name>`` (``ptgpo/Household-v0`` is ``ptgpo:Household-v0``), so that
GEM's own ``gem.make``, ``gem.make_vec`` and its observation wrappers build them::

    import gem, ptgpo_envs.integrations.gem
    env = gem.make("ptgpo:Household-v0", difficulty="easy")
    observation, info = env.reset(seed=0)
    child = env.spawn(same_state=True)     # a fork at this very step, through snapshot()/restore()

:class:`GemTextEnv` is a ``gem.Env`` around one of our environments; it keeps our contract (same seed,
same play; ``info`` with ``admissible_actions``, ``state_key``...; an inadmissible action uses up a step).
GEM's agents answer in free text and GEM's games read the action from the last ``\\boxed{...}``; so do
ours when the text holds one, else the whole text is the action. ``spawn(same_state=True)`` copies the
episode with ``snapshot()``/``restore()`` (GEM has it for its math environments only); ``get_state()``
and ``set_state()`` name the same snapshots as GEM's math environments name theirs.

Each GEM id builds its own environment only: its registered maker takes the environment's keywords and
``seed``, and refuses ``ptgpo_id`` (which would otherwise build another environment under the same id).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import gem
import gymnasium as gym
import numpy as np
from gem.envs.registration import ENV_REGISTRY

from ptgpo_envs.core import Snapshot, TextEnv
from ptgpo_envs.registry import env_ids, load_plugins

__all__ = ["GemTextEnv", "PREFIX", "gem_id", "gem_maker", "register_gem_envs"]

#: GEM's ids are ``namespace:Name``; ours are ``ptgpo/Name``.
PREFIX = "ptgpo:"

# The last \boxed{...} of a free-text answer, as GEM's games parse their actions; no nesting.
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def gem_id(env_id: str) -> str:
    """GEM's id of a registered environment: ``ptgpo/Household-v0`` -> ``ptgpo:Household-v0``."""
    namespace, _, name = env_id.rpartition("/")
    return f"{namespace or 'ptgpo'}:{name}"


def parse_action(text: str) -> str:
    """The action in an agent's ``text``: the last ``\\boxed{...}``'s content when there is one, else all."""
    if not isinstance(text, str):
        raise TypeError(f"actions are text: expected str, got {type(text).__name__}")
    found = _BOXED.findall(text)
    return found[-1] if found else text


class GemTextEnv(gem.Env):
    """One of our environments as a ``gem.Env``: ``reset(seed)``, ``step(text)``, ``spawn(same_state)``."""

    def __init__(self, ptgpo_id: str, seed: int | None = None, **kwargs: Any):
        # Not ``env_id``: gem.make sets that attribute to GEM's id, and gem.register takes it as its own.
        super().__init__()
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"{gem_id(ptgpo_id)}: seed must be a non-negative integer or None, got {seed!r:.80}")
        self.ptgpo_env_id = ptgpo_id
        self.env_kwargs = dict(kwargs)
        self.seed = seed
        try:
            self._wrapped = gym.make(ptgpo_id, disable_env_checker=True, **kwargs)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{gem_id(ptgpo_id)} with {kwargs!r:.200} cannot be made: {error}") from None
        env = self._wrapped.unwrapped
        if not isinstance(env, TextEnv):
            raise TypeError(f"{ptgpo_id} is a {type(env).__name__}, not a ptgpo_envs.core.TextEnv")
        self.env: TextEnv = env
        # GEM's make_vec gives each copy its own constructor seed: the first unseeded reset uses it.
        self._first_seed = seed
        self._rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """A new episode: ``seed``'s, else the constructor's on the first reset, else the next one."""
        if seed is None:
            seed, self._first_seed = self._first_seed, None
        else:
            self._first_seed = None
        return self.env.reset(seed=seed)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play the action in ``action`` (see :func:`parse_action`); ``info["parsed_action"]`` holds it."""
        parsed = parse_action(action)
        observation, reward, terminated, truncated, info = self.env.step(parsed)
        info["parsed_action"] = parsed
        return observation, reward, terminated, truncated, info

    def sample_random_action(self) -> str:
        """An admissible action drawn uniformly (this environment's own generator)."""
        actions = self.env.admissible_actions()
        if not actions:
            raise RuntimeError("the episode has ended: reset() before sampling an action")
        return actions[int(self._rng.integers(len(actions)))]

    def get_state(self) -> Snapshot:
        """The episode now, for :meth:`set_state` on an environment of the same id and kwargs."""
        return self.env.snapshot()

    def set_state(self, state: Snapshot) -> tuple[str, dict[str, Any]]:
        """Return to ``state``; its observation and ``info``."""
        return self.env.restore(state)

    def spawn(self, same_state: bool = False, **kwargs: Any) -> "GemTextEnv":
        """A new environment of the same id and kwargs (``kwargs`` override them); with ``same_state`` at
        this very step of this episode, so that the same actions give the same continuation."""
        _refuse_another_id(self.ptgpo_env_id, kwargs)
        if same_state and set(kwargs) - {"seed"}:
            raise ValueError(
                f"spawn(same_state=True) copies this episode, which kwargs {sorted(set(kwargs) - {'seed'})} would "
                "change: spawn without same_state to build a differently configured environment")
        seed = kwargs.pop("seed", self.seed)
        child = GemTextEnv(self.ptgpo_env_id, seed=seed, **{**self.env_kwargs, **kwargs})
        if same_state:
            child.set_state(self.get_state())
            child._first_seed = None
        return child

    def close(self) -> None:
        """Close the wrapped environment."""
        self._wrapped.close()


def _refuse_another_id(env_id: str, kwargs: dict[str, Any]) -> None:
    if "ptgpo_id" in kwargs:
        raise ValueError(f"{gem_id(env_id)} always builds {env_id}: drop ptgpo_id=, and make another "
                         "environment by its own GEM id (gem.make('ptgpo:<Name>'))")


def gem_maker(env_id: str) -> Callable[..., GemTextEnv]:
    """GEM's entry point for ``env_id``: a :class:`GemTextEnv` of that environment only, whatever the keywords."""

    def make(**kwargs: Any) -> GemTextEnv:
        _refuse_another_id(env_id, kwargs)
        return GemTextEnv(env_id, **kwargs)

    make.__name__ = make.__qualname__ = f"make_{gem_id(env_id).replace(':', '_')}"
    return make


def register_gem_envs() -> list[str]:
    """Register every environment of ours not yet in GEM's registry; GEM's ids of those it registered."""
    load_plugins()
    added = []
    for env_id in env_ids():
        name = gem_id(env_id)
        if name not in ENV_REGISTRY:
            gem.register(name, gem_maker(env_id))
            added.append(name)
    return added


register_gem_envs()

"""The catalogue of text environments and their Gymnasium registration: an open registry.

Each :class:`EnvSpec` names an entry point by string, so registering imports nothing heavy: the
ALFWorld engine, for example, is imported only when ``gymnasium.make("ptgpo/ALFWorld-v0")`` runs.
:func:`register` adds a spec to :data:`ENVIRONMENTS` and to Gymnasium's registry. Another package
adds its environments without editing this one through the ``ptgpo.environments`` entry points
(see :mod:`ptgpo_envs.plugins`); the trainer accepts any environment id in Gymnasium's registry
whose environment honours the contract of :mod:`ptgpo_envs.core`.

No environment is registered with ``max_episode_steps``: each counts its horizon itself (its
``max_steps`` keyword), because Gymnasium's ``TimeLimit`` wrapper keeps a step counter that
``snapshot()``/``restore()`` on the environment cannot reach, and a restored episode would then be
truncated early. Pass ``max_steps=N`` to ``gymnasium.make`` to change the horizon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from ptgpo_envs.plugins import Registry

__all__ = ["ENVIRONMENTS", "EnvSpec", "check_env_id", "check_env_kwargs", "env_ids", "get_spec", "load_plugins",
           "make_env", "register"]


@dataclass(frozen=True)
class EnvSpec:
    """An environment: its Gymnasium id (``namespace/Name-vN``), entry point and one-line description."""

    id: str
    entry_point: str
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)


#: Every environment this package and its plugins registered, by id.
ENVIRONMENTS: Registry[EnvSpec] = Registry("environment", "ptgpo.environments")


def register(spec: EnvSpec) -> EnvSpec:
    """Add ``spec`` to :data:`ENVIRONMENTS` and to Gymnasium's registry (idempotent for the same spec)."""
    ENVIRONMENTS.register(spec.id, spec)
    if spec.id not in gym.registry:
        gym.register(id=spec.id, entry_point=spec.entry_point, kwargs=dict(spec.kwargs))
    return spec


for _spec in (
    EnvSpec("ptgpo/Household-v0", "ptgpo_envs.household:HouseholdEnv",
            "Procedural ALFWorld-like household: ALFWorld's grammar and six task types, pure Python."),
    EnvSpec("ptgpo/FrozenLake-v0", "ptgpo_envs.frozenlake:TextFrozenLakeEnv",
            "Gymnasium's FrozenLake rendered as text, with 'go left/right/up/down' actions."),
    EnvSpec("ptgpo/Sokoban-v0", "ptgpo_envs.sokoban:SokobanEnv",
            "Text Sokoban on generated, guaranteed-solvable rooms."),
    EnvSpec("ptgpo/WebShop-v0", "ptgpo_envs.webshop:WebShopEnv",
            "WebShop text mode: BM25 search, the original reward; bundled catalogue or the original data."),
    EnvSpec("ptgpo/ALFWorld-v0", "ptgpo_envs.alfworld:ALFWorldEnv",
            "ALFWorld on its real engine (alfworld + TextWorld PDDL): official splits or generated games."),
    EnvSpec("ptgpo/BabyAI-v0", "ptgpo_envs.babyai:BabyAIEnv",
            "BabyAI and MiniGrid levels on the real minigrid package, the agent's view in BabyAI-Text's words."),
):
    register(_spec)


def load_plugins() -> None:
    """Register the environments of installed packages (the ``ptgpo.environments`` entry points)."""
    ENVIRONMENTS.load_plugins()


def env_ids() -> list[str]:
    """The ids of every registered environment (this package's and its plugins')."""
    return ENVIRONMENTS.names()


def get_spec(env_id: str) -> EnvSpec:
    """The registration of ``env_id``; an unknown id raises with the closest registered names."""
    return ENVIRONMENTS.get(env_id)


def check_env_id(env_id: Any, where: str | None = None) -> None:
    """Refuse an id that is not in Gymnasium's registry (plugins loaded first), with the closest
    registered id or ptgpo's; ``where`` (the config field) starts the message."""
    load_plugins()
    if not isinstance(env_id, str) or env_id not in gym.registry:
        close = closest_env_id(str(env_id))
        hint = f" (did you mean {close!r}?)" if close else f"; ptgpo's: {', '.join(env_ids())}"
        raise ValueError(f"{where + ': ' if where else ''}unknown environment {env_id!r}{hint}")


def closest_env_id(env_id: str) -> str | None:
    """The registered id a user most likely meant by ``env_id``: ours (and our plugins') first, matched
    by the name without its namespace too (``FrozenLake-v0`` is ``ptgpo/FrozenLake-v0``, not
    Gymnasium's ``FrozenLake-v1``), then any id in Gymnasium's registry."""
    import difflib

    ours = env_ids()
    short = {spec_id.rsplit("/", 1)[-1].lower(): spec_id for spec_id in ours}
    name = env_id.rsplit("/", 1)[-1].lower()
    if name in short:
        return short[name]
    close = difflib.get_close_matches(name, list(short), n=1, cutoff=0.8)
    if close:
        return short[close[0]]
    close = difflib.get_close_matches(env_id, list(gym.registry), n=1)
    return close[0] if close else None


def make_env(env_id: str, env_kwargs: dict[str, Any] | None = None, max_steps: int | None = None):
    """Create an environment by id (:func:`check_env_id` first).

    ``max_steps`` is the environment's own horizon keyword (no ``TimeLimit`` wrapper: the
    environment counts its steps itself, so forking keeps the horizon).
    """
    check_env_id(env_id)
    kwargs = dict(env_kwargs or {})
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    return gym.make(env_id, **kwargs)


def check_env_kwargs(env_id: str, kwargs: dict[str, Any], where: str = "env_kwargs") -> None:
    """Build ``env_id`` with ``kwargs`` once and close it, so that a bad keyword or value fails now.

    Raises ``ValueError`` naming ``where`` (the config field or flag) with the environment's own
    message (an unknown keyword, a bad value, missing data files, a missing optional package). Runs
    before any model is built or file written: a corrected command then starts cleanly.
    """
    check_env_id(env_id)
    if not isinstance(kwargs, dict):
        raise ValueError(f"{where}: expected a mapping of keyword arguments, got {kwargs!r}")
    try:
        env = gym.make(env_id, **kwargs)
    except (TypeError, ValueError, OSError, ImportError) as error:
        raise ValueError(f"{where}: {env_id} with {kwargs} cannot be made: {error}") from None
    env.close()

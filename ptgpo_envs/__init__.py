"""PTGPO's multi-turn text environments, registered with Gymnasium under ``ptgpo/``.

``import ptgpo_envs`` registers them all, and those of installed plugins (the ``ptgpo.environments``
entry points), so that ``gymnasium.make`` sees every one::

    import gymnasium, ptgpo_envs
    env = gymnasium.make("ptgpo/Household-v0", difficulty="easy")
    observation, info = env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(info["admissible_actions"][0])

See :mod:`ptgpo_envs.core` for the contract (text observations and actions, ``info`` keys, forking
with ``snapshot``/``restore``, bad-input handling), :mod:`ptgpo_envs.registry` for adding an
environment (here or from another package) and making one (``make_env``), :mod:`ptgpo_envs.checker`
for checking one against what a run needs, and :mod:`ptgpo_envs.vector` for stepping many at once.
"""

from ptgpo_envs.checker import FEATURES, check_environment
from ptgpo_envs.core import Snapshot, TextEnv, TextSpace, held_out, layout_hash
from ptgpo_envs.registry import (
    ENVIRONMENTS,
    EnvSpec,
    check_env_id,
    check_env_kwargs,
    env_ids,
    get_spec,
    load_plugins,
    make_env,
    register,
)

__all__ = ["ENVIRONMENTS", "FEATURES", "EnvSpec", "Snapshot", "TextEnv", "TextSpace", "check_env_id", "check_env_kwargs",
           "check_environment", "env_ids", "get_spec", "held_out", "layout_hash", "load_plugins", "make_env", "register"]

# Last, once every name above exists: a plugin's register() imports this package's register.
load_plugins()

"""PPO's learned critic: turn-level GAE (:mod:`.gae`), the clipped value loss (:mod:`.loss`), its
settings (:mod:`.settings`, the ``algorithm.critic`` section), the value head on the policy's trunk
(:mod:`.head`) and the trainer's component that scores, targets and trains it (:mod:`.component`).

The package's ``__init__`` imports nothing: the estimators (:mod:`ptgpo_algos.advantages`) read
:mod:`.gae` alone, below the modules that need torch or the config.
"""
